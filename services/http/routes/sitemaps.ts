// Sitemap endpoints (docs/sitemaps.md): feeders and super_user register, refresh and forget; observer
// roles may read. The walk runs in the background: a registration or refresh answers 202 at once.
import { HttpError, badRequest, echo } from '../../../util/http/errors.js';
import {
  checkListQuery,
  checkRefresh,
  checkRegister,
  type Problem,
} from '../../../util/sitemaps/requests.js';
import type { SitemapService } from '../../sitemaps/service.js';
import { type ApiRequest, reply, type Router } from '../router.js';

/** Sitemap ids are 24 hex characters (services/sitemaps/service.ts sitemapIdOf). */
const SITEMAP_ID = /^[0-9a-f]{24}$/;

export interface SitemapRouteDeps {
  sitemaps: SitemapService;
}

function orThrow<T extends object>(v: T | Problem): T {
  if ('code' in v && 'message' in v && typeof v.code === 'string') throw badRequest(v.code, v.message);
  return v as T;
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

export function registerSitemaps(router: Router, { sitemaps }: SitemapRouteDeps): void {
  router.route('POST', '/render_queue/sitemaps', 'feeder', async (req) => {
    const body = orThrow(checkRegister(req.body));
    const { created, view } = await sitemaps.register(req.user.username ?? '', body);
    return reply(view, created ? 202 : 200);
  });

  router.route(
    'GET',
    '/render_queue/sitemaps',
    'feeder',
    async (req) => {
      const q = orThrow(checkListQuery(req.query));
      return reply(sitemaps.list(q.limit, q.cursor));
    },
    { observerRead: true },
  );

  router.route(
    'GET',
    '/render_queue/sitemaps/*',
    'feeder',
    async (req) => {
      exactly(req, 1);
      return reply(sitemaps.get(sitemapId(req)));
    },
    { observerRead: true },
  );

  router.route('POST', '/render_queue/sitemaps/*', 'feeder', async (req) => {
    exactly(req, 2);
    if (req.params[1] !== 'refresh')
      throw new HttpError(404, 'not_found', `no endpoint at ${echo(req.path)}`);
    const id = sitemapId(req);
    const { allowLargeRemoval } = orThrow(checkRefresh(req.body));
    return reply(await sitemaps.refresh(id, allowLargeRemoval), 202);
  });

  router.route('DELETE', '/render_queue/sitemaps/*', 'feeder', async (req) => {
    exactly(req, 1);
    const id = sitemapId(req);
    const d = req.query.get('deleteTargets');
    if (d !== null && d !== 'true' && d !== 'false')
      throw badRequest('invalid_query', 'deleteTargets must be true or false');
    const r = await sitemaps.remove(id, d === 'true');
    return reply({ forgotten: true, unlinked: r.unlinked, deletedTargets: r.deleted });
  });
}
