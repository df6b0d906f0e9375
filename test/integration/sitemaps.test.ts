// Sitemaps end to end (docs/sitemaps.md): a real Harper (2 workers) walks a loopback site on 127.0.0.1,
// allow-listed exactly in sitemaps.allowCidrs (the first test proves the default refuses it). The site
// serves robots.txt, an index and gzipped children with ETags; the hostile files are served beside them.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { postConfig } from '../api.js';
import { startHarper, type HarperInstance } from '../harness.js';
import { SitemapSite, sitemapIndex, urlset, type UrlEntry } from '../sitemapSite.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

let h: HarperInstance;
const site = new SitemapSite();
const DAY = 86_400_000;
const HOUR = 3_600_000;
/** Small enough that the hostile files hit it at once, large enough for every honest file here. */
const MAX_FILE_BYTES = 256 * 1024;

interface Walk {
  state: string;
  reason: string | null;
  filesFetched: number;
  filesNotModified: number;
  filesFailed: number;
  refusals: Record<string, number>;
  urlsSeen: number;
  filed: number;
  linked: number;
  changed: number;
  unchanged: number;
  rejected: number;
  rejectedSample: Array<{ url: string; reason: string }>;
  removed: number;
  duplicates: number;
  bytes: number;
  errors: Array<{ url: string; reason: string }>;
}
interface Sitemap {
  id: string;
  url: string;
  state: string;
  urlCount: number;
  lastWalk: Walk | null;
}
interface Row {
  fromSitemap: boolean;
  effectiveInterval: number | null;
  nextRenderTime: number;
  changedAt: number | null;
  lastRenderedAt: number | null;
  sitemapId?: string | null;
}

async function row(url: string): Promise<Row | null> {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  return (r.json as { row: Row | null }).row;
}

async function register(url: string, extra: Record<string, unknown> = {}): Promise<Sitemap> {
  const r = await h.fetch('/render_queue/sitemaps', { body: { url, ...extra } });
  assert.equal(r.status, 202, r.text);
  return r.json as Sitemap;
}

/** Waits for the sitemap's walk to end (state no longer walking) and answers it. */
async function walked(id: string, afterWalk?: string): Promise<Sitemap> {
  return until(
    `the walk of ${id} to end`,
    async () => {
      const r = await h.fetch(`/render_queue/sitemaps/${id}`);
      assert.equal(r.status, 200, r.text);
      const s = r.json as Sitemap & { lastWalk: (Walk & { walkId: string }) | null };
      return s.state !== 'walking' && s.lastWalk !== null && s.lastWalk.walkId !== afterWalk ? s : undefined;
    },
    60_000,
    100,
  );
}

async function refresh(id: string, body?: unknown): Promise<Sitemap> {
  const before = (
    (await h.fetch(`/render_queue/sitemaps/${id}`)).json as { lastWalk: { walkId: string } | null }
  ).lastWalk?.walkId;
  const r = await h.fetch(
    `/render_queue/sitemaps/${id}/refresh`,
    body === undefined ? { method: 'POST' } : { body },
  );
  assert.equal(r.status, 202, r.text);
  return walked(id, before);
}

const pages = (prefix: string, n: number, extra: Partial<UrlEntry> = {}): UrlEntry[] =>
  Array.from({ length: n }, (_, i) => ({ loc: site.url(`${prefix}${i}`), ...extra }));

before(
  async () => {
    await site.start();
    h = await startHarper();
    await h.addUser('feeder', 'feeder-pass', 'render_feeder');
    await h.addUser('watcher', 'watcher-pass', 'render_observer');
    await postConfig(h, { queue: { keeper: { publishInterval: 200 } } });
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
  await site.stop();
});

