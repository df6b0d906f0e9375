// Keeper scale inside a real Harper (2 worker threads), at each row count given (default 250,000 then
// 1,000,000), ~100-character URLs, ~30 % due (filed with a past dueAt, so those rows carry the urgent
// mark), three prefix routes plus unrouted rows:
//   load     restart on the same root; trust.keeper.load {ms, rows} from queue-state
//   publish  trust.keeper.lastPublish.ms, ≥ 35 distinct publishes while one light client claims and reports
//   memory   RssAnon of the Harper process with the keeper loaded minus the same root with the keeper off
//   writes   50,000 rows rewritten through the API: trust.keeper.apply (the keeper's own apply time per
//            event) and the whole process's CPU per write, keeper on vs keeper off, alternated on/off twice
// Run: npx tsc -p tsconfig.json && node dist/bench/keeper-scale.js [rows...]
import { startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import {
  fileAll,
  fleetClient,
  keeperStats,
  loadavg,
  machine,
  procCpuMs,
  rssKb,
  sleep,
  summarize,
  until,
} from './lib.js';
import { removeScratch, scratchComponent } from './scratch-component.js';
import { CONFIG_ROUTES, DAY, SCALE_SEED, scaleTargets, seededRandom } from './fixtures.js';

const SIZES = process.argv.slice(2).map(Number);
if (SIZES.length === 0) SIZES.push(250_000, 1_000_000);
const REWRITES = Number(process.env.REWRITES ?? 50_000);
const PUBLISH_SAMPLES = 35;
const CONFIG = {
  render: { routes: CONFIG_ROUTES },
  queue: { keeper: { publishInterval: 1000, stateInterval: 1000 } },
};
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

const random = seededRandom(SCALE_SEED);

interface Plan {
  targets: Array<Record<string, unknown>>;
  notDue: string[];
}

function plan(rows: number, now: number): Plan {
  const targets = scaleTargets(rows, now, random);
  const notDue = targets.filter((t) => t.dueAt === undefined).map((t) => t.url as string);
  return { targets, notDue };
}

async function configure(h: HarperInstance): Promise<void> {
  const r = await h.fetch('/prerender_admin/config', { body: CONFIG });
  if (r.status !== 200) throw new Error(`config: ${r.status} ${r.text}`);
}

async function liveStats(h: HarperInstance, rows: number) {
  return until(
    'the keeper live with every row',
    async () => {
      const r = await h.fetch('/prerender_admin/queue-state');
      return r.status === 200 && r.json.trust.keeper.rows >= rows ? r.json.trust.keeper : undefined;
    },
    600_000,
    100,
  );
}

/** Rewrites rows with a new future due time; returns the whole process's CPU µs per write. */
async function rewrite(h: HarperInstance, urls: string[], round: number, keeperOn: boolean) {
  const before = keeperOn ? (await keeperStats(h)).apply : null;
  const dueAt = Date.now() + 3 * DAY + round * 7 * 60_000;
  const cpu0 = procCpuMs(h.pid);
  const rate = await fileAll(
    h,
    urls.map((url) => ({ url, dueAt })),
  );
  if (keeperOn)
    await until('the keeper applied every rewrite', async () => {
      const a = (await keeperStats(h)).apply;
      return a.events - before.events >= urls.length ? a : undefined;
    });
  await sleep(1000); // both modes: the same settle so trailing background work counts alike
  const cpuUsPerWrite = Math.round(((procCpuMs(h.pid) - cpu0) * 1000) / urls.length);
  const out: Record<string, unknown> = { keeperOn, writesPerSec: Math.round(rate), cpuUsPerWrite };
  if (keeperOn) {
    await sleep(1500); // the state document that carries apply{} is rewritten every second
    const after = (await keeperStats(h)).apply;
    const ms = after.avgUs * after.events - before.avgUs * before.events;
    out.apply = {
      events: after.events - before.events,
      avgUs: Math.round((ms / (after.events - before.events)) * 100) / 100,
    };
  }
  return out;
}

async function samplePublishes(h: HarperInstance) {
  const c = fleetClient(h, fleet);
  let stop = false;
  const claimer = (async () => {
    while (!stop) {
      const r = await c.post('/render_queue/claim', { limit: 5 });
      const jobs = (r.json ?? []) as Array<{ id: string; leaseToken: string }>;
      if (jobs.length)
        await c.post('/render_queue/job_results', {
          results: jobs.map((j) => ({
            id: j.id,
            leaseToken: j.leaseToken,
            outcome: 'rendered',
            statusCode: 200,
          })),
        });
      await sleep(150);
    }
  })();
  const seen = new Map<number, { ms: number; published: number; skippedLeased: number }>();
  const deadline = Date.now() + 180_000;
  while (seen.size < PUBLISH_SAMPLES && Date.now() < deadline) {
    const p = (await keeperStats(h))?.lastPublish;
    if (p) seen.set(p.at, p);
    await sleep(250);
  }
  stop = true;
  await claimer;
  await c.close();
  const samples = [...seen.values()];
  return {
    ...summarize(samples.map((s) => s.ms)),
    published: samples.at(-1)?.published,
    skippedLeased: samples.at(-1)?.skippedLeased,
  };
}

async function oneSize(rows: number) {
  const out: Record<string, unknown> = { rows, loadBefore: loadavg() };
  const first = await startHarper({ logLevel: 'warn' });
  const root = first.root;
  const off = scratchComponent({ keeper: false });
  try {
    await first.addUser(fleet.username, fleet.password, 'render_fleet');
    await configure(first);
    const p = plan(rows, Date.now());
    out.fileRowsPerSec = Math.round(await fileAll(first, p.targets));
    out.filedDue = rows - p.notDue.length;
    await liveStats(first, rows);
    await first.stop();
    const rewriteSet = p.notDue.slice(0, REWRITES);
    const writes: unknown[] = [];

    // Keeper off on the same root: the memory baseline, then the first keeper-off write sample.
    let h = await startHarper({ root, componentDir: off, logLevel: 'warn' });
    await sleep(5000);
    const rssOff = rssKb(h.pid);
    writes.push(await rewrite(h, rewriteSet, 1, false));
    await h.stop();

    // Keeper on: load, memory, publish, write sample.
    const spawnAt = Date.now();
    h = await startHarper({ root, logLevel: 'warn' });
    const k = await liveStats(h, rows);
    out.load = {
      ...k.load,
      rowsPerSec: Math.round((k.load.rows / k.load.ms) * 1000),
      spawnToLiveMs: Date.now() - spawnAt,
      classes: k.classes,
    };
    await sleep(5000);
    const rssOn = rssKb(h.pid);
    out.memory = {
      rssOff,
      rssOn,
      bytesPerRow: Math.round(((rssOn.rssAnonKb - rssOff.rssAnonKb) * 1024) / rows),
    };
    out.publish = await samplePublishes(h);
    writes.push(await rewrite(h, rewriteSet, 2, true));
    await h.stop();

    h = await startHarper({ root, componentDir: off, logLevel: 'warn' });
    writes.push(await rewrite(h, rewriteSet, 3, false));
    await h.stop();
    h = await startHarper({ root, logLevel: 'warn' });
    await liveStats(h, rows);
    writes.push(await rewrite(h, rewriteSet, 4, true));
    await h.destroy();
    out.writes = writes;
    out.loadAfter = loadavg();
    return out;
  } finally {
    removeScratch(off);
    await first.destroy();
  }
}

console.log(JSON.stringify({ bench: 'keeper-scale', ...machine(), config: CONFIG, rewrites: REWRITES }));
for (const rows of SIZES) console.log(JSON.stringify(await oneSize(rows)));
