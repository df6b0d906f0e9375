// Claims side by side (SPEC §10): the same 100,000 due jobs drained through queue-keeper's HTTP claim
// (24 fleet clients, one keep-alive connection each, limit 25, 2 Harper worker threads) and through
// BullMQ 6.7 on a private Redis 7 (1 worker × concurrency 50, SPEC's anchor), interleaved
// ours, BullMQ, ours, BullMQ, … Each round measures:
//   A  lease grants/s with no results (ours only; BullMQ has no grant-without-complete mode)
//   B  full drain: claim 25 + one job_results batch of 25 per claim vs BullMQ completing no-op jobs
//   C  20,000 jobs due at one instant: due → started p50/p99/last
//   D  filed due-now → claimable (single job, idle queue), 20 samples
// Run: npx tsc -p tsconfig.json && node dist/bench/claims-vs-bullmq.js   (RUNS=3 JOBS=100000 by default)
import { Queue, Worker, type Job } from 'bullmq';
import { type Credentials, type HarperInstance } from '../test/harness.js';
import {
  benchUrl,
  busiestThreads,
  cpuMeter,
  deleteAll,
  fleetClient,
  loadavg,
  machine,
  median,
  overview,
  keeperStats,
  sleep,
  startRedis,
  summarize,
  threadCpuMs,
  until,
  type FleetClient,
} from './lib.js';
import {
  bootSideBySide,
  SIDE_BY_SIDE_CONFIG,
  SIDE_BY_SIDE_MAX_LEASES,
  drainClaims,
  dueAtOnce,
  dueNowLatency,
  fileToClaim,
  reportAll,
  type Granted,
} from './claim-drain.js';

const RUNS = Number(process.env.RUNS ?? 3);
const JOBS = Number(process.env.JOBS ?? 100_000);
const AT_ONCE = Number(process.env.AT_ONCE ?? 20_000);
const CLIENTS = Number(process.env.CLIENTS ?? 24);
const LIMIT = 25;
const BULL_CONCURRENCY = 50;
const LATENCY_SAMPLES = 20;
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

async function oursRound(h: HarperInstance, clients: FleetClient[], round: number) {
  const out: Record<string, unknown> = { system: 'queue-keeper', round, loadBefore: loadavg() };
  out.leasesAtStart = (await overview(h)).leases.occupancy;
  // A: grants only.
  const aUrls = Array.from({ length: JOBS }, (_, i) => benchUrl(`a${round}`, i));
  out.fileRowsPerSec = Math.round(await fileToClaim(h, aUrls, Date.now() - 120_000));
  const aGrants: Granted[] = [];
  const a = await drainClaims(h, clients, { target: JOBS, withResults: false, grants: aGrants });
  out.A = { ...a, lastPublish: (await keeperStats(h))?.lastPublish };
  // Independent rounds (issue 15 lever 6): A's leases are handed back, untimed, so B, C, D and the next
  // round start with an empty lease table instead of 100,000 live leases.
  out.aResultsRefused = await reportAll(clients, aGrants);
  await deleteAll(h, aUrls);
  await until('claim-only rows dropped and their leases released', async () => {
    const o = await overview(h);
    return o.keeper.dueCount === 0 && o.leases.occupancy === 0 ? true : undefined;
  });
  // B: full drain.
  const bUrls = Array.from({ length: JOBS }, (_, i) => benchUrl(`b${round}`, i));
  await fileToClaim(h, bUrls, Date.now() - 120_000);
  const t = threadCpuMs(h.pid);
  out.B = {
    ...(await drainClaims(h, clients, { target: JOBS, withResults: true })),
    threads: [] as string[],
  };
  (out.B as { threads: string[] }).threads = busiestThreads(t, threadCpuMs(h.pid));
  // C: 20,000 rows due at one whole minute.
  out.C = await dueAtOnce(h, clients, round, AT_ONCE);
  // D: filed due-now → claimable, one client, idle queue.
  out.D = await dueNowLatency(h, clients[0]!, round, LATENCY_SAMPLES);
  out.loadAfter = loadavg();
  return out;
}

