// Group commit of result writes at several waits in one session, interleaved (0, 1, 0, 1, …). Each boot
// runs this checkout with the wait set through QUEUE_KEEPER_GROUP_COMMIT_WAIT_MS (GROUP_COMMIT_WAIT_ENV
// of util/schedule/groupCommit.ts, read once at start; 0 = every job_results request commits on its
// own). Per boot:
//   results  ROWS due rows claimed first (limit 25, no results), then every lease reported by CLIENTS
//            clients, 25 results per job_results request: results/s, request p50/p99, Harper CPU
//            ms per result (all threads of the Harper process)
//   drain    ROWS more due rows drained claim 25 + one job_results per claim (round B of
//            claims-vs-bullmq.ts, our side only): jobs/s
// Run: npx tsc -p tsconfig.json && node dist/bench/group-commit.js [rounds] [waitMs…]
//      (ROWS=20000 CLIENTS=24 by default; waitMs defaults to "0 1")
import { startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import {
  GROUP_COMMIT_WAIT_ENV,
  MAX_GROUP_COMMIT_WAIT_MS,
  parseGroupCommitWait,
} from '../util/schedule/groupCommit.js';
import { drainClaims, fileToClaim } from './claim-drain.js';
import {
  benchUrl,
  fleetClient,
  loadavg,
  machine,
  median,
  overview,
  procCpuMs,
  summarize,
  until,
  type FleetClient,
} from './lib.js';

const ROUNDS = Number(process.argv[2] ?? 3);
const WAITS = process.argv.length > 3 ? process.argv.slice(3).map(Number) : [0, 1];
const ROWS = Number(process.env.ROWS ?? 20_000);
const CLIENTS = Number(process.env.CLIENTS ?? 24);
const LIMIT = 25;
// A wait the component would refuse (it logs, and waits its default) is refused here instead.
for (const w of WAITS)
  if (parseGroupCommitWait(String(w)) !== w)
    throw new Error(`each wait is whole ms from 0 to ${MAX_GROUP_COMMIT_WAIT_MS}, not ${w}`);
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

interface Lease {
  id: string;
  leaseToken: string;
}

/** Claims until `target` leases are out; an empty answer waits for the keeper's next publish. */
async function claimAll(clients: FleetClient[], target: number): Promise<Lease[]> {
  const out: Lease[] = [];
  let lastGrant = performance.now();
  await Promise.all(
    clients.map(async (c) => {
      while (out.length < target && performance.now() - lastGrant < 30_000) {
        const r = await c.post('/render_queue/claim', { limit: Math.min(LIMIT, target - out.length) });
        const jobs = (r.json as Lease[] | undefined) ?? [];
        if (jobs.length === 0) await new Promise((res) => setTimeout(res, 10));
        else lastGrant = performance.now();
        out.push(...jobs);
      }
    }),
  );
  return out;
}

async function reportAll(h: HarperInstance, clients: FleetClient[], leases: Lease[]) {
  const requests: Lease[][] = [];
  for (let i = 0; i < leases.length; i += LIMIT) requests.push(leases.slice(i, i + LIMIT));
  let next = 0;
  let notAccepted = 0;
  let errors = 0;
  const ms: number[] = [];
  const cpu0 = procCpuMs(h.pid);
  const t0 = performance.now();
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const batch = requests[next++];
        if (!batch) return;
        const s = performance.now();
        const r = await c.post('/render_queue/job_results', {
          results: batch.map((j) => ({
            id: j.id,
            leaseToken: j.leaseToken,
            outcome: 'rendered',
            statusCode: 200,
          })),
        });
        ms.push(performance.now() - s);
        if (r.status !== 200) errors++;
        const answers = (r.json as { results?: Array<{ accepted: boolean }> } | undefined)?.results ?? [];
        notAccepted += batch.length - answers.filter((a) => a.accepted).length;
      }
    }),
  );
  const spanMs = performance.now() - t0;
  const cpuMs = procCpuMs(h.pid) - cpu0;
  return {
    resultsPerSec: Math.round((leases.length / spanMs) * 1000),
    harperCpuMsPerResult: Math.round((cpuMs / leases.length) * 1000) / 1000,
    requestMs: summarize(ms),
    notAccepted,
    errors,
  };
}

async function oneBoot(waitMs: number, round: number) {
  const loadBefore = loadavg();
  const h = await startHarper({ env: { [GROUP_COMMIT_WAIT_ENV]: String(waitMs) }, logLevel: 'warn' });
  try {
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
    const urls = Array.from({ length: ROWS }, (_, i) => benchUrl(`r${round}`, i));
    await fileToClaim(h, urls, Date.now() - 120_000);
    const leases = await claimAll(clients, ROWS);
    const results = await reportAll(h, clients, leases);
    // fileToClaim counts from the keeper's due count: let the reported rows leave it first.
    await until('the reported rows are no longer due', async () =>
      Number((await overview(h)).keeper.dueCount) <= ROWS - leases.length ? true : undefined,
    );
    const drainUrls = Array.from({ length: ROWS }, (_, i) => benchUrl(`d${round}`, i));
    await fileToClaim(h, drainUrls, Date.now() - 120_000);
    const d = await drainClaims(h, clients, { target: ROWS, withResults: true });
    await Promise.all(clients.map((c) => c.close()));
    return {
      waitMs,
      round,
      claimed: leases.length,
      ...results,
      drainJobsPerSec: d.jobsPerSec,
      drainComplete: d.complete,
      drainDups: d.dups,
      drainNotAccepted: d.notAccepted,
      drainResultsMs: d.resultsMs,
      loadBefore,
      loadAfter: loadavg(),
    };
  } finally {
    await h.destroy();
  }
}

console.log(
  JSON.stringify({ bench: 'group-commit', ...machine(), rows: ROWS, clients: CLIENTS, waits: WAITS }),
);
const byWait = new Map<number, Array<Awaited<ReturnType<typeof oneBoot>>>>(WAITS.map((w) => [w, []]));
for (let round = 1; round <= ROUNDS; round++) {
  for (const w of WAITS) {
    const r = await oneBoot(w, round);
    byWait.get(w)!.push(r);
    console.log(JSON.stringify(r));
  }
}
console.log(
  JSON.stringify({
    summary: WAITS.map((w) => {
      const rs = byWait.get(w)!;
      return {
        waitMs: w,
        resultsPerSec: rs.map((r) => r.resultsPerSec),
        medianResultsPerSec: median(rs.map((r) => r.resultsPerSec)),
        medianCpuMsPerResult: median(rs.map((r) => r.harperCpuMsPerResult)),
        medianRequestP50: median(rs.map((r) => r.requestMs.p50)),
        drainJobsPerSec: rs.map((r) => r.drainJobsPerSec),
        medianDrainJobsPerSec: median(rs.map((r) => r.drainJobsPerSec)),
        loads: rs.map((r) => [r.loadBefore, r.loadAfter]),
      };
    }),
    loadEnd: loadavg(),
  }),
);