test('a loopback sitemap is refused by default; only an exact sitemaps.allowCidrs entry opens it', async () => {
  site.set('/refused.xml', urlset(pages('/refused/', 1)));
  const url = site.url('/refused.xml');
  const httpOff = await h.fetch('/render_queue/sitemaps', { body: { url } });
  assert.equal(httpOff.status, 400, httpOff.text);
  assert.equal(httpOff.json.code, 'invalid_url');
  await postConfig(h, { sitemaps: { allowHttp: true } });
  const loopback = await h.fetch('/render_queue/sitemaps', { body: { url } });
  assert.equal(loopback.status, 400, loopback.text);
  assert.equal(loopback.json.code, 'address_refused');
  assert.match(loopback.json.error, /loopback/);
  // A range never opens loopback, only an exact entry does; and notify's list opens nothing here.
  await postConfig(h, { sitemaps: { allowCidrs: ['127.0.0.0/8'] }, notify: { allowCidrs: ['127.0.0.1'] } });
  const ranged = await h.fetch('/render_queue/sitemaps', { body: { url } });
  assert.equal(ranged.status, 400, ranged.text);
  assert.equal(ranged.json.code, 'address_refused');
  assert.equal(site.hitsOf('/refused.xml').ok, 0, 'nothing was fetched from a refused host');
  await postConfig(h, {
    sitemaps: { allowCidrs: ['127.0.0.1'], maxFileBytes: MAX_FILE_BYTES },
    notify: { allowCidrs: [] },
  });
  const opened = await register(url);
  assert.equal((await walked(opened.id)).lastWalk?.filed, 1);
});

// The main site: robots.txt → index → a gzipped child and a plain one.
const A = () => [
  { loc: site.url('/a/daily'), changefreq: 'daily' },
  { loc: site.url('/a/hourly'), changefreq: 'hourly' },
  { loc: site.url('/a/weekly'), changefreq: 'weekly' },
];
let bPages = (): UrlEntry[] => [
  ...pages('/b/', 20, { changefreq: 'monthly' }),
  { loc: site.url('/b/plain') },
];
let mainId = '';

test('a robots.txt files every URL of its index, with cadences from changefreq', async () => {
  site.set(
    '/robots.txt',
    `User-agent: *\nDisallow: /private\nSitemap: ${site.url('/index.xml')}\n`,
    'text/plain',
  );
  site.set('/index.xml', sitemapIndex([site.url('/a.xml.gz'), site.url('/b.xml')]));
  site.set('/a.xml.gz', urlset(A()));
  site.set('/b.xml', urlset(bPages()));
  const s = await register(site.url('/robots.txt'));
  assert.equal(s.state, 'walking');
  mainId = s.id;
  const done = await walked(s.id);
  assert.equal(done.state, 'idle', JSON.stringify(done.lastWalk));
  const w = done.lastWalk!;
  assert.equal(w.filesFetched, 4);
  assert.equal(w.urlsSeen, 24);
  assert.equal(w.filed, 24);
  assert.equal(done.urlCount, 24);
  const daily = await row(site.url('/a/daily'));
  assert.equal(daily?.fromSitemap, true);
  assert.equal(daily?.sitemapId, s.id);
  assert.equal(daily?.effectiveInterval, DAY);
  // hourly is floored at sitemaps.minCadence (6 h by default).
  assert.equal((await row(site.url('/a/hourly')))?.effectiveInterval, 6 * HOUR);
  assert.equal((await row(site.url('/a/weekly')))?.effectiveInterval, 7 * DAY);
  assert.equal((await row(site.url('/b/3')))?.effectiveInterval, 30 * DAY);
  assert.equal(
    (await row(site.url('/b/plain')))?.effectiveInterval,
    null,
    'no changefreq: the default cadence',
  );

  const again = await h.fetch('/render_queue/sitemaps', { body: { url: site.url('/robots.txt') } });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.json.id, s.id);
});

test('a refresh picks up a new URL and unlinks a removed one, reuses 304s and files nothing twice', async () => {
  const before = { ...site.hitsOf('/a.xml.gz') };
  const removed = site.url('/b/7');
  bPages = () => [
    ...pages('/b/', 20, { changefreq: 'monthly' }).filter((e) => e.loc !== removed),
    { loc: site.url('/b/plain') },
    { loc: site.url('/b/new'), changefreq: 'weekly' },
  ];
  site.set('/b.xml', urlset(bPages()));
  const done = await refresh(mainId);
  const w = done.lastWalk!;
  assert.equal(done.state, 'idle', JSON.stringify(w));
  assert.equal(w.filesNotModified, 3, 'robots.txt, the index and the unchanged child answer 304');
  assert.equal(w.filesFetched, 1);
  assert.equal(site.hitsOf('/a.xml.gz').notModified, before.notModified + 1);
  assert.equal(site.hitsOf('/a.xml.gz').ok, before.ok, 'the unchanged child is not fetched again');
  assert.equal(w.filed, 1, 'only the new URL is filed');
  assert.equal(w.unchanged, 23);
  assert.equal(w.removed, 1);
  assert.equal((await row(site.url('/b/new')))?.effectiveInterval, 7 * DAY);
  const gone = await row(removed);
  assert.equal(gone?.fromSitemap, false, 'the removed URL is unlinked');
  assert.equal(gone?.effectiveInterval, 30 * DAY, 'its own cadence is kept');

  // Nothing changed at all: every file answers 304 and nothing is written or removed.
  const still = (await refresh(mainId)).lastWalk!;
  assert.equal(still.filesNotModified, 4);
  assert.equal(still.filed + still.removed + still.changed, 0);
  assert.equal(still.unchanged, 24);
});

