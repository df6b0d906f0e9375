// What pure code says when it refuses a value: a machine code and a sentence that names the field.
// Validators and domain functions return one (never an HTTP error); services/http/ decides the answer
// it becomes (its status), so util/ never speaks HTTP.

/** Every code a pure check can refuse with (docs/http-api.md lists them with their statuses). */
export type ProblemCode =
  | 'invalid_body'
  | 'invalid_json'
  | 'unknown_field'
  | 'invalid_url'
  | 'invalid_cadence'
  | 'invalid_limit'
  | 'invalid_queues'
  | 'invalid_credits'
  | 'invalid_cursor'
  | 'invalid_queue'
  | 'invalid_query'
  | 'invalid_scope'
  | 'invalid_name'
  | 'invalid_username'
  | 'invalid_fleetId'
  | 'payload_too_large'
  | 'too_many_targets'
  | 'too_many_urls';

export class Problem {
  constructor(
    readonly code: ProblemCode,
    readonly message: string,
  ) {}
}

/** A checked value, or the problem that refused it. */
export type Checked<T> = T | Problem;

export function isProblem(v: unknown): v is Problem {
  return v instanceof Problem;
}
