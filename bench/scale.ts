// One node at N URLs (2 worker threads), for each N given: the figures of the sizing table
// (docs/sizing.md). The URLs are scale-mix.ts's (20 queues, cadences 1 h–30 d, 10 % due, URLs of 60–200
// bytes), filed with render.deviceTypes set to the first DEVICES names of DEVICE_NAMES, so each URL is
// DEVICES rows (`<url>|<device>`) and every per-row figure divides by N × DEVICES. Per N, in one run:
//   bullmq    BullMQ's addBulk of the same N × DEVICES jobs (one queue per our queue, delay = dueAt − now,
//             10,000 URLs per batch) on a private durable Redis (AOF everysec, noeviction), stopped
//             before Harper boots (BULL=0 skips it);
//   filing    FILE=api (default): POST /render_queue/targets, one client, batches of 10,000, rows/s;
//             FILE=seed: the seed probe route files the same rows in-process through the same validation
//             and schedule write, without HTTP or JSON (two requests at a time), which is the floor under
//             the API's rate. With FILE=api and KILL_FILING=1 (default) Harper is killed (-9) while the
//             batch that crosses N/2 is in flight, restarted, and every acknowledged row must be there;
//             the filing then goes on from the first unacknowledged batch;
//   disk      every file under Harper's root (allocated bytes) per row, and where the schedule's bytes
//             go (lmdb pages of the record store, the audit log, the failing list);
//   memory    after a clean restart, keeper live and 10 s quiet: RssAnon with the keeper on minus the
//             same root with the keeper off (scratch-component.ts `keeper: false`), per held row; the
//             whole process's RssAnon per row; worker 0's used heap and heap limit;
//   restart   kill -9 of the live node, restart: spawn → HTTP ready (every worker answers health), HTTP →
//             first grant (one fleet client claiming limit 1 in a loop), HTTP → keeper live with every row;
//   publish   PUBLISH_SECONDS of keeper publishes (every 1 s) while one light client claims and reports:
//             each publish's wall ms as scratch-component's publishProfileDir records it;
//   operator  OP_SAMPLES sequential requests each of GET queue-state, overview, metrics and POST explain
//             (a random filed URL), client-side ms;
//   claims    CLIENTS fleet clients (keep-alive, limit 25, results in one job_results per claim) draining
//             DRAIN due rows: claim and results ms;
//   duties    queue.keeper.verifyInterval set to 60 s, then until a verify walk has finished (and at
//             least DUTY_SECONDS): every hold of worker 0's event loop ≥ 50 ms since the restart, by the
//             duties whose run overlapped it (scale-probe.ts), and each duty's longest run;
//   mid-load  kill -9 half way through the keeper's load after a restart, restart again: rows lost
//             (rows in the record store and held by the keeper, against N × DEVICES).
// Every phase prints one JSON line with the 1-minute load average before and after it.
// Run: npm run build && flock /work/bench.lock node dist/bench/scale.js 100000 1000000 3000000
//   env: DEVICES (1), FILE (api|seed), BULL (1), KILL_FILING (1), MAX_HEAP_MB (Harper's
//   threads.maxHeapMemory; unset: Harper's default), DRAIN (8000), CLIENTS (24), PUBLISH_SECONDS (60),
//   OP_SAMPLES (200), DUTY_SECONDS (90)
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { startHarper, type Credentials, type HarperInstance, type StartOptions } from '../test/harness.js';
import { drainClaims, renderedResults, type Granted } from './claim-drain.js';
import {
  fleetClient,
  loadavg,
  machine,
  metricValues,
  overview,
  rssKb,
  sleep,
  startRedis,
  summarize,
  until,
} from './lib.js';
import {
  readStalls,
  dutyFigures,
  fileSeed,
  keeperLive,
  stallSummary,
  storage,
  type HeapReport,
} from './probe-files.js';
import {
  DEVICE_NAMES,
  queueName,
  scaleRoutes,
  scaleTarget,
  scaleTargets,
  scaleUrl,
  SCALE_QUEUES,
} from './scale-mix.js';
import { removeScratch, scratchComponent } from './scratch-component.js';

