// Filing against its floor and its peer: the same ROWS rows of scale-mix.ts's mix (one device) filed four
// ways, in one run, rounds interleaved (each round runs api, inProcess, bullmq, barePut in that order),
// each path on a fresh store (a fresh Harper root, or a fresh Redis folder) so every path writes into an
// equally empty table:
//   api        POST /render_queue/targets, one client (keep-alive), batches of 10,000, each answered
//              before the next is sent (as scale.ts files);
//   inProcess  scale-probe.ts's seed route: the same checks and the same schedule owner's write as the
//              route and the in-process API (services/http/filing.ts), without HTTP or JSON; 10,000
//              targets per write, LANES requests of CHUNK rows at a time, each on a fresh connection (so
//              they spread over both workers);
//   bullmq     BullMQ's addBulk of the same jobs (one queue per our queue, delay = dueAt − now, 10,000 per
//              batch, the 20 queues' addBulk calls of a batch concurrent) on a private durable Redis (AOF
//              everysec, noeviction), as scale.ts does;
//   barePut    filing-floor-probe.ts's route: the rows filing writes, put straight into RenderSchedule
//              with Harper's Table.put, TXN rows per transaction, driven like inProcess (LANES × CHUNK):
//              the floor, what the table costs with no checks, locks, reads or read-back.
// Every Harper path runs the same scratch copy of the component (keeper on: its subscription digests
// every write, as in production), boots, takes scale.ts's config and waits for the keeper to be live
// before the clock starts; afterwards the table must hold ROWS rows (BullMQ: ROWS jobs), else
// the run stops. Per path and round: rows/s, the server process's CPU ms (Harper, or redis-server), the
// 1-minute load average before and after, and for Harper each worker's longest hold of its event loop
// while it filed and how many holds passed 100 ms (scale-probe.ts's stall files). The summary gives each path's median, per-round ratios
// (against BullMQ and against the bare put) and their medians, and the distance to the bare put in rows/s.
// PROFILE=1 instead runs inProcess and barePut once each with every Harper worker sampling itself
// (scratch-component.ts profiledRun) and prints where the time goes; its rates are not figures.
//
// Needs /usr/bin/redis-server (Debian: `apt-get install redis-server`; for the bench only).
// Run: npm run build && flock /work/bench.lock node dist/bench/filing-floor.js 1000000
//   env: ROUNDS (3), PATHS (api,inProcess,bullmq,barePut), LANES (2), CHUNK (20000), TXN (10000),
//   PROFILE (0), BASE (a built tree: a copy of another checkout's dist/, config.yaml, index.js,
//   schema.graphql, roles.yaml, package.json and web/). A path in PATHS is `<path>[:<txn>][@base]`:
//   `barePut:1000` puts 1,000 rows per transaction, `inProcess@base` files through BASE's build, so a
//   change and what it changed run side by side in one run (each `x@base` is also set against `x`).
//   The keeper's worker 0 also files what reaches it: Harper hands each new connection to the worker it
//   finds most idle, so a route path's rows per worker index and the busiest threads are printed with
//   each figure (the API's one keep-alive connection stays on the worker it was handed).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { startHarper, type HarperInstance } from '../test/harness.js';
import { busiestThreads, cpuMeter, loadavg, machine, median, sleep, startRedis, threadCpuMs } from './lib.js';
import { keeperLive, readStalls } from './probe-files.js';
import { queueName, scaleRoutes, scaleTarget, scaleTargets, SCALE_QUEUES } from './scale-mix.js';
import { profiledRun, removeScratch, scratchComponent } from './scratch-component.js';

const ROWS = Number(process.argv[2] ?? 1_000_000);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const PATHS = (process.env.PATHS ?? 'api,inProcess,bullmq,barePut').split(',');
const BASE = process.env.BASE;
const LANES = Number(process.env.LANES ?? 2);
const CHUNK = Number(process.env.CHUNK ?? 20_000);
const TXN = Number(process.env.TXN ?? 10_000);
const PROFILE = process.env.PROFILE === '1';
/** The API's batch, and BullMQ's: what one request (one addBulk round) carries. */
const BATCH = 10_000;
const CONFIG = {
  render: { routes: scaleRoutes(), deviceTypes: ['desktop'] },
  queue: { keeper: { publishInterval: 1000 } },
};

