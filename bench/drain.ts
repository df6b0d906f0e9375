// Filing and full drain of two builds of the component, interleaved in one session (made to
// price the atomic schedule writes). Each round boots every given component directory in turn on a
// fresh root (2 worker threads) and measures, in that boot:
//   filing  100,000 targets (~100-char URLs, no dueAt) through POST /render_queue/targets in batches
//           of 10,000 — the measure of bench/file-targets.ts;
//   drain   100,000 due rows claimed by 24 fleet clients (limit 25) with one job_results batch per
//           claim — round B of bench/claims-vs-bullmq.ts, our side only.
// Lease tokens pass through the clients unchanged, so builds with numeric or string tokens both work.
// Run: npx tsc -p tsconfig.json && node dist/bench/drain.js [rounds] <componentDir> [<componentDir> …]
//      (ROWS=100000 CLIENTS=24 by default)
import { startHarper, type Credentials } from '../test/harness.js';
import { drainClaims, fileToClaim } from './claim-drain.js';
import { benchUrl, fileAll, fleetClient, loadavg, machine, median } from './lib.js';

const ROUNDS = Number(process.argv[2] ?? 3);
const DIRS = process.argv.slice(3);
const ROWS = Number(process.env.ROWS ?? 100_000);
const CLIENTS = Number(process.env.CLIENTS ?? 24);
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

if (DIRS.length === 0) throw new Error('usage: drain.js [rounds] <componentDir> [<componentDir> …]');

async function oneBoot(componentDir: string, round: number) {
  const loadBefore = loadavg();
  const h = await startHarper({ componentDir, logLevel: 'warn' });
  try {
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    const filed = Array.from({ length: ROWS }, (_, i) => ({ url: benchUrl(`f${round}`, i) }));
    const fileRowsPerSec = await fileAll(h, filed);
    const due = Array.from({ length: ROWS }, (_, i) => benchUrl(`d${round}`, i));
    await fileToClaim(h, due, Date.now() - 120_000);
    const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
    const d = await drainClaims(h, clients, { target: ROWS, withResults: true });
    await Promise.all(clients.map((c) => c.close()));
    return {
      componentDir,
      round,
      fileRowsPerSec: Math.round(fileRowsPerSec),
      drainJobsPerSec: d.jobsPerSec,
      complete: d.complete,
      dups: d.dups,
      notAccepted: d.notAccepted,
      errors: d.errors,
      claimMs: d.claimMs,
      resultsMs: d.resultsMs,
      harperCpuPct: (d as Record<string, unknown>).harperCpuPct,
      loadBefore,
      loadAfter: loadavg(),
    };
  } finally {
    await h.destroy();
  }
}

console.log(JSON.stringify({ bench: 'drain', ...machine(), rows: ROWS, clients: CLIENTS, dirs: DIRS }));
const byDir = new Map<string, Array<Awaited<ReturnType<typeof oneBoot>>>>(DIRS.map((d) => [d, []]));
for (let round = 1; round <= ROUNDS; round++) {
  for (const dir of DIRS) {
    const r = await oneBoot(dir, round);
    byDir.get(dir)!.push(r);
    console.log(JSON.stringify(r));
  }
}
const summary = DIRS.map((dir) => {
  const rs = byDir.get(dir)!;
  return {
    componentDir: dir,
    fileRowsPerSec: rs.map((r) => r.fileRowsPerSec),
    medianFileRowsPerSec: median(rs.map((r) => r.fileRowsPerSec)),
    drainJobsPerSec: rs.map((r) => r.drainJobsPerSec),
    medianDrainJobsPerSec: median(rs.map((r) => r.drainJobsPerSec)),
    loads: rs.map((r) => [r.loadBefore, r.loadAfter]),
  };
});
const ratio = (k: 'medianFileRowsPerSec' | 'medianDrainJobsPerSec') =>
  summary.length > 1 ? Math.round((summary[1]![k] / summary[0]![k]) * 1000) / 1000 : null;
console.log(
  JSON.stringify({
    summary,
    ratioSecondToFirst: { filing: ratio('medianFileRowsPerSec'), drain: ratio('medianDrainJobsPerSec') },
    loadEnd: loadavg(),
  }),
);
