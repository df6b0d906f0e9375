// Sitemap walks end to end: a loopback site serves an index of CHILDREN gzipped children × PER_CHILD URLs
// (default 20 × 50,000 = 1,000,000); a real Harper (2 workers) walks it in process (registered over HTTP,
// filed through the schedule's owner, never through POST /targets). Per run, on a fresh root:
//   1. claim latency without a walk (one client claiming 10 at a time from 20,000 due rows, 8 s);
//   2. the first walk: URLs filed per second (the walk's own figures), Harper's RssAnon growth, the
//      longest answer of a health probe every 50 ms (a proxy for event-loop holds), claim latency during it;
//   3. a refresh where nothing changed (every file 304) and one where one child changed.
// Prints each run and the medians, with the machine's load. Run: npm run build && node dist/bench/sitemaps.js
// PROFILE=1: a scratch copy of the component whose workers sample themselves during the first walk of each
// run; each worker's summary (areas, self and inclusive top 25) is printed and its profile kept.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fleetClient, loadavg, machine, median, rssKb, sleep, summarize, until } from './lib.js';
import { startHarper, type HarperInstance } from '../test/harness.js';
import { SitemapSite, sitemapIndex, urlset } from '../test/sitemapSite.js';
import { profiledRun, removeScratch, scratchComponent } from './scratch-component.js';

const CHILDREN = Number(process.env.CHILDREN ?? 20);
const PER_CHILD = Number(process.env.PER_CHILD ?? 50_000);
const RUNS = Number(process.env.RUNS ?? 3);
const PROFILE = process.env.PROFILE === '1';
/** The keeper's share of private memory per held row (docs/sizing.md "Per row": 210–230 B). */
const KEEPER_BYTES_PER_ROW = 230;

/** Child `k`'s urlset; its first `renamed` URLs get a new path (they leave, and as many new ones come). */
function child(k: number, site: SitemapSite, renamed = 0): string {
  return urlset(
    Array.from({ length: PER_CHILD }, (_, i) => ({
      loc: site.url(
        `/catalogue/category-${i % 97}/product-${String(k * PER_CHILD + i).padStart(8, '0')}${i < renamed ? '-v2' : ''}`,
      ),
      changefreq: i % 3 === 0 ? 'daily' : 'weekly',
    })),
  );
}

interface Sitemap {
  id: string;
  state: string;
  lastWalk: {
    walkId: string;
    durationMs: number;
    urlsSeen: number;
    filed: number;
    filesNotModified: number;
    reason: string | null;
  } | null;
}

async function walkEnd(h: HarperInstance, id: string, after: string | undefined): Promise<Sitemap> {
  return until(
    'the walk to end',
    async () => {
      const s = (await h.fetch(`/render_queue/sitemaps/${id}`)).json as Sitemap;
      return s.state !== 'walking' && s.lastWalk && s.lastWalk.walkId !== after ? s : undefined;
    },
    1_800_000,
    250,
  );
}

/** Claims 10 at a time in a loop until `stop()`; answers each claim's latency (ms). */
function claimLoop(h: HarperInstance) {
  const client = fleetClient(h, { username: 'admin', password: 'admin-pass-for-tests' });
  const lat: number[] = [];
  let running = true;
  const done = (async () => {
    while (running) {
      const t0 = performance.now();
      await client.post('/render_queue/claim', { limit: 10 });
      lat.push(performance.now() - t0);
      await sleep(20);
    }
    await client.close();
  })();
  return {
    stop: async () => {
      running = false;
      await done;
      return summarize(lat);
    },
  };
}