type PathName = 'api' | 'inProcess' | 'bullmq' | 'barePut';
/** One path of a round as PATHS names it. */
interface PathSpec {
  spec: string;
  path: PathName;
  /** The bare put's rows per transaction. */
  txn: number;
  /** Through BASE's build instead of this checkout's. */
  base: boolean;
}

function parseSpec(spec: string): PathSpec {
  const m = /^(api|inProcess|bullmq|barePut)(?::(\d+))?(@base)?$/.exec(spec);
  if (!m) throw new Error(`unknown path ${spec}: api, inProcess, bullmq or barePut, then :<txn>, @base`);
  if (m[3] && !BASE) throw new Error(`${spec} needs BASE=<a built tree>`);
  return { spec, path: m[1] as PathName, txn: m[2] ? Number(m[2]) : TXN, base: Boolean(m[3]) };
}
const SPECS = PATHS.map(parseSpec);

interface Filed {
  rowsPerSec: number;
  seconds: number;
  /** The server process's CPU over the filing (Harper, or redis-server), ms. */
  serverCpuMs: number;
  /** This process's share of the machine over the filing (the client, or BullMQ's side), %. */
  clientCpuPct: number;
  /** Rows filed by each Harper worker index (the route paths only). */
  rowsByWorker?: Record<string, number>;
  /** The server's busiest threads over the filing, `name#tid:cpu ms`. */
  threads?: string[];
  /** Holds of a Harper worker's event loop ≥ 50 ms while it filed (scale-probe.ts): the longest, ms, by worker index, and how many passed 100 ms. */
  holds?: { maxMsByWorker: Record<string, number>; over100: number };
}

const uptime = () => execFileSync('uptime', { encoding: 'utf8' }).trim();
const round1 = (x: number) => Math.round(x * 10) / 10;
const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;

// ---- Harper paths ----

async function bootHarper(componentDir: string, probeDir: string): Promise<HarperInstance> {
  const h = await startHarper({
    componentDir,
    logLevel: 'warn',
    env: { QK_SCALE_PROBE_DIR: probeDir },
    readyTimeoutMs: 600_000,
  });
  const r = await h.fetch('/prerender_admin/config', { body: CONFIG });
  if (r.status !== 200) throw new Error(`config: ${r.status} ${r.text}`);
  await keeperLive(h, 0);
  return h;
}

async function fileApi(h: HarperInstance, now: number): Promise<void> {
  for (let i = 0; i < ROWS; i += BATCH) {
    const targets = scaleTargets(i, Math.min(ROWS, i + BATCH), now);
    const r = await h.fetch('/render_queue/targets', { body: { targets } });
    if (r.status !== 200 || r.json.upserted !== targets.length)
      throw new Error(`filing failed at ${i}: ${r.status} ${r.text.slice(0, 300)}`);
  }
}

/** LANES requests at a time to `path`, each rows [from, from + CHUNK); answers the rows by worker. */
async function fileByRoute(
  h: HarperInstance,
  path: string,
  now: number,
  txn = TXN,
): Promise<Record<string, number>> {
  const byWorker: Record<string, number> = {};
  let next = 0;
  await Promise.all(
    Array.from({ length: LANES }, async () => {
      for (;;) {
        const from = next;
        if (from >= ROWS) return;
        next += CHUNK;
        const to = Math.min(ROWS, from + CHUNK);
        const r = await h.fetch(path, { body: { from, to, now, txn }, fresh: true, timeoutMs: 600_000 });
        if (r.status !== 200 || r.json.rows !== to - from)
          throw new Error(`${path} failed at ${from}: ${r.status} ${r.text.slice(0, 300)}`);
        const w = String(r.json.worker);
        byWorker[w] = (byWorker[w] ?? 0) + (to - from);
      }
    }),
  );
  return byWorker;
}