test('sitemaps.refresh walks every sitemap again at its cron instants, with no one asking', async () => {
  const before = (
    (await h.fetch(`/render_queue/sitemaps/${mainId}`)).json as Sitemap & { lastWalk: { walkId: string } }
  ).lastWalk.walkId;
  bPages = ((prev) => () => [...prev(), { loc: site.url('/b/cron') }])(bPages);
  site.set('/b.xml', urlset(bPages()));
  // A timers key: the refresh duty is re-armed at once for the new expression (every 2 s here).
  await postConfig(h, { sitemaps: { refresh: '*/2 * * * * *' } });
  try {
    const w = await walked(mainId, before);
    assert.equal(w.state, 'idle', JSON.stringify(w.lastWalk));
    assert.equal((await row(site.url('/b/cron')))?.sitemapId, mainId);
  } finally {
    await postConfig(h, { sitemaps: { refresh: '0 3 * * *' } });
  }
  // Whatever the cron started has ended before the next test walks.
  await until('no walk running', async () => {
    const l = (await h.fetch('/render_queue/sitemaps')).json as { sitemaps: Sitemap[] };
    return l.sitemaps.every((x) => x.state !== 'walking');
  });
});

test('a walk that would remove more than sitemaps.maxRemovalShare fails and removes nothing, unless allowed', async () => {
  // Nine of the 24 (/b/7 left before): 37.5 %, over the 10 % default.
  const cut = pages('/b/', 10)
    .map((e) => e.loc)
    .filter((u) => !u.endsWith('/b/7'));
  bPages = () => [
    ...pages('/b/', 20, { changefreq: 'monthly' }).filter(
      (e) => !cut.includes(e.loc) && !e.loc.endsWith('/b/7'),
    ),
    { loc: site.url('/b/plain') },
    { loc: site.url('/b/new'), changefreq: 'weekly' },
    { loc: site.url('/b/cron') },
  ];
  site.set('/b.xml', urlset(bPages()));
  const refused = await refresh(mainId);
  assert.equal(refused.state, 'failed');
  assert.match(refused.lastWalk!.reason ?? '', /removal_share/);
  assert.equal(refused.lastWalk!.removed, 0);
  assert.equal((await row(cut[0]!))?.fromSitemap, true, 'nothing was unlinked');
  const allowed = await refresh(mainId, { allowLargeRemoval: true });
  assert.equal(allowed.state, 'idle', JSON.stringify(allowed.lastWalk));
  assert.equal(allowed.lastWalk!.removed, cut.length);
  assert.equal((await row(cut[0]!))?.fromSitemap, false);
});

