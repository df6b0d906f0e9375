// The one error shape of the API: `{error, code}` with a 4xx for the caller's mistakes. Any service may
// throw one (busy, revoked, superseded); the router (services/http/router.ts) answers it. The pure core
// never does: it returns a Problem (util/problem.ts), which services/http/problems.ts turns into one.

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra?: Record<string, unknown>,
    /** Extra response headers (e.g. `retry-after`); values must be plain ASCII. */
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }

  /** The status under the name Harper answers with, for a refusal a host app's resource lets through. */
  get statusCode(): number {
    return this.status;
  }
}

export const badRequest = (code: string, message: string) => new HttpError(400, code, message);
