// Feeding endpoints (docs/fleets.md): targets, delete, discover.
import { TARGET_SHAPES, checkTargetsBody, checkUrlList } from '../../../util/schedule/targetChecks.js';
import { orRefuse } from '../problems.js';
import { reply, type Router } from '../router.js';
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

export function registerFeeding(
  router: Router,
  { fileTargets, deleteTargets, discoverUrls, deletePages }: FeedingRouteDeps,
): void {
  router.route(
    'POST',
    '/render_queue/targets',
    'feeder',
    async (req) => {
      const now = Date.now();
      const { accepted, rejected } = orRefuse(checkTargetsBody(req.body, now));
      const upserted = await fileTargets(
        accepted.map((a) => a.target),
        now,
      );
      return reply({ upserted, rejected });
    },
    { maxBodyBytes: () => FEED_BODY_LIMIT },
  );

  router.route(
    'DELETE',
    '/render_queue/targets',
    'feeder',
    async (req) => {
      const { urls, rejected } = orRefuse(checkUrlList(req.body));
      const deleted = await deleteTargets(urls.map((u) => u.url));
      // A row's page goes with it (the page sweep removes any a racing result stores after this).
      await deletePages(urls.map((u) => u.url));
      return reply(rejected.length ? { deleted, rejected } : { deleted });
    },
    { maxBodyBytes: () => FEED_BODY_LIMIT },
  );

  router.route(
    'POST',
    '/render_queue/discover',
    'discover',
    async (req) => {
      const { urls, rejected } = orRefuse(checkUrlList(req.body, undefined, TARGET_SHAPES.discover));
      const filed = await discoverUrls(
        urls.map((u) => u.url),
        Date.now(),
      );
      return reply({ filed, rejected });
    },
    { maxBodyBytes: () => FEED_BODY_LIMIT },
  );
}
