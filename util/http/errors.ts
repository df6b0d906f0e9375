// The one error shape of the API: `{error, code}` with a 4xx for the caller's mistakes.
import { quotedCut } from '../text.js';

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

/** a string a caller sent is echoed at most this long. */
export const MAX_ECHO_CHARS = 200;

/**
 * A caller's value fit to quote in an answer or a log line: a string is cut to 200 characters, made
 * well-formed and JSON-quoted (no newline, no lone surrogate); anything else is named by its type only,
 * so no nested value is ever stringified.
 */
export function echo(v: unknown): string {
  if (typeof v !== 'string') return v === null ? 'null' : Array.isArray(v) ? 'an array' : `a ${typeof v}`;
  return quotedCut(v, MAX_ECHO_CHARS);
}
