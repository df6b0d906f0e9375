// Round after round on one Harper, the side by side's own sequence without BullMQ: does the full drain get
// slower each round, and which phase leaves what behind? Each round runs the phases PHASES names, in order:
//   A  file JOBS due rows, claim them all (no results), report them untimed, delete them
//   B  file JOBS due rows and drain them through claim + job_results (timed: jobs/s, Harper CPU per job)
//   C  AT_ONCE rows due at one whole minute, drained with results: due -> first and last grant
//   D  filed due-now -> claimable on the idle queue, 20 samples
// Same config as claims-vs-bullmq.ts (maxLeases 262,144, 120 s leases, 1 s publish and state intervals).
// PROFILE=1 profiles every worker through each round's B (the scratch component's in-process profiler) and
// prints each worker's summary; the .cpuprofile files stay in the printed folder.
// Run: npx tsc -p tsconfig.json && ROUNDS=3 PHASES=AB node dist/bench/drain-rounds.js
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import {
  drainClaims,
  dueAtOnce,
  dueNowLatency,
  fileToClaim,
  reportAll,
  type Granted,
} from './claim-drain.js';
import { summarizeProfile } from './cpuprofile-summary.js';
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
import { removeScratch, scratchComponent } from './scratch-component.js';

const ROUNDS = Number(process.env.ROUNDS ?? 3);
const JOBS = Number(process.env.JOBS ?? 100_000);
const AT_ONCE = Number(process.env.AT_ONCE ?? 20_000);
const PHASES = process.env.PHASES ?? 'AB';
const PROFILE = process.env.PROFILE === '1';
const MAX_LEASES = 262_144;
const CONFIG = { queue: { keeper: { publishInterval: 1000, stateInterval: 1000 }, jobLeaseTime: 120_000 } };
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

const profileDir = PROFILE ? mkdtempSync(join(tmpdir(), 'qk-profiles-')) : undefined;
const component = PROFILE ? scratchComponent({ keeper: true, profileDir }) : undefined;

async function profiled<T>(label: string, run: () => Promise<T>): Promise<T> {
  if (!profileDir) return run();
  writeFileSync(join(profileDir, 'start'), '');
  await sleep(300);
  const result = await run();
  writeFileSync(join(profileDir, 'stop'), '');
  const want = (f: string) => f.startsWith('worker-') && f.endsWith('.cpuprofile');
  await until('profiles from both workers', async () =>
    readdirSync(profileDir).filter(want).length >= 2 ? true : undefined,
  );
  await sleep(500);
  rmSync(join(profileDir, 'start'));
  rmSync(join(profileDir, 'stop'));
  for (const f of readdirSync(profileDir).filter(want)) {
    const s = summarizeProfile(JSON.parse(readFileSync(join(profileDir, f), 'utf8')), 25);
    console.log(
      `--- ${label} ${f}: ${s.busyMs} ms busy of ${s.totalMs} ms; areas ${JSON.stringify(s.areasPctOfBusy)}`,
    );
    console.log('self:\n' + s.selfTop.join('\n'));
    writeFileSync(join(profileDir, `${label}-${f}`), readFileSync(join(profileDir, f)));
    rmSync(join(profileDir, f));
  }
  return result;
}

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
  JSON.stringify({ bench: 'drain-rounds', ...machine(), rounds: ROUNDS, jobs: JOBS, phases: PHASES }),
);
const first = await startHarper({ logLevel: 'warn', componentDir: component });
let h: HarperInstance = first;
let clients: FleetClient[] = [];
try {
  await first.addUser(fleet.username, fleet.password, 'render_fleet');
  const r = await first.fetch('/prerender_admin/config', { body: { queue: { maxLeases: MAX_LEASES } } });
  if (r.status !== 200) throw new Error(`config: ${r.status} ${r.text}`);
  await first.stop();
  h = await startHarper({ root: first.root, logLevel: 'warn', componentDir: component });
  const c = await h.fetch('/prerender_admin/config', { body: CONFIG });
  if (c.status !== 200) throw new Error(`config: ${c.status} ${c.text}`);
  clients = Array.from({ length: 24 }, () => fleetClient(h, fleet));
  for (let round = 1; round <= ROUNDS; round++) {
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
  await first.destroy();
  if (component) removeScratch(component);
  if (profileDir) console.log(JSON.stringify({ profileDir }));
}
