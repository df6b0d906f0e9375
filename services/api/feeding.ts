// Feeding endpoints (API.md "Feeding"): targets, delete, discover.
import { checkTargetsBody, checkUrlList } from '../../util/validateInput.js';
import { route, reply } from '../http.js';
import { deletePages } from '../pages.js';
import { deleteTargets, discoverUrls, fileTargets } from '../schedule.js';

// 10,000 targets of up to 1,900-byte URLs plus their fields fit well inside 32 MiB.
const FEED_BODY_LIMIT = 32 << 20;

export function registerFeeding(): void {
  route(
    'POST',
    '/render_queue/targets',
    'feeder',
    async (req) => {
      const { accepted, rejected } = checkTargetsBody(req.body);
      const upserted = await fileTargets(
        accepted.map((a) => a.target),
        Date.now(),
      );
      return reply({ upserted, rejected });
    },
    { maxBodyBytes: () => FEED_BODY_LIMIT },
  );

  route(
    'DELETE',
    '/render_queue/targets',
    'feeder',
    async (req) => {
      const { urls, rejected } = checkUrlList(req.body);
      const deleted = await deleteTargets(urls.map((u) => u.url));
      // A row's page goes with it (the page sweep removes any a racing result stores after this).
      await deletePages(urls.map((u) => u.url));
      return reply(rejected.length ? { deleted, rejected } : { deleted });
    },
    { maxBodyBytes: () => FEED_BODY_LIMIT },
  );

  route(
    'POST',
    '/render_queue/discover',
    'discover',
    async (req) => {
      const { urls, rejected } = checkUrlList(req.body);
      const filed = await discoverUrls(
        urls.map((u) => u.url),
        Date.now(),
      );
      return reply({ filed, rejected });
    },
    { maxBodyBytes: () => FEED_BODY_LIMIT },
  );
}