async function harperFiling(
  path: Exclude<PathName, 'bullmq'>,
  h: HarperInstance,
  now: number,
  txn = TXN,
): Promise<Record<string, number> | undefined> {
  if (path === 'api') {
    await fileApi(h, now);
    return undefined;
  }
  if (path === 'inProcess') return fileByRoute(h, '/prerender_admin/bench-seed', now);
  return fileByRoute(h, '/prerender_admin/bench-bare-put', now, txn);
}

async function harperPath(
  path: Exclude<PathName, 'bullmq'>,
  txn: number,
  componentDir: string,
): Promise<Filed> {
  const probeDir = mkdtempSync(join(tmpdir(), 'qk-floor-probe-'));
  const h = await bootHarper(componentDir, probeDir);
  try {
    const now = Date.now();
    const meter = cpuMeter({ harper: h.pid });
    const threads = threadCpuMs(h.pid);
    readStalls(probeDir);
    const t0 = performance.now();
    const rowsByWorker = await harperFiling(path, h, now, txn);
    const elapsed = performance.now() - t0;
    const m = meter();
    const busiest = busiestThreads(threads, threadCpuMs(h.pid), 3);
    // The probe writes a hold down 200 ms after it ends.
    await sleep(500);
    const stalls = readStalls(probeDir);
    const maxMsByWorker: Record<string, number> = {};
    for (const s of stalls)
      maxMsByWorker[String(s.worker)] = Math.max(maxMsByWorker[String(s.worker)] ?? 0, s.ms);
    const counted = await h.fetch('/prerender_admin/bench-row-count');
    if (counted.status !== 200 || counted.json.rows !== ROWS)
      throw new Error(`${path}: the table holds ${counted.text.slice(0, 100)} rows, not ${ROWS}`);
    return {
      rowsPerSec: Math.round((ROWS / elapsed) * 1000),
      seconds: round1(elapsed / 1000),
      serverCpuMs: m.harperCpuMs!,
      clientCpuPct: m.generatorCpuPct!,
      ...(rowsByWorker ? { rowsByWorker } : {}),
      threads: busiest,
      holds: { maxMsByWorker, over100: stalls.filter((s) => s.ms > 100).length },
    };
  } finally {
    await h.destroy();
    rmSync(probeDir, { recursive: true, force: true });
  }
}

// ---- BullMQ ----

async function bullmqPath(): Promise<Filed> {
  const redis = await startRedis({ persistence: 'aof-everysec' });
  const connection = { host: '127.0.0.1', port: redis.port, maxRetriesPerRequest: null };
  const queues = Array.from({ length: SCALE_QUEUES }, (_, q) => new Queue(queueName(q), { connection }));
  try {
    await Promise.all(queues.map((q) => q.waitUntilReady()));
    const now = Date.now();
    const meter = cpuMeter({ redis: redis.pid });
    const t0 = performance.now();
    for (let i = 0; i < ROWS; i += BATCH) {
      const byQueue: Array<Array<{ name: string; data: unknown; opts: Record<string, unknown> }>> =
        queues.map(() => []);
      for (let k = i; k < Math.min(ROWS, i + BATCH); k++) {
        const t = scaleTarget(k, now);
        byQueue[k % SCALE_QUEUES]!.push({
          name: 'render',
          data: { url: t.url, deviceType: 'desktop', cadenceMs: t.cadenceMs, fromSitemap: t.fromSitemap },
          opts: { jobId: `r${k}`, delay: Math.max(0, t.dueAt - now) },
        });
      }
      await Promise.all(queues.map((q, n) => (byQueue[n]!.length ? q.addBulk(byQueue[n]!) : null)));
    }
    const elapsed = performance.now() - t0;
    const m = meter();
    const jobs = (await Promise.all(queues.map((q) => q.count()))).reduce((a, b) => a + b, 0);
    if (jobs !== ROWS) throw new Error(`bullmq: Redis holds ${jobs} jobs, not ${ROWS}`);
    const p = await redis.info('persistence');
    if (p.aof_enabled !== '1' || p.aof_last_write_status !== 'ok')
      throw new Error(`bullmq: the AOF is not on and written (${JSON.stringify(p)})`);
    return {
      rowsPerSec: Math.round((ROWS / elapsed) * 1000),
      seconds: round1(elapsed / 1000),
      serverCpuMs: m.redisCpuMs!,
      clientCpuPct: m.generatorCpuPct!,
    };
  } finally {
    await Promise.all(queues.map((q) => q.close()));
    await redis.stop();
  }
}

