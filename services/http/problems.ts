// How a Problem of the pure core is answered (docs/http-api.md): a body or a count over its limit is
// 413, every other problem of a request 400, always `{error, code}` with the problem's own code and
// sentence. The one place a util/ refusal becomes HTTP.
import { HttpError } from '../runtime/httpError.js';
import { isProblem, type Checked, type Problem, type ProblemCode } from '../../util/problem.js';

const TOO_LARGE: ReadonlySet<ProblemCode> = new Set([
  'payload_too_large',
  'too_many_targets',
  'too_many_urls',
]);

export function answerOf(p: Problem): HttpError {
  return new HttpError(TOO_LARGE.has(p.code) ? 413 : 400, p.code, p.message);
}

/** The checked value, or the problem thrown as its answer. */
export function orRefuse<T>(v: Checked<T>): T {
  if (isProblem(v)) throw answerOf(v);
  return v;
}
