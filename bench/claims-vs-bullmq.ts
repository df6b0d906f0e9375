// Claims side by side: the same JOBS due jobs drained through queue-keeper's HTTP claim (CLIENTS fleet
// clients, one keep-alive connection each, limit 25, 2 Harper worker threads) and through BullMQ 6.7
// (1 worker × concurrency 50) on two private Redis 7 servers, each in its own temp folder:
//   durable          AOF on, `appendfsync everysec`, `maxmemory-policy noeviction`: the settings BullMQ's
//                    "Going to production" guide asks for. The peer every target is set against.
//   persistence-off  no AOF, no RDB snapshots: context only, no target.
// At start each server's live settings are checked (CONFIG GET, INFO persistence) and the bench stops if
// either differs from its mode, or if the durable server's folder is not on the same filesystem as
// Harper's root. Rounds interleave ours, durable, persistence-off, ours, … Each round measures:
//   A  lease grants/s with no results (ours only; BullMQ has no grant-without-complete mode)
//   B  full drain: claim 25 + one job_results batch of 25 per claim vs BullMQ completing no-op jobs
//   C  AT_ONCE jobs due at one instant: due → started p50/p99/last; for ours also the claims answered
//      empty while rows of the burst were still due, against the claims that granted
//   D  filed due-now → claimable (single job, idle queue), 20 samples
// The summary gives medians over rounds and our ratios against both BullMQ lines.
//
// Needs /usr/bin/redis-server (Debian: `apt-get update && apt-get install -y redis-server redis-tools`);
// BullMQ and ioredis come from `npm install`.
// Run: npm run build && node dist/bench/claims-vs-bullmq.js
//   env: RUNS (3), JOBS (100000), AT_ONCE (20000), CLIENTS (24)
import { statSync } from 'node:fs';
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
  type Redis,
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
  // A's leases are handed back, untimed, so B, C, D and the next round start with an empty lease table
  // instead of JOBS live leases.
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
  // C: AT_ONCE rows due at one whole minute.
  out.C = await dueAtOnce(h, clients, round, AT_ONCE);
  // D: filed due-now → claimable, one client, idle queue.
  out.D = await dueNowLatency(h, clients[0]!, round, LATENCY_SAMPLES);
  out.loadAfter = loadavg();
  return out;
}

async function bullRound(redis: Redis, round: number) {
  const connection = { host: '127.0.0.1', port: redis.port, maxRetriesPerRequest: null };
  const redisPid = redis.pid;
  const out: Record<string, unknown> = {
    system: 'bullmq',
    redis: redis.persistence,
    round,
    loadBefore: loadavg(),
  };
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
  // C: AT_ONCE delayed jobs due at one instant, 8 s after the adds start.
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
  // Negative when the adds ran past the due instant (the burst then starts before it is fully queued).
  const addedBeforeDueMs = dueAt - Date.now();
  const cMeter = cpuMeter({ redis: redisPid });
  await cAll;
  const sorted = [...afterDue].sort((a, b) => a - b);
  out.C = { ...summarize(afterDue), first: sorted[0], last: sorted.at(-1), addedBeforeDueMs, ...cMeter() };
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
  out.persistence = await persistenceState(redis);
  out.loadAfter = loadavg();
  return out;
}

/**
 * The AOF's state after a round. Throws when the server's AOF is not in its mode (on for the durable
 * server, off for the other) or Redis reports a failed AOF write or rewrite.
 */
