// Sitemap endpoints (docs/sitemaps.md): feeders and super_user register, refresh and forget; observer
// roles may read. The walk runs in the background: a registration or refresh answers 202 at once.
import { HttpError } from '../../runtime/httpError.js';
import { echo } from '../../../util/text.js';
import {
  checkForgetQuery,
  checkListQuery,
  checkRefresh,
  checkRegister,
} from '../../../util/sitemaps/requests.js';
import type { SitemapService } from '../../sitemaps/service.js';
import { orRefuse } from '../problems.js';
import { type ApiRequest, type ApiResponse, reply, type Router, type RouteEntry } from '../router.js';

/** Sitemap ids are 24 hex characters (services/sitemaps/service.ts sitemapIdOf). */
const SITEMAP_ID = /^[0-9a-f]{24}$/;

export interface SitemapRouteDeps {
  sitemaps: SitemapService;
}

/** The id of `…/sitemaps/<id>[/<action>]`, or a 404 (an id that cannot exist names nothing). */
function sitemapId(req: ApiRequest): string {
  const id = req.params[0] ?? '';
  if (!SITEMAP_ID.test(id)) throw new HttpError(404, 'not_found', `no sitemap with id ${echo(id)}`);
  return id;
}

function exactly(req: ApiRequest, n: number): void {
  if (req.params.length !== n) throw new HttpError(404, 'not_found', `no endpoint at ${echo(req.path)}`);
}

/** `POST /render_queue/sitemaps`: registers a sitemap and starts its first walk (202), or finds it (200). */
async function register(deps: SitemapRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const body = orRefuse(checkRegister(req.body));
  const { created, view } = await deps.sitemaps.register(req.user.username ?? '', body);
  return reply(view, created ? 202 : 200);
}

/** `GET /render_queue/sitemaps`: the registered sitemaps, a page at a time. */
async function list(deps: SitemapRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const q = orRefuse(checkListQuery(req.query));
  return reply(deps.sitemaps.list(q.limit, q.cursor));
}

/** `GET /render_queue/sitemaps/{id}`: one sitemap, its progress and its last walk's figures. */
async function show(deps: SitemapRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  exactly(req, 1);
  return reply(deps.sitemaps.get(sitemapId(req)));
}

/** `POST /render_queue/sitemaps/{id}/refresh`: walks it now. */
async function refresh(deps: SitemapRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  exactly(req, 2);
  if (req.params[1] !== 'refresh') throw new HttpError(404, 'not_found', `no endpoint at ${echo(req.path)}`);
  const id = sitemapId(req);
  const { allowLargeRemoval } = orRefuse(checkRefresh(req.body));
  return reply(await deps.sitemaps.refresh(id, allowLargeRemoval), 202);
}

/** `DELETE /render_queue/sitemaps/{id}`: forgets it and unlinks its URLs (`?deleteTargets=true` deletes them). */
async function forget(deps: SitemapRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  exactly(req, 1);
  const id = sitemapId(req);
  const { deleteTargets } = orRefuse(checkForgetQuery(req.query));
  const r = await deps.sitemaps.remove(id, deleteTargets);
  return reply({ forgotten: true, unlinked: r.unlinked, deletedTargets: r.deleted });
}

const observerRead = () => ({ observerRead: true });

const SITEMAP_ROUTES: readonly RouteEntry<SitemapRouteDeps>[] = [
  { method: 'POST', path: '/render_queue/sitemaps', caller: 'feeder', handler: register },
  { method: 'GET', path: '/render_queue/sitemaps', caller: 'feeder', handler: list, options: observerRead },
  { method: 'GET', path: '/render_queue/sitemaps/*', caller: 'feeder', handler: show, options: observerRead },
  { method: 'POST', path: '/render_queue/sitemaps/*', caller: 'feeder', handler: refresh },
  { method: 'DELETE', path: '/render_queue/sitemaps/*', caller: 'feeder', handler: forget },
];

export function registerSitemaps(router: Router, deps: SitemapRouteDeps): void {
  router.register(SITEMAP_ROUTES, deps);
}
