// Feeding endpoints (docs/fleets.md): targets, delete, discover.
import { checkTargetsBody, checkUrlList } from '../../../util/http/input.js';
import { type ApiRequest, type ApiResponse, reply, type Router, type RouteEntry } from '../router.js';
import type { TargetInput } from '../../../util/schedule/rules.js';

// targets, discover and delete bodies are at most 16 MiB. 10,000 targets of 1,900-byte URLs with
// every field set are about 20 MB, so the largest batches need URLs under ~1,500 bytes on average.
const FEED_BODY_LIMIT = 16 << 20;

export interface FeedingRouteDeps {
  /** The schedule owner's writes (services/schedule/store.ts). */
  fileTargets: (targets: readonly TargetInput[], now: number) => Promise<number>;
  deleteTargets: (urls: readonly string[]) => Promise<number>;
  discoverUrls: (urls: readonly string[], now: number) => Promise<number>;
  /** The page store's delete (services/pages/store.ts). */
  deletePages: (urls: string[]) => Promise<number>;
}

const feedLimit = () => ({ maxBodyBytes: () => FEED_BODY_LIMIT });

/** `POST /render_queue/targets`: files every target that passes its checks, answers the others. */
async function fileTargets(deps: FeedingRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const now = Date.now();
  const { accepted, rejected } = checkTargetsBody(req.body, now);
  const upserted = await deps.fileTargets(
    accepted.map((a) => a.target),
    now,
  );
  return reply({ upserted, rejected });
}

/** `DELETE /render_queue/targets`: the rows and their pages. */
async function deleteTargets(deps: FeedingRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const { urls, rejected } = checkUrlList(req.body);
  const deleted = await deps.deleteTargets(urls.map((u) => u.url));
  // A row's page goes with it (the page sweep removes any a racing result stores after this).
  await deps.deletePages(urls.map((u) => u.url));
  return reply(rejected.length ? { deleted, rejected } : { deleted });
}

/** `POST /render_queue/discover`: unverified rows, only where none exists. */
async function discover(deps: FeedingRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const { urls, rejected } = checkUrlList(req.body);
  const filed = await deps.discoverUrls(
    urls.map((u) => u.url),
    Date.now(),
  );
  return reply({ filed, rejected });
}

const FEEDING_ROUTES: readonly RouteEntry<FeedingRouteDeps>[] = [
  {
    method: 'POST',
    path: '/render_queue/targets',
    caller: 'feeder',
    handler: fileTargets,
    options: feedLimit,
  },
  {
    method: 'DELETE',
    path: '/render_queue/targets',
    caller: 'feeder',
    handler: deleteTargets,
    options: feedLimit,
  },
  {
    method: 'POST',
    path: '/render_queue/discover',
    caller: 'discover',
    handler: discover,
    options: feedLimit,
  },
];

export function registerFeeding(router: Router, deps: FeedingRouteDeps): void {
  router.register(FEEDING_ROUTES, deps);
}
