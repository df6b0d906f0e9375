// Round after round on one Harper, the side by side's own sequence without BullMQ: does the full drain get
// slower each round, and which phase leaves what behind? Each round runs the phases PHASES names, in order:
//   A  file JOBS due rows, claim them all (no results), report them untimed, delete them
//   B  file JOBS due rows and drain them through claim + job_results (timed: jobs/s, Harper CPU per job)
//   C  AT_ONCE rows due at one whole minute, drained with results: due -> first and last grant
//   D  filed due-now -> claimable on the idle queue, 20 samples
// The side by side's node (claim-drain.ts bootSideBySide: maxLeases 262,144, 120 s leases, 1 s intervals).
// PROFILE=1 profiles every worker through each round's B (the scratch component's in-process profiler) and
// prints each worker's summary; the .cpuprofile files stay in the printed folder.
// GAP_MS=30000 leaves the node idle that long between rounds (where the side by side runs BullMQ's).
// Run: npx tsc -p tsconfig.json && ROUNDS=3 PHASES=AB node dist/bench/drain-rounds.js
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Credentials, HarperInstance } from '../test/harness.js';
import {
  bootSideBySide,
  drainClaims,
  dueAtOnce,
  dueNowLatency,
  fileToClaim,
  reportAll,
  type Granted,
} from './claim-drain.js';
import {
  benchUrl,
  busiestThreads,
  deleteAll,
  fleetClient,
  keeperStats,
  loadavg,
  machine,
  overview,
  sleep,
  threadCpuMs,
  until,
  type FleetClient,
} from './lib.js';
import { profiledRun, removeScratch, scratchComponent } from './scratch-component.js';

const ROUNDS = Number(process.env.ROUNDS ?? 3);
// Idle time between rounds, as the side by side's BullMQ rounds leave our node idle (~30 s each).
const GAP_MS = Number(process.env.GAP_MS ?? 0);
const JOBS = Number(process.env.JOBS ?? 100_000);
const AT_ONCE = Number(process.env.AT_ONCE ?? 20_000);
const PHASES = process.env.PHASES ?? 'AB';
const PROFILE = process.env.PROFILE === '1';
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

const profileDir = PROFILE ? mkdtempSync(join(tmpdir(), 'qk-profiles-')) : undefined;
const component = PROFILE ? scratchComponent({ keeper: true, profileDir }) : undefined;

const profiled = <T>(label: string, run: () => Promise<T>): Promise<T> =>
  profileDir ? profiledRun(profileDir, label, run, 25) : run();

async function phaseA(h: HarperInstance, clients: FleetClient[], round: number) {
  const urls = Array.from({ length: JOBS }, (_, i) => benchUrl(`a${round}`, i));
  await fileToClaim(h, urls, Date.now() - 120_000);
  const grants: Granted[] = [];
  const a = await drainClaims(h, clients, { target: JOBS, withResults: false, grants });
  const refused = await reportAll(clients, grants);
  await deleteAll(h, urls);
  await until('claim-only rows dropped and their leases released', async () => {
    const o = await overview(h);
    return o.keeper.dueCount === 0 && o.leases.occupancy === 0 ? true : undefined;
  });
  return { grantsPerSec: a.jobsPerSec, refused };
}

async function phaseB(h: HarperInstance, clients: FleetClient[], round: number) {
  const urls = Array.from({ length: JOBS }, (_, i) => benchUrl(`b${round}`, i));
  await fileToClaim(h, urls, Date.now() - 120_000);
  const t = threadCpuMs(h.pid);
  const b = await profiled(`B${round}`, () => drainClaims(h, clients, { target: JOBS, withResults: true }));
  const harperCpuMs = (b as Record<string, unknown>).harperCpuMs as number;
  return {
    jobsPerSec: b.jobsPerSec,
    harperCpuMs,
    cpuUsPerJob: Math.round((harperCpuMs * 1000) / JOBS),
    dups: b.dups,
    threads: busiestThreads(t, threadCpuMs(h.pid), 6),
  };
}

async function phaseC(h: HarperInstance, clients: FleetClient[], round: number) {
  const c = await dueAtOnce(h, clients, round, AT_ONCE);
  return { jobsPerSec: c.jobsPerSec, firstMs: c.dueMs?.first, lastMs: c.dueMs?.last };
}

console.log(
  JSON.stringify({
    bench: 'drain-rounds',
    ...machine(),
    rounds: ROUNDS,
    jobs: JOBS,
    phases: PHASES,
    gapMs: GAP_MS,
  }),
);
const h = await bootSideBySide(fleet, component).catch((e: unknown) => {
  if (component) removeScratch(component);
  throw e;
});
let clients: FleetClient[] = [];
try {
  clients = Array.from({ length: 24 }, () => fleetClient(h, fleet));
  for (let round = 1; round <= ROUNDS; round++) {
    if (round > 1 && GAP_MS > 0) await sleep(GAP_MS);
    const out: Record<string, unknown> = { round, loadBefore: loadavg() };
    for (const phase of PHASES) {
      // The state document the overview reads lags by up to a state interval: start each phase settled.
      await until('no due rows and no leases out', async () => {
        const o = await overview(h);
        return o.keeper.dueCount === 0 && o.leases.occupancy === 0 ? true : undefined;
      });
      await sleep(1500);
      if (phase === 'A') out.A = await phaseA(h, clients, round);
      else if (phase === 'B') out.B = await phaseB(h, clients, round);
      else if (phase === 'C') out.C = await phaseC(h, clients, round);
      else if (phase === 'D') out.D = await dueNowLatency(h, clients[0]!, round, 20);
      else throw new Error(`unknown phase ${phase} in PHASES=${PHASES}`);
    }
    out.loadAfter = loadavg();
    out.rows = (await keeperStats(h))?.rows;
    console.log(JSON.stringify(out));
  }
  // What an idle node spends with the rounds' leases, dead slots and rows left behind (the keeper's
  // publishes, lease passes and state documents): CPU per second of its busiest threads over 10 s.
  await sleep(3000);
  const idle0 = threadCpuMs(h.pid);
  await sleep(10_000);
  console.log(JSON.stringify({ idleCpuMsPer10s: busiestThreads(idle0, threadCpuMs(h.pid), 4) }));
} finally {
  await Promise.all(clients.map((cl) => cl.close()));
  await h.destroy();
  if (component) removeScratch(component);
  if (profileDir) console.log(JSON.stringify({ profileDir }));
}
