// One sitemap walk (services/sitemaps/walk.ts) over fake fetches, a fake schedule owner and a fake file
// store: no Harper, no network. What a break files, what a 304 reuses, and when leaving URLs are removed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '../../util/config/schema.js';
import { boundedText } from '../../util/sitemaps/body.js';
import type { SitemapItem } from '../../util/schedule/sitemapRules.js';
import type { Fetched } from '../../services/sitemaps/fetcher.js';
import type { FileEntry, SitemapRecord } from '../../services/sitemaps/store.js';
import { SitemapWalk, type WalkDeps } from '../../services/sitemaps/walk.js';
import { urlset, sitemapIndex } from '../sitemapSite.js';

const HOST = 'https://example.com';
const HOUR = 3_600_000;
const DAY = 86_400_000;

async function* chunked(text: string, size = 97): AsyncGenerator<Uint8Array> {
  const b = Buffer.from(text);
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}

interface Site {
  /** path → body text, or 304 when the walk sends validators. */
  files: Map<string, string | 304>;
}

function harness(site: Site, record: Partial<SitemapRecord> = {}) {
  const filed: SitemapItem[] = [];
  const unlinked: string[] = [];
  const entries = new Map<string, FileEntry>();
  const holding = { value: true };
  const rec: SitemapRecord = {
    id: 'sm1',
    url: `${HOST}/index.xml`,
    owner: 'feeder',
    cadenceMs: null,
    deleteRemoved: false,
    state: 'walking',
    createdAt: 0,
    walkId: 'w2',
    walkHolder: 'h',
    walkBeatAt: 0,
    allowLargeRemoval: false,
    committedWalk: null,
    urlCount: 0,
    lastWalk: null,
    progress: null,
    ...record,
  };
  const deps: WalkDeps = {
    config: () => defaultConfig(),
    now: () => 1_700_000_000_000,
    fetch: async (url, _host, validators): Promise<Fetched> => {
      const body = site.files.get(new URL(url).pathname);
      if (body === undefined) return { kind: 'failed', problem: 'http_status', reason: 'HTTP 404' };
      if (body === 304)
        return validators
          ? { kind: 'notModified' }
          : { kind: 'failed', problem: 'http_status', reason: '304' };
      return {
        kind: 'body',
        validators: { etag: '"e"', lastModified: null },
        body: boundedText(chunked(body), 1 << 20),
        done: () => {},
      };
    },
    fileFromSitemap: async (items) => {
      filed.push(...items);
      out.onFile();
      return { filed: items.length, linked: 0, updated: 0, changed: 0, unchanged: 0, otherSitemap: 0 };
    },
    unlinkFromSitemap: async (urls) => {
      unlinked.push(...urls);
      return urls.length;
    },
    deleteSitemapRows: async () => [],
    deletePages: async () => 0,
    isRetired: (url) => url.endsWith('/retired'),
    readFileEntry: (sid, wid, url) => entries.get(JSON.stringify([sid, wid, url])),
    putFileEntry: async (sid, wid, url, e) => void entries.set(JSON.stringify([sid, wid, url]), e),
    fileEntriesOf: (sid, wid) =>
      [...entries]
        .filter(([k]) => k.startsWith(JSON.stringify([sid, wid]).slice(0, -1)))
        .map(([k, entry]) => ({ url: (JSON.parse(k) as string[])[2]!, entry })),
    beat: async () => true,
    holds: () => holding.value,
    yieldLoop: async () => {},
    count: () => {},
  };
  const out = {
    run: () => new SitemapWalk(rec, rec.walkId!, deps).run(),
    filed,
    unlinked,
    entries,
    rec,
    holding,
    /** Called as each batch is filed. */
    onFile: (): void => undefined,
  };
  return out;
}

test('an index is walked breadth first: cadences from changefreq (floored), the sitemap cadenceMs over them, retired URLs not filed', async () => {
  const site: Site = {
    files: new Map<string, string | 304>([
      ['/index.xml', sitemapIndex([`${HOST}/a.xml`, `${HOST}/b.xml`])],
      [
        '/a.xml',
        urlset([
          { loc: `${HOST}/1`, changefreq: 'hourly', lastmod: '2026-01-02' },
          { loc: `${HOST}/retired` },
        ]),
      ],
      ['/b.xml', urlset([{ loc: `${HOST}/2`, changefreq: 'weekly' }, { loc: `${HOST}/1` }])],
    ]),
  };
  const h = harness(site);
  const end = await h.run();
  assert.equal(end.figures.state, 'idle');
  assert.deepEqual(h.filed, [
    { url: `${HOST}/1`, cadenceMs: 6 * HOUR, lastmod: Date.UTC(2026, 0, 2) },
    { url: `${HOST}/2`, cadenceMs: 7 * DAY },
  ]);
  assert.equal(end.figures.retired, 1);
  assert.equal(end.figures.duplicates, 1);
  assert.deepEqual(end.committed, { walkId: 'w2', urlCount: 3 });
  const own = harness(site, { cadenceMs: 2 * DAY });
  await own.run();
  assert.ok(
    own.filed.every((i) => i.cadenceMs === 2 * DAY),
    'the sitemap cadenceMs wins over changefreq',
  );
});