// ---- run ----

async function profile(componentDir: string, profileDir: string): Promise<void> {
  for (const path of ['inProcess', 'barePut'] as const) {
    const probeDir = mkdtempSync(join(tmpdir(), 'qk-floor-probe-'));
    const h = await bootHarper(componentDir, probeDir);
    try {
      const now = Date.now();
      const t0 = performance.now();
      const rowsByWorker = await profiledRun(profileDir, path, () => harperFiling(path, h, now), 30);
      console.log(
        JSON.stringify({
          profiled: path,
          rowsPerSecUnderProfiler: Math.round((ROWS / (performance.now() - t0)) * 1000),
          rowsByWorker,
        }),
      );
    } finally {
      await h.destroy();
      rmSync(probeDir, { recursive: true, force: true });
    }
  }
  console.log(JSON.stringify({ profiles: profileDir }));
}

function summary(rounds: Array<Record<string, Filed>>) {
  const rates = Object.fromEntries(PATHS.map((p) => [p, rounds.map((r) => r[p]!.rowsPerSec)]));
  const medians = Object.fromEntries(PATHS.map((p) => [p, median(rates[p]!)]));
  const ratios: Record<string, { perRound: number[]; median: number }> = {};
  const against = (a: string, b: string) => {
    if (a === b || !PATHS.includes(a) || !PATHS.includes(b) || `${a}/${b}` in ratios) return;
    const perRound = rounds.map((r) => ratio(r[a]!.rowsPerSec, r[b]!.rowsPerSec));
    ratios[`${a}/${b}`] = { perRound, median: median(perRound) };
  };
  for (const a of PATHS) {
    against(a, 'bullmq');
    against(a, 'barePut');
    if (a.endsWith('@base')) against(a.slice(0, -'@base'.length), a);
  }
  against('api', 'inProcess');
  const distance: Record<string, number> = {};
  if (PATHS.includes('barePut'))
    for (const p of PATHS)
      if (p.startsWith('api') || p.startsWith('inProcess'))
        distance[`barePut-${p}`] = medians.barePut! - medians[p]!;
  return { rowsPerSec: rates, medians, ratios, distanceRowsPerSec: distance };
}

console.log(
  JSON.stringify({
    bench: 'filing-floor',
    ...machine(),
    rows: ROWS,
    rounds: ROUNDS,
    paths: PATHS,
    base: BASE ?? null,
    lanes: LANES,
    chunk: CHUNK,
    txn: TXN,
    profile: PROFILE,
    uptime: uptime(),
  }),
);
const profileDir = PROFILE ? mkdtempSync(join(tmpdir(), 'qk-floor-profile-')) : undefined;
const scratch = (from?: string) =>
  scratchComponent({
    keeper: true,
    scaleProbe: true,
    filingFloorRoute: true,
    ...(profileDir ? { profileDir } : {}),
    ...(from ? { from } : {}),
  });
const componentDir = scratch();
const baseDir = BASE && SPECS.some((s) => s.base) ? scratch(BASE) : undefined;
try {
  if (profileDir) await profile(componentDir, profileDir);
  else {
    const rounds: Array<Record<string, Filed>> = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const out: Record<string, Filed> = {};
      console.log(JSON.stringify({ round, uptimeBefore: uptime() }));
      for (const { spec, path, txn, base } of SPECS) {
        const loadBefore = loadavg();
        out[spec] =
          path === 'bullmq'
            ? await bullmqPath()
            : await harperPath(path, txn, base ? baseDir! : componentDir);
        console.log(JSON.stringify({ round, path: spec, ...out[spec], loadBefore, loadAfter: loadavg() }));
      }
      console.log(JSON.stringify({ round, uptimeAfter: uptime() }));
      rounds.push(out);
    }
    console.log(JSON.stringify({ summary: summary(rounds) }));
  }
} finally {
  removeScratch(componentDir);
  if (baseDir) removeScratch(baseDir);
}
console.log(JSON.stringify({ done: true, uptime: uptime() }));