test('a lastmod newer than the last render makes the row due now, once per new lastmod', async () => {
  const page = site.url('/lm/page');
  const older = new Date(Date.now() - 3 * DAY).toISOString();
  site.set('/lm.xml', urlset([{ loc: page, lastmod: older }]));
  const s = await register(site.url('/lm.xml'));
  await walked(s.id);
  const filed = await row(page);
  assert.equal(filed?.changedAt, null, 'a row never rendered is left as it is');

  // Render it: due now by revalidate, claimed, reported.
  assert.equal((await h.fetch('/prerender_admin/revalidate', { body: { url: page } })).status, 200);
  const job = await until('the page to be claimable', async () => {
    const c = await h.fetch('/render_queue/claim', { body: { limit: 100 } });
    return (c.json as Array<{ id: string; url: string; leaseToken: string }>).find((j) => j.url === page);
  });
  assert.equal(job.id, key(page), 'the job is the desktop row of its URL');
  const res = await h.fetch('/render_queue/job_result', {
    body: {
      id: key(page),
      leaseToken: job.leaseToken,
      outcome: 'rendered',
      statusCode: 200,
      contentType: 'text/html',
      body: '<html>x</html>',
    },
  });
  assert.equal(res.status, 200, res.text);
  const rendered = await row(page);
  assert.ok(rendered?.lastRenderedAt);
  assert.ok(rendered.nextRenderTime > Date.now(), 'rendered: due again only after its cadence');

  // The same lastmod again changes nothing; a future lastmod (read as now) marks it.
  assert.equal((await refresh(s.id)).lastWalk!.changed, 0);
  const future = new Date(Date.now() + 30 * DAY).toISOString();
  site.set('/lm.xml', urlset([{ loc: page, lastmod: future }]));
  assert.equal((await refresh(s.id)).lastWalk!.changed, 1);
  const marked = await row(page);
  assert.ok(marked?.changedAt, 'changedAt is set');
  assert.ok(marked.nextRenderTime <= Date.now(), 'the row is due now');
  // Once per new lastmod: the same future lastmod does not mark it again.
  site.set('/lm.xml', urlset([{ loc: page, lastmod: future }, { loc: site.url('/lm/other') }]));
  assert.equal((await refresh(s.id)).lastWalk!.changed, 0);
});

test('a gzip bomb stops at sitemaps.maxFileBytes and the walk fails with the reason', async () => {
  const bomb = gzipSync(
    Buffer.concat([
      Buffer.from(urlset([{ loc: site.url('/bomb/first') }]).replace('</urlset>', '')),
      Buffer.alloc(20 * 1024 * 1024, 0x20),
      Buffer.from('</urlset>'),
    ]),
  );
  assert.ok(bomb.length < 100 * 1024, 'the bomb itself is small');
  site.setRaw('/bomb.xml.gz', bomb, 'application/gzip');
  const s = await register(site.url('/bomb.xml.gz'));
  const done = await walked(s.id);
  assert.equal(done.state, 'failed');
  assert.equal(done.lastWalk!.refusals.file_too_large, 1);
  assert.match(done.lastWalk!.reason ?? '', /file_too_large/);
  assert.equal(
    (await row(site.url('/bomb/first')))?.fromSitemap,
    true,
    'the URL read before the bound is filed',
  );
});