const SIZES = process.argv.slice(2).map(Number);
if (SIZES.length === 0) SIZES.push(1_000_000);
const FILE = process.env.FILE ?? 'api';
const BULL = process.env.BULL !== '0';
const KILL_FILING = process.env.KILL_FILING !== '0';
const MAX_HEAP_MB = process.env.MAX_HEAP_MB ? Number(process.env.MAX_HEAP_MB) : undefined;
const DRAIN = Number(process.env.DRAIN ?? 8000);
const CLIENTS = Number(process.env.CLIENTS ?? 24);
const PUBLISH_SECONDS = Number(process.env.PUBLISH_SECONDS ?? 60);
const OP_SAMPLES = Number(process.env.OP_SAMPLES ?? 200);
const DUTY_SECONDS = Number(process.env.DUTY_SECONDS ?? 90);
const BATCH = 10_000;
const DEVICES = Number(process.env.DEVICES ?? 1);
if (!Number.isInteger(DEVICES) || DEVICES < 1 || DEVICES > DEVICE_NAMES.length)
  throw new Error(`DEVICES must be a whole number from 1 to ${DEVICE_NAMES.length}`);
const CONFIG = {
  render: { routes: scaleRoutes(), deviceTypes: DEVICE_NAMES.slice(0, DEVICES) },
  queue: { keeper: { publishInterval: 1000 } },
};
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

function emit(phase: string, rows: number, data: Record<string, unknown>): void {
  console.log(JSON.stringify({ phase, rows, urls: rows / DEVICES, devices: DEVICES, ...data }));
}

/** Runs one phase between two load-average readings. */
async function timed<T extends Record<string, unknown>>(
  phase: string,
  rows: number,
  run: () => Promise<T>,
): Promise<T> {
  const loadBefore = loadavg();
  const out = await run();
  emit(phase, rows, { ...out, loadBefore, loadAfter: loadavg() });
  return out;
}

const ms = (x: number) => Math.round(x);

// ---- BullMQ ----

async function bullAddBulk(rows: number) {
  const redis = await startRedis({ persistence: 'aof-everysec' });
  const connection = { host: '127.0.0.1', port: redis.port, maxRetriesPerRequest: null };
  const queues = Array.from({ length: SCALE_QUEUES }, (_, q) => new Queue(queueName(q), { connection }));
  try {
    const now = Date.now();
    const t0 = performance.now();
    const urls = rows / DEVICES;
    for (let i = 0; i < urls; i += BATCH) {
      const byQueue: Array<Array<{ name: string; data: unknown; opts: Record<string, unknown> }>> =
        queues.map(() => []);
      for (let k = i; k < Math.min(urls, i + BATCH); k++) {
        const t = scaleTarget(k, now);
        for (const device of CONFIG.render.deviceTypes)
          byQueue[k % SCALE_QUEUES]!.push({
            name: 'render',
            data: { url: t.url, deviceType: device, cadenceMs: t.cadenceMs, fromSitemap: t.fromSitemap },
            opts: { jobId: DEVICES === 1 ? `r${k}` : `r${k}|${device}`, delay: Math.max(0, t.dueAt - now) },
          });
      }
      await Promise.all(queues.map((q, n) => (byQueue[n]!.length ? q.addBulk(byQueue[n]!) : null)));
    }
    const elapsed = performance.now() - t0;
    const mem = await redis.info('memory');
    const p = await redis.info('persistence');
    return {
      addRowsPerSec: ms((rows / elapsed) * 1000),
      seconds: ms(elapsed / 1000),
      usedMemoryBytesPerRow: ms(Number(mem.used_memory) / rows),
      aofBytesPerRow: ms(Number(p.aof_current_size ?? p.aof_base_size ?? 0) / rows),
      redisRssAnonKb: rssKb(redis.pid).rssAnonKb,
      aofWriteStatus: p.aof_last_write_status,
    };
  } finally {
    await Promise.all(queues.map((q) => q.close()));
    await redis.stop();
  }
}

// ---- Harper ----

interface Node {
  on: string;
  off: string;
  probeDir: string;
  root?: string;
}

function startOptions(node: Node, componentDir: string): StartOptions {
  return {
    componentDir,
    root: node.root,
    logLevel: 'warn',
    env: { QK_SCALE_PROBE_DIR: node.probeDir },
    readyTimeoutMs: 600_000,
    ...(MAX_HEAP_MB ? { harperConfig: { threads: { maxHeapMemory: MAX_HEAP_MB } } } : {}),
  };
}

/** Allocated bytes of every file under `dir`, and the biggest files. */
function diskUse(dir: string) {
  const files: Array<[string, number]> = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) files.push([p.slice(dir.length + 1), statSync(p).blocks * 512]);
    }
  };
  walk(dir);
  files.sort((a, b) => b[1] - a[1]);
  return { bytes: files.reduce((s, [, b]) => s + b, 0), top: files.slice(0, 6) };
}

