// The bodies of the sitemap routes (docs/openapi.yaml, docs/sitemaps.md), checked into typed values or a
// typed problem; services/http/routes/sitemaps.ts turns a problem into its 400.
import { describeType, echo } from '../text.js';
import { MAX_CADENCE_MS, MIN_CADENCE_MS, urlProblem } from '../schedule/targetChecks.js';

export interface Problem {
  code: string;
  message: string;
}

export interface RegisterRequest {
  url: string;
  cadenceMs: number | null;
  deleteRemoved: boolean;
}

const REGISTER_FIELDS: readonly string[] = ['url', 'cadenceMs', 'deleteRemoved'];

type Checked = { ok: true; o: Record<string, unknown> } | { ok: false; problem: Problem };

function bodyObject(body: unknown, allowed: readonly string[]): Checked {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return {
      ok: false,
      problem: { code: 'invalid_body', message: `the body must be a JSON object, not ${describeType(body)}` },
    };
  const o = body as Record<string, unknown>;
  for (const k of Object.keys(o))
    if (!allowed.includes(k))
      return {
        ok: false,
        problem: { code: 'unknown_field', message: `unknown field ${echo(k)} in the body` },
      };
  return { ok: true, o };
}

export function checkRegister(body: unknown): RegisterRequest | Problem {
  const checked = bodyObject(body, REGISTER_FIELDS);
  if (!checked.ok) return checked.problem;
  const o = checked.o;
  const up = urlProblem(o.url);
  if (up !== null) return { code: 'invalid_url', message: up };
  const url = new URL(o.url as string);
  if (url.username !== '' || url.password !== '')
    return { code: 'invalid_url', message: 'url must not contain credentials' };
  let cadenceMs: number | null = null;
  if (o.cadenceMs !== undefined && o.cadenceMs !== null) {
    if (typeof o.cadenceMs !== 'number' || !Number.isSafeInteger(o.cadenceMs))
      return { code: 'invalid_cadence', message: 'cadenceMs must be an integer (ms)' };
    if (o.cadenceMs < MIN_CADENCE_MS || o.cadenceMs > MAX_CADENCE_MS)
      return {
        code: 'invalid_cadence',
        message: `cadenceMs must be between ${MIN_CADENCE_MS} and ${MAX_CADENCE_MS}`,
      };
    cadenceMs = o.cadenceMs;
  }
  let deleteRemoved = false;
  if (o.deleteRemoved !== undefined && o.deleteRemoved !== null) {
    if (typeof o.deleteRemoved !== 'boolean')
      return { code: 'invalid_body', message: 'deleteRemoved must be a boolean' };
    deleteRemoved = o.deleteRemoved;
  }
  return { url: o.url as string, cadenceMs, deleteRemoved };
}

/** POST …/refresh: an empty body, or {allowLargeRemoval}. */
export function checkRefresh(body: unknown): { allowLargeRemoval: boolean } | Problem {
  if (body === undefined) return { allowLargeRemoval: false };
  const checked = bodyObject(body, ['allowLargeRemoval']);
  if (!checked.ok) return checked.problem;
  const o = checked.o;
  if (
    o.allowLargeRemoval !== undefined &&
    o.allowLargeRemoval !== null &&
    typeof o.allowLargeRemoval !== 'boolean'
  )
    return { code: 'invalid_body', message: 'allowLargeRemoval must be a boolean' };
  return { allowLargeRemoval: o.allowLargeRemoval === true };
}

export const MAX_LIST_LIMIT = 1000;
const DEFAULT_LIST_LIMIT = 100;

/** GET …/sitemaps?limit=&cursor= */
export function checkListQuery(
  query: URLSearchParams,
): { limit: number; cursor: string | undefined } | Problem {
  const l = query.get('limit');
  let limit = DEFAULT_LIST_LIMIT;
  if (l !== null) {
    if (!/^\d{1,7}$/.test(l) || Number(l) < 1 || Number(l) > MAX_LIST_LIMIT)
      return { code: 'invalid_query', message: `limit must be an integer from 1 to ${MAX_LIST_LIMIT}` };
    limit = Number(l);
  }
  const c = query.get('cursor');
  if (c !== null && (c.length === 0 || c.length > 200))
    return { code: 'invalid_query', message: 'cursor must be the cursor a previous page answered' };
  return { limit, cursor: c ?? undefined };
}
