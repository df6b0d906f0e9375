// Feeding endpoints (docs/fleets.md): targets, delete, discover.
import { TARGET_SHAPES, checkUrlList } from '../../../util/schedule/targetChecks.js';
import type { Filing } from '../filing.js';
import { orRefuse } from '../problems.js';
import { type ApiRequest, type ApiResponse, reply, type Router, type RouteEntry } from '../router.js';

// targets, discover and delete bodies are at most 16 MiB. 10,000 targets of 1,900-byte URLs with
// every field set are about 20 MB, so the largest batches need URLs under ~1,500 bytes on average.
const FEED_BODY_LIMIT = 16 << 20;

export interface FeedingRouteDeps {
  /** Filing and deleting, as the in-process API answers them too (../filing.ts). */
  filing: Filing;
  /** The schedule owner's discovery write (services/schedule/store.ts). */
  discoverUrls: (urls: readonly string[], now: number) => Promise<number>;
  /** Whether a live retired entry names the URL (services/schedule/store.ts isRetired). */
  isRetired: (url: string, now: number) => boolean;
}

const feedLimit = () => ({ maxBodyBytes: () => FEED_BODY_LIMIT });

/** `POST /render_queue/targets`: files every target that passes its checks, answers the others. */
async function fileTargets(deps: FeedingRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  return reply(await deps.filing.fileTargets(req.body));
}

/** `DELETE /render_queue/targets`: the rows and their pages. */
async function deleteTargets(deps: FeedingRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  return reply(await deps.filing.deleteTargets(req.body));
}

/** `POST /render_queue/discover`: unverified rows, only where none exists and no verdict retired the URL. */
async function discover(deps: FeedingRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const { urls, rejected } = orRefuse(checkUrlList(req.body, undefined, TARGET_SHAPES.discover));
  const now = Date.now();
  // A URL a render verdict retired is refused while its retired entry lasts: discovery must not undo a
  // verdict. A feeder (the authority) may file it again through /render_queue/targets.
  const open = urls.filter((u) => {
    if (!deps.isRetired(u.url, now)) return true;
    rejected.push({
      index: u.index,
      error: 'url was retired by a render verdict (GET /prerender_admin/retired)',
    });
    return false;
  });
  rejected.sort((a, b) => a.index - b.index);
  const filed = await deps.discoverUrls(
    open.map((u) => u.url),
    now,
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