/** Worker 0's latest heap figures (the probe writes them every 2 s). */
async function worker0Heap(probeDir: string, after: number): Promise<HeapReport> {
  return until(
    "worker 0's heap figures",
    async () => {
      for (const f of readdirSync(probeDir).filter((n) => n.startsWith('heap-'))) {
        try {
          const r = JSON.parse(readFileSync(join(probeDir, f), 'utf8')) as HeapReport;
          if (r.workerIndex === 0 && r.at > after) return r;
        } catch {
          // being rewritten
        }
      }
      return undefined;
    },
    30_000,
    250,
  );
}

async function configure(h: HarperInstance, body: unknown) {
  const r = await h.fetch('/prerender_admin/config', { body });
  if (r.status !== 200) throw new Error(`config: ${r.status} ${r.text}`);
}

/** Files rows [from, to) through the API; calls `beforeBatch` ahead of each (it may kill). */
async function fileApi(h: HarperInstance, from: number, to: number, now: number) {
  for (let i = from; i < to; i += BATCH) {
    const targets = scaleTargets(i, Math.min(to, i + BATCH), now);
    const r = await h.fetch('/render_queue/targets', { body: { targets } });
    if (r.status !== 200 || r.json.upserted !== targets.length)
      throw new Error(`filing failed at ${i}: ${r.status} ${r.text.slice(0, 300)}`);
  }
}

/** A fleet client claims (limit 1) until it is granted a job; answers when, and reports the job. */
async function firstGrant(h: HarperInstance): Promise<number> {
  const c = fleetClient(h, fleet);
  try {
    for (;;) {
      const r = await c.post('/render_queue/claim', { limit: 1 }).catch(() => null);
      const jobs = (r?.status === 200 ? r.json : []) as Granted[];
      if (jobs.length > 0) {
        const at = performance.now();
        await c.post('/render_queue/job_results', renderedResults(jobs));
        return at;
      }
      await sleep(5);
    }
  } finally {
    await c.close();
  }
}

async function publishSamples(h: HarperInstance, probeDir: string) {
  for (const f of readdirSync(probeDir).filter((n) => n.startsWith('publishes-'))) rmSync(join(probeDir, f));
  const c = fleetClient(h, fleet);
  let stop = false;
  const claimer = (async () => {
    while (!stop) {
      const r = await c.post('/render_queue/claim', { limit: 5 });
      const jobs = (r.json ?? []) as Granted[];
      if (jobs.length) await c.post('/render_queue/job_results', renderedResults(jobs));
      await sleep(150);
    }
  })();
  await sleep(PUBLISH_SECONDS * 1000);
  stop = true;
  await claimer;
  await c.close();
  await sleep(2500); // the probe flushes every 2 s
  const walls: number[] = [];
  const cpu: number[] = [];
  let published = 0;
  for (const f of readdirSync(probeDir).filter((n) => n.startsWith('publishes-'))) {
    for (const line of readFileSync(join(probeDir, f), 'utf8').split('\n')) {
      if (!line) continue;
      for (const row of (JSON.parse(line) as { rows: number[][] }).rows) {
        walls.push(row[1]!);
        cpu.push(row[2]!);
        published = row[4]!;
      }
    }
  }
  const o = await overview(h);
  return {
    wallMs: summarize(walls),
    cpuMs: summarize(cpu),
    published,
    dueCount: o.keeper.dueCount,
  };
}

async function operatorLatency(h: HarperInstance, urls: number) {
  const out: Record<string, unknown> = {};
  const time = async (fn: () => Promise<{ status: number }>) => {
    const t: number[] = [];
    for (let k = 0; k < OP_SAMPLES; k++) {
      const s = performance.now();
      const r = await fn();
      if (r.status !== 200) throw new Error(`operator request: ${r.status}`);
      t.push(performance.now() - s);
    }
    return summarize(t);
  };
  out.queueState = await time(() => h.fetch('/prerender_admin/queue-state'));
  out.overview = await time(() => h.fetch('/prerender_admin/overview'));
  out.metrics = await time(() => h.fetch('/prerender_admin/metrics'));
  out.explain = await time(() =>
    h.fetch('/prerender_admin/explain', { body: { url: scaleUrl(Math.floor(Math.random() * urls)) } }),
  );
  return out;
}