async function bullRound(port: number, redisPid: number, round: number) {
  const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };
  const out: Record<string, unknown> = { system: 'bullmq', round, loadBefore: loadavg() };
  // B: drain JOBS no-op jobs.
  const q = new Queue(`drain-${round}`, { connection });
  const t0 = performance.now();
  for (let i = 0; i < JOBS; i += 10_000)
    await q.addBulk(
      Array.from({ length: Math.min(10_000, JOBS - i) }, (_, k) => ({
        name: 'render',
        data: { url: benchUrl(`b${round}`, i + k) },
      })),
    );
  out.addRowsPerSec = Math.round((JOBS / (performance.now() - t0)) * 1000);
  const started = new Set<string>();
  let dups = 0;
  const returnedAt = new Map<string, number>();
  const turnaround: number[] = [];
  let completed = 0;
  let finish!: () => void;
  const allDone = new Promise<void>((r) => (finish = r));
  const w = new Worker(
    `drain-${round}`,
    async (job: Job) => {
      if (started.has(job.id!)) dups++;
      started.add(job.id!);
      returnedAt.set(job.id!, performance.now());
    },
    { connection, concurrency: BULL_CONCURRENCY, autorun: false },
  );
  w.on('completed', (job: Job) => {
    const at = returnedAt.get(job.id!);
    if (at !== undefined) turnaround.push(performance.now() - at);
    if (++completed === JOBS) finish();
  });
  const meter = cpuMeter({ redis: redisPid });
  const s = performance.now();
  void w.run();
  await allDone;
  const ms = performance.now() - s;
  out.B = {
    jobs: completed,
    jobsPerSec: Math.round((completed / ms) * 1000),
    dups,
    completeFetchMs: summarize(turnaround),
    ...meter(),
  };
  await w.close();
  await q.obliterate({ force: true }).catch(() => undefined);
  await q.close();
  // C: 20,000 delayed jobs due at one instant.
  const qc = new Queue(`due-${round}`, { connection });
  const afterDue: number[] = [];
  let cDone!: () => void;
  const cAll = new Promise<void>((r) => (cDone = r));
  const wc = new Worker(
    `due-${round}`,
    async () => {
      afterDue.push(Date.now() - dueAt);
      if (afterDue.length === AT_ONCE) cDone();
    },
    { connection, concurrency: BULL_CONCURRENCY },
  );
  const now0 = Date.now();
  const dueAt = now0 + 8000;
  for (let i = 0; i < AT_ONCE; i += 10_000)
    await qc.addBulk(
      Array.from({ length: Math.min(10_000, AT_ONCE - i) }, (_, k) => ({
        name: 'render',
        data: { url: benchUrl(`c${round}`, i + k) },
        opts: { timestamp: now0, delay: dueAt - now0 },
      })),
    );
  const cMeter = cpuMeter({ redis: redisPid });
  await cAll;
  const sorted = [...afterDue].sort((a, b) => a - b);
  out.C = { ...summarize(afterDue), first: sorted[0], last: sorted.at(-1), ...cMeter() };
  await wc.close();
  await qc.obliterate({ force: true }).catch(() => undefined);
  await qc.close();
  // D: add → start on an idle worker.
  const qd = new Queue(`lat-${round}`, { connection });
  let onStart: ((t: number) => void) | null = null;
  const wd = new Worker(`lat-${round}`, async () => onStart?.(performance.now()), {
    connection,
    concurrency: BULL_CONCURRENCY,
  });
  await wd.waitUntilReady();
  await sleep(200);
  const lat: number[] = [];
  for (let k = 0; k < LATENCY_SAMPLES; k++) {
    const startedAt = new Promise<number>((r) => (onStart = r));
    const t = performance.now();
    await qd.add('render', { k });
    lat.push((await startedAt) - t);
    await sleep(100 + Math.random() * 300);
  }
  out.D = summarize(lat);
  await wd.close();
  await qd.obliterate({ force: true }).catch(() => undefined);
  await qd.close();
  out.loadAfter = loadavg();
  return out;
}

