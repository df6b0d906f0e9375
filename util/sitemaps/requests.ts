// The bodies and query strings of the sitemap routes (docs/sitemaps.md). A body's shape is the
// document's (docs/openapi.yaml, registerSitemap and refreshSitemap); what a shape cannot say follows as
// named checks: a URL's bytes and parse and its credentials, a cadence within the configured bounds.
// Each answers a typed value or a Problem; services/http/routes/sitemaps.ts turns a Problem into its 400.
import { Problem, type Checked } from '../problem.js';
import { requestShape, type RequestShape } from '../requests/shape.js';
import { cadenceProblem, urlProblem } from '../schedule/targetChecks.js';

export interface RegisterRequest {
  url: string;
  cadenceMs: number | null;
  deleteRemoved: boolean;
}

/** The document's shapes of the sitemap bodies; a bad `url` or `cadenceMs` has its own code. */
export const SITEMAP_SHAPES = {
  /** POST /render_queue/sitemaps. */
  register: requestShape('registerSitemap', 'body', { url: 'invalid_url', cadenceMs: 'invalid_cadence' }),
  /** POST /render_queue/sitemaps/{id}/refresh. */
  refresh: requestShape('refreshSitemap', 'body'),
};

/** registerSitemap's body as the schema vouched for it. */
interface RegisterFields {
  url: string;
  cadenceMs?: number | null;
  deleteRemoved?: boolean | null;
}

export function checkRegister(
  body: unknown,
  shape: RequestShape = SITEMAP_SHAPES.register,
): Checked<RegisterRequest> {
  const problem = shape.check(body);
  if (problem) return problem;
  const o = body as RegisterFields;
  const up = urlProblem(o.url);
  if (up !== null) return new Problem('invalid_url', up);
  // The URL is stored and shown to every reader of the sitemap list: no password belongs in it.
  const url = new URL(o.url);
  if (url.username !== '' || url.password !== '')
    return new Problem('invalid_url', 'url must not contain credentials');
  const cadenceMs = o.cadenceMs ?? null;
  if (cadenceMs !== null) {
    const cp = cadenceProblem(cadenceMs);
    if (cp) return new Problem('invalid_cadence', cp);
  }
  return { url: o.url, cadenceMs, deleteRemoved: o.deleteRemoved === true };
}

/** POST …/refresh: no body, or the document's {allowLargeRemoval}. */
export function checkRefresh(
  body: unknown,
  shape: RequestShape = SITEMAP_SHAPES.refresh,
): Checked<{ allowLargeRemoval: boolean }> {
  if (body === undefined) return { allowLargeRemoval: false };
  const problem = shape.check(body);
  if (problem) return problem;
  return { allowLargeRemoval: (body as { allowLargeRemoval?: boolean | null }).allowLargeRemoval === true };
}

export const MAX_LIST_LIMIT = 1000;
const DEFAULT_LIST_LIMIT = 100;

/** GET …/sitemaps?limit=&cursor= */
export function checkListQuery(
  query: URLSearchParams,
): Checked<{ limit: number; cursor: string | undefined }> {
  const l = query.get('limit');
  let limit = DEFAULT_LIST_LIMIT;
  if (l !== null) {
    if (!/^\d{1,7}$/.test(l) || Number(l) < 1 || Number(l) > MAX_LIST_LIMIT)
      return new Problem('invalid_query', `limit must be an integer from 1 to ${MAX_LIST_LIMIT}`);
    limit = Number(l);
  }
  const c = query.get('cursor');
  if (c !== null && (c.length === 0 || c.length > 200))
    return new Problem('invalid_query', 'cursor must be the cursor a previous page answered');
  return { limit, cursor: c ?? undefined };
}

/** DELETE …/sitemaps/{id}?deleteTargets=: whether its URLs are deleted rather than unlinked. */
export function checkForgetQuery(query: URLSearchParams): Checked<{ deleteTargets: boolean }> {
  const d = query.get('deleteTargets');
  if (d !== null && d !== 'true' && d !== 'false')
    return new Problem('invalid_query', 'deleteTargets must be true or false');
  return { deleteTargets: d === 'true' };
}