async function claimDrain(h: HarperInstance) {
  const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
  try {
    const d = await drainClaims(h, clients, { target: DRAIN, withResults: true });
    return {
      jobs: d.jobs,
      jobsPerSec: d.jobsPerSec,
      dups: d.dups,
      claimMs: d.claimMs,
      resultsMs: d.resultsMs,
      emptyClaims: d.emptyClaims,
    };
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

async function dutyWindow(h: HarperInstance, probeDir: string, since: number) {
  const verifies = async () =>
    (await metricValues(h)).get('queue_keeper_keeper_verify_duration_seconds_count') ?? 0;
  const before = await verifies();
  const t0 = performance.now();
  await configure(h, { queue: { keeper: { verifyInterval: 60_000 } } });
  await until(
    'a verify walk finished',
    async () => ((await verifies()) > before ? true : undefined),
    1_800_000,
    2000,
  );
  const left = DUTY_SECONDS * 1000 - (performance.now() - t0);
  if (left > 0) await sleep(left);
  await sleep(2500);
  const o = await overview(h);
  const stalls = readStalls(probeDir);
  return {
    windowSeconds: ms((performance.now() - t0) / 1000),
    sinceRestartSeconds: ms((Date.now() - since) / 1000),
    lastVerify: o.keeper.stats?.lastVerify ?? null,
    stalls: stallSummary(stalls),
    duties: dutyFigures(probeDir),
  };
}

/** One run at `urls` URLs: urls × DEVICES rows. */
async function oneSize(urls: number) {
  const rows = urls * DEVICES;
  if (BULL) await timed('bullmq', rows, () => bullAddBulk(rows));
  const probeDir = mkdtempSync(join(tmpdir(), 'qk-scale-probe-'));
  const node: Node = {
    on: scratchComponent({ keeper: true, scaleProbe: true, publishProfileDir: probeDir }),
    off: scratchComponent({ keeper: false, scaleProbe: true }),
    probeDir,
  };
  let h: HarperInstance | undefined;
  try {
    h = await startHarper(startOptions(node, node.on));
    node.root = h.root;
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    await configure(h, CONFIG);

    // Filing.
    await timed('filing', rows, async () => {
      const now = Date.now();
      const t0 = performance.now();
      let downMs = 0;
      let killed: Record<string, unknown> | null = null;
      if (FILE === 'seed') await fileSeed(h!, urls, now);
      else if (KILL_FILING && urls >= 2 * BATCH) {
        const half = Math.floor(urls / 2 / BATCH) * BATCH;
        const halfRows = half * DEVICES;
        await fileApi(h!, 0, half, now);
        // The batch that crosses the half, killed while it is in flight.
        const inFlight = h!
          .fetch('/render_queue/targets', { body: { targets: scaleTargets(half, half + BATCH, now) } })
          .then((r) => r.status)
          .catch(() => 'no answer');
        await sleep(40);
        const d0 = performance.now();
        await h!.kill();
        const answer = await inFlight;
        h = await startHarper(startOptions(node, node.on));
        const s = await storage(h);
        const k = await keeperLive(h, halfRows);
        downMs = performance.now() - d0;
        const first = await h.fetch('/prerender_admin/explain', { body: { url: scaleUrl(0) } });
        const last = await h.fetch('/prerender_admin/explain', { body: { url: scaleUrl(half - 1) } });
        killed = {
          acknowledged: halfRows,
          inFlightAnswer: answer,
          recordEntries: s.record.entries,
          keeperRows: k.stats.rows,
          lost: Math.max(0, halfRows - s.record.entries),
          firstAndLastAckedHeld: Boolean(first.json?.row) && Boolean(last.json?.row),
          restartToLiveMs: ms(downMs),
        };
        await fileApi(h, half, urls, now);
      } else await fileApi(h!, 0, urls, now);
      const elapsed = performance.now() - t0 - downMs;
      return {
        path: FILE,
        rowsPerSec: ms((rows / elapsed) * 1000),
        urlsPerSec: ms((urls / elapsed) * 1000),
        seconds: ms(elapsed / 1000),
        killed,
      };
    });
    await keeperLive(h, rows);

    // Disk, right after filing.
    await timed('disk', rows, async () => {
      const s = await storage(h!);
      const all = diskUse(node.root!);
      const per = (b: number) => ms(b / rows);
      return {
        bytesPerRow: per(all.bytes),
        totalBytes: all.bytes,
        topFiles: all.top,
        recordBytesPerRow: per(s.record?.bytes ?? 0),
        auditBytesPerRow: per(s.audit?.bytes ?? 0),
        failingBytesPerRow: per(s.failing?.bytes ?? 0),
        record: s.record,
        audit: s.audit,
        file: s.file,
      };
    });
    await h.stop();

    // Memory: keeper off, then a clean start with the keeper on.
    const memory = await timed('memory', rows, async () => {
      const off = await startHarper(startOptions(node, node.off));
      await sleep(10_000);
      const rssOff = rssKb(off.pid);
      const heapOff = await worker0Heap(probeDir, Date.now());
      await off.stop();
      const spawnAt = performance.now();
      h = await startHarper(startOptions(node, node.on));
      const readyAt = performance.now();
      const k = await keeperLive(h, rows);
      const liveAt = performance.now();
      await sleep(10_000);
      const rssOn = rssKb(h.pid);
      const heapOn = await worker0Heap(probeDir, Date.now());
      const mb = (b: number) => ms(b / 2 ** 20);
      return {
        cleanStart: {
          httpMs: ms(readyAt - spawnAt),
          liveAfterHttpMs: ms(liveAt - readyAt),
          load: k.stats.load,
        },
        rssOff,
        rssOn,
        keeperBytesPerRow: ms(((rssOn.rssAnonKb - rssOff.rssAnonKb) * 1024) / rows),
        processAnonBytesPerRow: ms((rssOn.rssAnonKb * 1024) / rows),
        worker0HeapMb: {
          off: mb(heapOff.usedHeapBytes),
          on: mb(heapOn.usedHeapBytes),
          limit: mb(heapOn.heapLimitBytes),
        },
        worker0HeapBytesPerRow: ms((heapOn.usedHeapBytes - heapOff.usedHeapBytes) / rows),
      };
    });

    // kill -9 of the live node, restart.
    await timed('restart', rows, async () => {
      await h!.kill();
      readStalls(probeDir);
      const spawnAt = performance.now();
      const since = Date.now();
      h = await startHarper(startOptions(node, node.on));
      const httpAt = performance.now();
      const [grantAt, k] = await Promise.all([firstGrant(h), keeperLive(h, rows)]);
      const liveAt = performance.now();
      return {
        since,
        httpMs: ms(httpAt - spawnAt),
        firstGrantAfterHttpMs: ms(grantAt - httpAt),
        fullLoadAfterHttpMs: ms(liveAt - httpAt),
        keeperLoad: k.stats.load,
      };
    });
    const restartedAt = Date.now();

    await timed('publish', rows, () => publishSamples(h!, probeDir));
    await timed('operator', rows, () => operatorLatency(h!, urls));
    await timed('claims', rows, () => claimDrain(h!));
    await timed('duties', rows, () => dutyWindow(h!, probeDir, restartedAt));

    // kill -9 half way through the keeper's load, restart, count.
    await timed('midload', rows, async () => {
      const loadMs = Number(memory.cleanStart.liveAfterHttpMs);
      await h!.kill();
      h = await startHarper(startOptions(node, node.on));
      await sleep(Math.max(0, loadMs / 2));
      const during = await overview(h).catch(() => null);
      await h.kill();
      h = await startHarper(startOptions(node, node.on));
      const k = await keeperLive(h, 0);
      await until(
        'the keeper holds every row again',
        async () => {
          const o = await overview(h!);
          return Number(o.keeper.stats?.rows ?? 0) >= rows ? true : undefined;
        },
        120_000,
        500,
      ).catch(() => undefined);
      const s = await storage(h);
      const o = await overview(h);
      return {
        killedAfterMs: ms(loadMs / 2),
        phaseAtKill: during?.keeper?.phase ?? null,
        recordEntries: s.record.entries,
        keeperRows: o.keeper.stats?.rows ?? k.stats.rows,
        lost: Math.max(0, rows - s.record.entries),
      };
    });
  } finally {
    const out = h?.output() ?? '';
    const errors = out.split('\n').filter((l) => /\berror\b|heap|out of memory/i.test(l));
    if (errors.length) emit('harper-log', rows, { lines: errors.length, last: errors.slice(-5) });
    await h?.destroy();
    removeScratch(node.on);
    removeScratch(node.off);
    rmSync(probeDir, { recursive: true, force: true });
  }
}

const dfLine = () => execFileSync('df', ['-h', '/tmp'], { encoding: 'utf8' }).split('\n')[1];
console.log(
  JSON.stringify({
    bench: 'scale',
    ...machine(),
    devices: CONFIG.render.deviceTypes,
    uptime: execFileSync('uptime', { encoding: 'utf8' }).trim(),
    file: FILE,
    bull: BULL,
    maxHeapMb: MAX_HEAP_MB ?? 'Harper default',
    drain: DRAIN,
    clients: CLIENTS,
    df: dfLine(),
  }),
);
for (const urls of SIZES) await oneSize(urls);
console.log(
  JSON.stringify({ done: true, df: dfLine(), uptime: execFileSync('uptime', { encoding: 'utf8' }).trim() }),
);