test('a 100 MB file is cut at sitemaps.maxFileBytes: what came before is filed, the walk fails', async () => {
  site.stream('/huge.xml', (res) => {
    res.writeHead(200, { 'content-type': 'application/xml' });
    res.write('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">');
    let sent = 0;
    let i = 0;
    const pump = () => {
      while (sent < 100 * 1024 * 1024) {
        const chunk = Array.from(
          { length: 500 },
          () => `<url><loc>${site.url(`/huge/${i++}`)}</loc></url>`,
        ).join('');
        sent += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      res.end('</urlset>');
    };
    res.on('error', () => undefined);
    pump();
  });
  const s = await register(site.url('/huge.xml'));
  const done = await walked(s.id);
  assert.equal(done.state, 'failed');
  assert.equal(done.lastWalk!.refusals.file_too_large, 1);
  assert.ok(done.lastWalk!.filed > 100, `URLs before the cut are filed (${done.lastWalk!.filed})`);
  // The bound stops the read at the network chunk that crosses it (received bytes count that chunk whole).
  assert.ok(done.lastWalk!.bytes <= 2 * MAX_FILE_BYTES, `read ${done.lastWalk!.bytes} bytes`);
  assert.ok(site.hitsOf('/huge.xml').bytes < 20 * 1024 * 1024, 'the site stopped writing long before 100 MB');
  assert.equal(await row(site.url(`/huge/${done.lastWalk!.filed + 1000}`)), null, 'nothing after the cut');
});

test('an index that lists itself is refused as a cycle, and its other children are walked', async () => {
  site.set('/self.xml', sitemapIndex([site.url('/self.xml'), site.url('/self-child.xml')]));
  site.set('/self-child.xml', urlset(pages('/self/', 2)));
  const done = await walked((await register(site.url('/self.xml'))).id);
  assert.equal(done.state, 'idle', JSON.stringify(done.lastWalk));
  assert.equal(done.lastWalk!.refusals.cycle, 1);
  assert.equal(done.lastWalk!.filed, 2);
  assert.equal(site.hitsOf('/self.xml').ok, 1, 'the index is fetched once');
});

test('a <loc> or a child sitemap on another host is refused and counted', async () => {
  site.set(
    '/offhost.xml',
    urlset([...pages('/off/', 2), { loc: 'https://other.example/x' }, { loc: 'not a url' }]),
  );
  site.set('/offhost-index.xml', sitemapIndex(['https://other.example/s.xml', site.url('/offhost.xml')]));
  const done = await walked((await register(site.url('/offhost-index.xml'))).id);
  const w = done.lastWalk!;
  assert.equal(done.state, 'idle', JSON.stringify(w));
  assert.equal(w.refusals.off_host, 1, 'the child on another host is not fetched');
  assert.equal(w.filed, 2);
  assert.equal(w.rejected, 2);
  assert.deepEqual(
    w.rejectedSample.map((r) => r.url),
    ['https://other.example/x', 'not a url'],
  );
  assert.match(w.rejectedSample[0]!.reason, /host/);
  assert.equal(await row('https://other.example/x'), null);
});

test('a malformed XML tail: the URLs before it are filed, none after, and the walk fails', async () => {
  const [m1, m2, m3, m4, m5] = pages('/m/', 5).map((e) => e.loc);
  site.set(
    '/broken.xml',
    `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">` +
      `<url><loc>${m1}</loc></url><url><loc>${m2}</loc></url><url><loc>${m3}</loc></url>` +
      `<url><loc>${m4}</loc><oops<</url><url><loc>${m5}</loc></url></urlset>`,
  );
  const done = await walked((await register(site.url('/broken.xml'))).id);
  assert.equal(done.state, 'failed');
  assert.equal(done.lastWalk!.refusals.malformed, 1);
  assert.equal(done.lastWalk!.filed, 3);
  for (const u of [m1, m2, m3]) assert.equal((await row(u!))?.fromSitemap, true);
  for (const u of [m4, m5]) assert.equal(await row(u!), null);
  const qs = await h.fetch('/prerender_admin/queue-state');
  assert.equal(qs.status, 200, qs.text);
  assert.ok(qs.json.sitemaps.failed >= 1);
  assert.ok(
    qs.json.sitemaps.warnings.some((w: string) => w.includes('/broken.xml') && w.includes('malformed')),
    JSON.stringify(qs.json.sitemaps.warnings),
  );
});

test('observers read the sitemaps; only feeders and operators change them; forgetting unlinks or deletes', async () => {
  const watcher = { username: 'watcher', password: 'watcher-pass' };
  const list = await h.fetch('/render_queue/sitemaps?limit=2', { auth: watcher });
  assert.equal(list.status, 200, list.text);
  assert.equal(list.json.sitemaps.length, 2);
  assert.equal(typeof list.json.cursor, 'string');
  const next = await h.fetch(`/render_queue/sitemaps?limit=1000&cursor=${list.json.cursor}`, {
    auth: watcher,
  });
  assert.ok(
    next.json.sitemaps.every((s: Sitemap) => !list.json.sitemaps.some((p: Sitemap) => p.id === s.id)),
  );
  assert.equal(
    (await h.fetch(`/render_queue/sitemaps/${mainId}/refresh`, { method: 'POST', auth: watcher })).status,
    403,
  );

  site.set('/forget.xml', urlset(pages('/forget/', 3)));
  const feeder = { username: 'feeder', password: 'feeder-pass' };
  const r = await h.fetch('/render_queue/sitemaps', { body: { url: site.url('/forget.xml') }, auth: feeder });
  assert.equal(r.status, 202, r.text);
  await walked(r.json.id);
  const forgot = await h.fetch(`/render_queue/sitemaps/${r.json.id}`, { method: 'DELETE', auth: feeder });
  assert.equal(forgot.status, 200, forgot.text);
  assert.equal(forgot.json.unlinked, 3);
  assert.equal((await row(site.url('/forget/0')))?.fromSitemap, false);
  assert.equal((await h.fetch(`/render_queue/sitemaps/${r.json.id}`)).status, 404);

  const purge = await h.fetch(`/render_queue/sitemaps/${mainId}?deleteTargets=true`, { method: 'DELETE' });
  assert.equal(purge.status, 200, purge.text);
  assert.ok(purge.json.deletedTargets >= 10);
  assert.equal(await row(site.url('/a/daily')), null, 'its rows are deleted');
  assert.equal(
    (await row(site.url('/b/7')))?.fromSitemap,
    false,
    'a row it unlinked before is not its to delete',
  );
});