/** Probes GET /prerender_admin/health every 50 ms; answers the longest answer (ms). */
function holdProbe(h: HarperInstance) {
  let running = true;
  let longest = 0;
  const done = (async () => {
    while (running) {
      const t0 = performance.now();
      await h.fetch('/prerender_admin/health', { fresh: true });
      longest = Math.max(longest, performance.now() - t0);
      await sleep(50);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await done;
      return Math.round(longest);
    },
  };
}

async function fileDue(h: HarperInstance, tag: string, n: number): Promise<void> {
  const dueAt = Date.now();
  for (let i = 0; i < n; i += 10_000) {
    const targets = Array.from({ length: Math.min(10_000, n - i) }, (_, k) => ({
      url: `https://due.example.com/${tag}/${i + k}`,
      dueAt,
    }));
    const r = await h.fetch('/render_queue/targets', { body: { targets } });
    if (r.status !== 200) throw new Error(r.text);
  }
}

async function oneRun(run: number) {
  const site = new SitemapSite();
  await site.start();
  const children = Array.from({ length: CHILDREN }, (_, k) => `/s${k}.xml.gz`);
  site.set('/index.xml', sitemapIndex(children.map((c) => site.url(c))));
  children.forEach((c, k) => site.set(c, child(k, site)));
  const profileDir = PROFILE ? mkdtempSync(join(tmpdir(), 'qk-sitemap-profiles-')) : undefined;
  const component = profileDir ? scratchComponent({ keeper: true, profileDir }) : undefined;
  const h = await startHarper({ logLevel: 'warn', ...(component ? { componentDir: component } : {}) });
  try {
    const cfg = await h.fetch('/prerender_admin/config', {
      body: {
        sitemaps: { allowHttp: true, allowCidrs: ['127.0.0.1'] },
        queue: { keeper: { publishInterval: 200 } },
      },
    });
    if (cfg.status !== 200) throw new Error(cfg.text);
    await fileDue(h, `quiet${run}`, 20_000);
    await sleep(2000);
    const quietLoop = claimLoop(h);
    await sleep(8000);
    const quiet = await quietLoop.stop();

    await fileDue(h, `busy${run}`, 20_000);
    await sleep(2000);
    const rss0 = rssKb(h.pid).rssAnonKb;
    let rssPeak = rss0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        rssPeak = Math.max(rssPeak, rssKb(h.pid).rssAnonKb);
        await sleep(200);
      }
    })();
    const busyLoop = claimLoop(h);
    const probe = holdProbe(h);
    const load0 = loadavg();
    const reg = await h.fetch('/render_queue/sitemaps', { body: { url: site.url('/index.xml') } });
    if (reg.status !== 202) throw new Error(reg.text);
    const id = (reg.json as Sitemap).id;
    const first = profileDir
      ? await profiledRun(profileDir, `walk-${run}`, () => walkEnd(h, id, undefined), 25)
      : await walkEnd(h, id, undefined);
    if (profileDir) console.log(`profiles kept in ${profileDir}`);
    const busy = await busyLoop.stop();
    const hold = await probe.stop();
    sampling = false;
    await sampler;
    if (first.state !== 'idle') throw new Error(`first walk ${first.state}: ${first.lastWalk?.reason}`);
    const w = first.lastWalk!;
    const growthMb = ((rssPeak - rss0) * 1024) / 1e6;
    const walkMb = growthMb - (w.filed * KEEPER_BYTES_PER_ROW) / 1e6;

    const refreshOnce = async () => {
      const before = ((await h.fetch(`/render_queue/sitemaps/${id}`)).json as Sitemap).lastWalk?.walkId;
      const t0 = performance.now();
      const r = await h.fetch(`/render_queue/sitemaps/${id}/refresh`, { method: 'POST' });
      if (r.status !== 202) throw new Error(r.text);
      const s = await walkEnd(h, id, before);
      if (s.state !== 'idle') throw new Error(`refresh ${s.state}: ${s.lastWalk?.reason}`);
      return {
        wallMs: Math.round(performance.now() - t0),
        walkMs: s.lastWalk!.durationMs,
        notModified: s.lastWalk!.filesNotModified,
      };
    };
    const unchanged = await refreshOnce();
    const changed = Math.min(7, CHILDREN - 1);
    site.set(children[changed]!, child(changed, site, 500));
    const oneChanged = await refreshOnce();
    const out = {
      run: run + 1,
      urls: w.urlsSeen,
      firstWalkMs: w.durationMs,
      filedPerSec: Math.round((w.filed / w.durationMs) * 1000),
      rssGrowthMb: Math.round(growthMb),
      walkMemoryMb: Math.round(walkMb),
      longestHealthAnswerMs: hold,
      claimQuiet: quiet,
      claimDuringWalk: busy,
      refreshUnchanged: unchanged,
      refreshOneChild: oneChanged,
      load: [load0, loadavg()],
    };
    console.log(JSON.stringify(out));
    return out;
  } finally {
    await h.destroy();
    await site.stop();
    if (component) removeScratch(component);
  }
}

const runs = [];
for (let run = 0; run < RUNS; run++) runs.push(await oneRun(run));
console.log(
  JSON.stringify({
    bench: 'sitemaps',
    children: CHILDREN,
    perChild: PER_CHILD,
    medians: {
      filedPerSec: median(runs.map((r) => r.filedPerSec)),
      firstWalkMs: median(runs.map((r) => r.firstWalkMs)),
      walkMemoryMb: median(runs.map((r) => r.walkMemoryMb)),
      longestHealthAnswerMs: median(runs.map((r) => r.longestHealthAnswerMs)),
      claimP99QuietMs: median(runs.map((r) => r.claimQuiet.p99)),
      claimP99DuringWalkMs: median(runs.map((r) => r.claimDuringWalk.p99)),
      refreshUnchangedMs: median(runs.map((r) => r.refreshUnchanged.walkMs)),
      refreshOneChildMs: median(runs.map((r) => r.refreshOneChild.walkMs)),
    },
    machine: machine(),
    date: new Date().toISOString(),
  }),
);