test('a file that breaks files what came before it, nothing after, and the walk commits nothing', async () => {
  const site: Site = {
    files: new Map<string, string | 304>([
      ['/index.xml', sitemapIndex([`${HOST}/a.xml`, `${HOST}/b.xml`])],
      [
        '/a.xml',
        urlset([{ loc: `${HOST}/1` }, { loc: `${HOST}/2` }]).replace(
          `<url><loc>${HOST}/2`,
          `<oops<<url><loc>${HOST}/2`,
        ),
      ],
      ['/b.xml', urlset([{ loc: `${HOST}/3` }])],
    ]),
  };
  const h = harness(site);
  const end = await h.run();
  assert.equal(end.figures.state, 'failed');
  assert.match(end.figures.reason ?? '', /^malformed/);
  assert.deepEqual(
    h.filed.map((i) => i.url),
    [`${HOST}/1`],
  );
  assert.equal(end.committed, null);
});

test('a 304 reuses what the committed walk read, so an unchanged sitemap removes nothing', async () => {
  const site: Site = {
    files: new Map<string, string | 304>([
      ['/index.xml', sitemapIndex([`${HOST}/a.xml`])],
      ['/a.xml', urlset([{ loc: `${HOST}/1` }, { loc: `${HOST}/2` }])],
    ]),
  };
  const first = harness(site, { walkId: 'w1' });
  await first.run();
  site.files.set('/index.xml', 304);
  site.files.set('/a.xml', 304);
  const h = harness(site, { committedWalk: 'w1', urlCount: 2 });
  for (const [k, e] of first.entries) h.entries.set(k, e);
  const end = await h.run();
  assert.equal(end.figures.state, 'idle');
  assert.equal(end.figures.filesNotModified, 2);
  assert.equal(end.figures.unchanged, 2);
  assert.deepEqual(h.filed, []);
  assert.deepEqual(h.unlinked, []);
});

test('URLs that left are unlinked within sitemaps.maxRemovalShare; more fails the walk and removes nothing, unless allowed', async () => {
  const all = Array.from({ length: 20 }, (_, i) => ({ loc: `${HOST}/${i}` }));
  const site: Site = {
    files: new Map<string, string | 304>([
      ['/index.xml', sitemapIndex([`${HOST}/a.xml`])],
      ['/a.xml', urlset(all)],
    ]),
  };
  const first = harness(site, { walkId: 'w1' });
  await first.run();
  const after = (keep: number, allowLargeRemoval: boolean) => {
    site.files.set('/a.xml', urlset(all.slice(0, keep)));
    const h = harness(site, { committedWalk: 'w1', urlCount: 20, allowLargeRemoval });
    for (const [k, e] of first.entries) h.entries.set(k, e);
    return h;
  };
  const pruned = after(18, false);
  const ok = await pruned.run();
  assert.equal(ok.figures.state, 'idle');
  assert.deepEqual(pruned.unlinked, [`${HOST}/18`, `${HOST}/19`]);
  assert.equal(ok.figures.removed, 2);

  const short = after(10, false);
  const refused = await short.run();
  assert.equal(refused.figures.state, 'failed');
  assert.match(refused.figures.reason ?? '', /removal_share/);
  assert.deepEqual(short.unlinked, []);
  assert.equal(refused.committed, null);

  const allowed = after(10, true);
  assert.equal((await allowed.run()).figures.removed, 10);
});

test('a walk that lost its lease (the sitemap was forgotten) files no further batch', async () => {
  const many = Array.from({ length: 2500 }, (_, i) => ({ loc: `${HOST}/${i}` }));
  const site: Site = { files: new Map<string, string | 304>([['/index.xml', urlset(many)]]) };
  const h = harness(site);
  // The sitemap is forgotten while its first batch commits.
  h.onFile = () => {
    h.holding.value = false;
  };
  const end = await h.run();
  assert.equal(end.figures.state, 'failed');
  assert.match(end.figures.reason ?? '', /deleted or another walk took it over/);
  assert.equal(h.filed.length, 1000, 'only the batch started before the lease went');
});