async function persistenceState(redis: Redis) {
  const p = await redis.info('persistence');
  const wantAof = redis.persistence === 'aof-everysec' ? '1' : '0';
  if (p.aof_enabled !== wantAof)
    throw new Error(`redis (${redis.persistence}) has aof_enabled ${p.aof_enabled}, not ${wantAof}`);
  if (wantAof === '0') return { aofEnabled: p.aof_enabled };
  if (p.aof_last_write_status !== 'ok' || p.aof_last_bgrewrite_status !== 'ok')
    throw new Error(
      `redis (${redis.persistence}) AOF failed: write ${p.aof_last_write_status}, rewrite ${p.aof_last_bgrewrite_status}`,
    );
  return {
    aofEnabled: p.aof_enabled,
    aofCurrentBytes: Number(p.aof_current_size),
    aofRewrites: Number(p.aof_rewrites),
    aofDelayedFsync: Number(p.aof_delayed_fsync),
  };
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
const durable = await startRedis({ persistence: 'aof-everysec' });
let persistenceOff: Redis | undefined;
let h: HarperInstance | undefined;
let clients: FleetClient[] = [];
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const results: any[] = [];
try {
  persistenceOff = await startRedis({ persistence: 'off' });
  h = await bootSideBySide(fleet);
  if (statSync(durable.dir).dev !== statSync(h.root).dev)
    throw new Error(`redis dir ${durable.dir} and Harper's root ${h.root} are on different filesystems`);
  const peers = [durable, persistenceOff];
  const settings = await Promise.all(
    peers.map(async (r) => ({
      redis: r.persistence,
      version: (await r.info('server')).redis_version,
      dir: r.dir,
      aofEnabled: (await r.info('persistence')).aof_enabled,
    })),
  );
  console.log(JSON.stringify({ redis: settings }));
  clients = Array.from({ length: CLIENTS }, () => fleetClient(h!, fleet));
  for (let round = 1; round <= RUNS; round++) {
    const ours = await oursRound(h, clients, round);
    console.log(JSON.stringify(ours));
    results.push(ours);
    for (const redis of peers) {
      const bull = await bullRound(redis, round);
      console.log(JSON.stringify(bull));
      results.push(bull);
    }
  }
} finally {
  await Promise.all(clients.map((c) => c.close()));
  if (h) {
    const output = h.output().split('\n');
    const errors = output.filter((l) => /\berror\b/i.test(l));
    if (errors.length)
      console.log(`harper logged ${errors.length} error lines; last:\n${errors.slice(-5).join('\n')}`);
    const full = output.filter((l) => l.includes('lease window full')).length;
    console.log(JSON.stringify({ leaseWindowFullWarnings: full }));
    await h.destroy();
  }
  await persistenceOff?.stop();
  await durable.stop();
}
const ours = results.filter((r) => r.system === 'queue-keeper');
const bullDurable = results.filter((r) => r.system === 'bullmq' && r.redis === 'aof-everysec');
const bullOff = results.filter((r) => r.system === 'bullmq' && r.redis === 'off');
const m = (xs: unknown[]) => median(xs.map(Number));
const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const perRound = (rs: any[], pick: (r: any) => unknown) => rs.map((r) => Number(pick(r)));
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const pcts = (rs: any[], key: 'B' | 'D', field: string) => ({
  p50: m(rs.map((r) => r[key][field].p50)),
  p99: m(rs.map((r) => r[key][field].p99)),
});
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const bullDue = (rs: any[]) => ({
  first: m(rs.map((r) => r.C.first)),
  p50: m(rs.map((r) => r.C.p50)),
  p99: m(rs.map((r) => r.C.p99)),
  last: m(rs.map((r) => r.C.last)),
});
const oursGrants = m(ours.map((r) => r.A.jobsPerSec));
const oursDrain = m(ours.map((r) => r.B.jobsPerSec));
const durableDrain = m(bullDurable.map((r) => r.B.jobsPerSec));
const offDrain = m(bullOff.map((r) => r.B.jobsPerSec));
const summary = {
  peers: {
    durable: 'BullMQ on Redis, AOF everysec, noeviction: the peer the targets name',
    persistenceOff: 'BullMQ on Redis, no AOF, no snapshots: context, no target',
  },
  grantsPerSec: oursGrants,
  drainPerSec: { ours: oursDrain, durable: durableDrain, persistenceOff: offDrain },
  drainRatio: { vsDurable: ratio(oursDrain, durableDrain), vsPersistenceOff: ratio(oursDrain, offDrain) },
  drainRatioByRound: {
    vsDurable: ours.map((r, i) => ratio(r.B.jobsPerSec, bullDurable[i]!.B.jobsPerSec)),
    vsPersistenceOff: ours.map((r, i) => ratio(r.B.jobsPerSec, bullOff[i]!.B.jobsPerSec)),
  },
  grantsVsDrain: {
    vsDurable: ratio(oursGrants, durableDrain),
    vsPersistenceOff: ratio(oursGrants, offDrain),
  },
  oursClaimMs: pcts(ours, 'B', 'claimMs'),
  oursResultsMs: pcts(ours, 'B', 'resultsMs'),
  bullCompleteFetchMs: {
    durable: pcts(bullDurable, 'B', 'completeFetchMs'),
    persistenceOff: pcts(bullOff, 'B', 'completeFetchMs'),
  },
  dups: {
    ours: ours.reduce((s, r) => s + r.A.dups + r.B.dups + r.C.dups, 0),
    durable: bullDurable.reduce((s, r) => s + r.B.dups, 0),
    persistenceOff: bullOff.reduce((s, r) => s + r.B.dups, 0),
  },
  dueAtOnce: {
    ours: {
      first: m(ours.map((r) => r.C.dueMs.first)),
      p50: m(ours.map((r) => r.C.dueMs.p50)),
      p99: m(ours.map((r) => r.C.dueMs.p99)),
      last: m(ours.map((r) => r.C.dueMs.last)),
    },
    durable: bullDue(bullDurable),
    persistenceOff: bullDue(bullOff),
  },
  burstEmptyClaims: {
    emptyWhileDue: m(ours.map((r) => r.C.burst.emptyWhileDue)),
    grantingClaims: m(ours.map((r) => r.C.burst.grantingClaims)),
    emptyPct: m(ours.map((r) => r.C.burst.emptyPct)),
    emptyPctByRound: perRound(ours, (r) => r.C.burst.emptyPct),
  },
  filedToClaimableMs: {
    ours: { p50: m(ours.map((r) => r.D.p50)), max: m(ours.map((r) => r.D.max)) },
    durable: { p50: m(bullDurable.map((r) => r.D.p50)), max: m(bullDurable.map((r) => r.D.max)) },
    persistenceOff: { p50: m(bullOff.map((r) => r.D.p50)), max: m(bullOff.map((r) => r.D.max)) },
  },
  generatorCpuPct: {
    oursA: m(ours.map((r) => r.A.generatorCpuPct)),
    oursB: m(ours.map((r) => r.B.generatorCpuPct)),
    durableB: m(bullDurable.map((r) => r.B.generatorCpuPct)),
    persistenceOffB: m(bullOff.map((r) => r.B.generatorCpuPct)),
  },
  redisCpuPctB: {
    durable: m(bullDurable.map((r) => r.B.redisCpuPct)),
    persistenceOff: m(bullOff.map((r) => r.B.redisCpuPct)),
  },
};
console.log(JSON.stringify({ summary }));