const info = machine();
console.log(
  JSON.stringify({
    bench: 'claims-vs-bullmq',
    ...info,
    runs: RUNS,
    jobs: JOBS,
    clients: CLIENTS,
    limit: LIMIT,
    bullConcurrency: BULL_CONCURRENCY,
    config: SIDE_BY_SIDE_CONFIG,
    maxLeases: SIDE_BY_SIDE_MAX_LEASES,
  }),
);
const redis = await startRedis();
const h = await bootSideBySide(fleet);
const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const results: any[] = [];
try {
  for (let round = 1; round <= RUNS; round++) {
    const ours = await oursRound(h, clients, round);
    console.log(JSON.stringify(ours));
    results.push(ours);
    const bull = await bullRound(redis.port, redis.pid, round);
    console.log(JSON.stringify(bull));
    results.push(bull);
  }
} finally {
  await Promise.all(clients.map((c) => c.close()));
  const errors = h
    .output()
    .split('\n')
    .filter((l) => /\berror\b/i.test(l));
  if (errors.length)
    console.log(`harper logged ${errors.length} error lines; last:\n${errors.slice(-5).join('\n')}`);
  const full = h
    .output()
    .split('\n')
    .filter((l) => l.includes('lease window full')).length;
  console.log(JSON.stringify({ leaseWindowFullWarnings: full }));
  await h.destroy();
  await redis.stop();
}
const ours = results.filter((r) => r.system === 'queue-keeper');
const bull = results.filter((r) => r.system === 'bullmq');
const m = (xs: unknown[]) => median(xs.map(Number));
const bullDrain = m(bull.map((r) => r.B.jobsPerSec));
const summary = {
  grantsPerSec: m(ours.map((r) => r.A.jobsPerSec)),
  grantsVsBullDrain: Math.round((m(ours.map((r) => r.A.jobsPerSec)) / bullDrain) * 100) / 100,
  oursDrainPerSec: m(ours.map((r) => r.B.jobsPerSec)),
  bullDrainPerSec: bullDrain,
  drainRatio: Math.round((m(ours.map((r) => r.B.jobsPerSec)) / bullDrain) * 100) / 100,
  oursClaimMs: { p50: m(ours.map((r) => r.B.claimMs.p50)), p99: m(ours.map((r) => r.B.claimMs.p99)) },
  oursResultsMs: { p50: m(ours.map((r) => r.B.resultsMs.p50)), p99: m(ours.map((r) => r.B.resultsMs.p99)) },
  bullCompleteFetchMs: {
    p50: m(bull.map((r) => r.B.completeFetchMs.p50)),
    p99: m(bull.map((r) => r.B.completeFetchMs.p99)),
  },
  dups: {
    ours: ours.reduce((s, r) => s + r.A.dups + r.B.dups + r.C.dups, 0),
    bull: bull.reduce((s, r) => s + r.B.dups, 0),
  },
  dueAtOnce: {
    ours: {
      first: m(ours.map((r) => r.C.dueMs.first)),
      p50: m(ours.map((r) => r.C.dueMs.p50)),
      p99: m(ours.map((r) => r.C.dueMs.p99)),
      last: m(ours.map((r) => r.C.dueMs.last)),
    },
    bull: {
      first: m(bull.map((r) => r.C.first)),
      p50: m(bull.map((r) => r.C.p50)),
      p99: m(bull.map((r) => r.C.p99)),
      last: m(bull.map((r) => r.C.last)),
    },
  },
  filedToClaimableMs: {
    ours: { p50: m(ours.map((r) => r.D.p50)), p99: m(ours.map((r) => r.D.p99)) },
    bull: { p50: m(bull.map((r) => r.D.p50)), p99: m(bull.map((r) => r.D.p99)) },
  },
  generatorCpuPct: {
    oursA: m(ours.map((r) => r.A.generatorCpuPct)),
    oursB: m(ours.map((r) => r.B.generatorCpuPct)),
    bullB: m(bull.map((r) => r.B.generatorCpuPct)),
  },
};
console.log(JSON.stringify({ summary }));
