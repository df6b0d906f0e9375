// A renderer's answer in the wire form a result takes (docs/fleets.md, "Reporting a result"), and the answer to a result
// sent on its own (the raw-bytes framing) in the shape of one entry of a batch's `results`.
import type { Answer } from './transport.js';
import type { Job, RenderResult, ResultAnswer, WireResult } from './types.js';

/** A message this long says all there is; the server caps what it stores anyway. */
const MAX_ERROR_MESSAGE = 1_000;

const OUTCOMES: readonly string[] = ['rendered', 'failed', 'redirected', 'non-indexable'];

/** The wire form of a renderer's answer; anything malformed becomes a `failed` saying why. */
export function toWire(job: Job, r: RenderResult, renderTimeMs: number): WireResult {
  const base = {
    id: job.id,
    leaseToken: job.leaseToken,
    renderTimeMs: Math.max(0, Math.round(renderTimeMs)),
  };
  const bad = (message: string): WireResult => ({
    ...base,
    outcome: 'failed',
    statusCode: null,
    contentType: null,
    body: null,
    error: { name: 'InvalidRenderResult', message },
  });
  if (typeof r !== 'object' || r === null) return bad('render returned no result object');
  if (!OUTCOMES.includes(r.outcome)) return bad(`render returned outcome ${JSON.stringify(r.outcome)}`);
  const status = r.statusCode ?? null;
  if (status !== null && !(Number.isInteger(status) && status >= 0 && status <= 999))
    return bad('render returned a statusCode that is not an integer HTTP status');
  if (r.body != null && typeof r.body !== 'string') return bad('render returned a body that is not a string');
  if (r.contentType != null && typeof r.contentType !== 'string')
    return bad('render returned a contentType that is not a string');
  const wire: WireResult = {
    ...base,
    outcome: r.outcome,
    statusCode: status,
    contentType: r.contentType ?? null,
    body: r.body ?? null,
  };
  if (r.outcome === 'failed' && r.error)
    wire.error = {
      name: String(r.error.name ?? 'Error').slice(0, 200),
      message: String(r.error.message ?? '').slice(0, MAX_ERROR_MESSAGE),
    };
  return wire;
}

/** The `job_result` answer to one framed result, in the shape of one `results` entry. */
export function singleAnswer(id: string, a: Answer): ResultAnswer {
  const j = (a.json ?? {}) as Record<string, unknown>;
  const dup = j.duplicate === true ? { duplicate: true as const } : {};
  if (a.status === 200 && j.accepted === true)
    return {
      id,
      accepted: true,
      nextRenderTime: j.nextRenderTime === null ? null : Number(j.nextRenderTime),
      ...dup,
    };
  const code = a.status === 409 ? 'superseded' : typeof j.code === 'string' ? j.code : `http_${a.status}`;
  return { id, accepted: false, code, error: typeof j.error === 'string' ? j.error : undefined, ...dup };
}

/** A thrown value as a result's `error`, its message capped. */
export function errorOf(e: unknown): { name: string; message: string } {
  if (e instanceof Error)
    return { name: e.name || 'Error', message: (e.message || String(e)).slice(0, MAX_ERROR_MESSAGE) };
  return { name: 'Error', message: String(e).slice(0, MAX_ERROR_MESSAGE) };
}
