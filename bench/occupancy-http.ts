// Grants/s through HTTP with the lease table 10 % and 90 % full (target: grants/s at 90 % lease
// occupancy >= 0.8 x grants/s at 10 %). lease-occupancy.ts measures the table alone; this runs the
// whole claim path on a real Harper, where a leased row stays due in the keeper until its result comes, so
// every publish has the leased rows to pass as well.
// Per round and level, a fresh side by side node (claim-drain.ts bootSideBySide: maxLeases 262,144, 1 s
// intervals; leases made 10 min long so none ends during a run): level x maxLeases + MEASURE + SLACK rows
// filed due two minutes ago, level x maxLeases of them claimed and kept unreported (the fill), then MEASURE
// more claimed (timed: grants/s, claim p50/p99, the keeper's publishes meanwhile). 24 clients, limit 25, no
// results. Levels alternate within a round (10, 90, 10, 90, ...) so a drifting machine hits both alike.
// BUILDS=<checkout>,<checkout> runs each level on each build in turn (before/after in one window).
// Run: npx tsc -p tsconfig.json && node dist/bench/occupancy-http.js [rounds=3] [level…=0.1 0.9]
import type { Credentials, HarperInstance } from '../test/harness.js';
import { SIDE_BY_SIDE_MAX_LEASES, bootSideBySide, drainClaims, fileToClaim } from './claim-drain.js';
import { benchUrl, fleetClient, loadavg, machine, median, overview, sleep, type FleetClient } from './lib.js';

const ROUNDS = Number(process.argv[2] ?? 3);
const LEVELS = process.argv.length > 3 ? process.argv.slice(3).map(Number) : [0.1, 0.9];
const MEASURE = Number(process.env.MEASURE ?? 20_000);
// Rows left due after the measured grants, so the measure never ends on a set the keeper is emptying.
const SLACK = 5_000;
const LEASE_MS = 600_000;
const BUILDS: Array<string | undefined> = process.env.BUILDS ? process.env.BUILDS.split(',') : [undefined];
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

interface Publish {
  at: number;
  ms: number;
  published: number;
  skippedLeased: number;
}

/** Samples the keeper's last publish until `stop` resolves: one entry per publish seen. */
function watchPublishes(h: HarperInstance, stop: Promise<unknown>): Promise<Publish[]> {
  const seen = new Map<number, Publish>();
  let done = false;
  void stop.finally(() => (done = true));
  return (async () => {
    while (!done) {
      const p = (await overview(h)).keeper?.stats?.lastPublish as Publish | null;
      if (p) seen.set(p.at, p);
      await sleep(100);
    }
    return [...seen.values()];
  })();
}

async function runLevel(round: number, level: number, build: string | undefined) {
  const h = await bootSideBySide(fleet, build);
  const clients: FleetClient[] = Array.from({ length: 24 }, () => fleetClient(h, fleet));
  try {
    const c = await h.fetch('/prerender_admin/config', { body: { queue: { jobLeaseTime: LEASE_MS } } });
    if (c.status !== 200) throw new Error(`config: ${c.status} ${c.text}`);
    const fill = Math.round(level * SIDE_BY_SIDE_MAX_LEASES);
    const urls = Array.from({ length: fill + MEASURE + SLACK }, (_, i) => benchUrl(`o${round}`, i));
    await fileToClaim(h, urls, Date.now() - 120_000);
    const filled = await drainClaims(h, clients, { target: fill, withResults: false });
    // One state document and publish later, so the gauge has counted the fill and the set is settled.
    await sleep(1500);
    const before = (await overview(h)).leases;
    const measuring = drainClaims(h, clients, { target: MEASURE, withResults: false });
    const publishes = await watchPublishes(h, measuring);
    const m = await measuring;
    const after = (await overview(h)).leases;
    const ms = publishes.map((p) => p.ms).sort((a, b) => a - b);
    return {
      round,
      level,
      build: build ?? 'this checkout',
      fillGrantsPerSec: filled.jobsPerSec,
      occupancyBefore: before.occupancy,
      occupancyAfter: after.occupancy,
      grantsPerSec: m.jobsPerSec,
      complete: m.complete,
      dups: m.dups + filled.dups,
      emptyClaims: m.emptyClaims,
      claimMs: m.claimMs,
      publishes: publishes.length,
      publishMsMedian: ms.length ? Number(median(ms).toFixed(1)) : null,
      publishMsMax: ms.length ? Number(ms.at(-1)!.toFixed(1)) : null,
      skippedLeasedMedian: publishes.length ? median(publishes.map((p) => p.skippedLeased)) : null,
      harperCpuMs: (m as Record<string, unknown>).harperCpuMs,
      loadavg: loadavg(),
    };
  } finally {
    await Promise.all(clients.map((cl) => cl.close()));
    await h.destroy();
  }
}

console.log(
  JSON.stringify({
    bench: 'occupancy-http',
    ...machine(),
    rounds: ROUNDS,
    levels: LEVELS,
    measure: MEASURE,
    builds: BUILDS,
  }),
);
const runs = new Map<string, number[]>();
for (let round = 1; round <= ROUNDS; round++) {
  for (const level of LEVELS) {
    for (const build of BUILDS) {
      const r = await runLevel(round, level, build);
      console.log(JSON.stringify(r));
      const key = JSON.stringify([r.build, level]);
      runs.set(key, [...(runs.get(key) ?? []), r.grantsPerSec]);
    }
  }
}
for (const build of BUILDS) {
  const name = build ?? 'this checkout';
  const medians = LEVELS.map((level) => median(runs.get(JSON.stringify([name, level]))!));
  console.log(
    JSON.stringify({
      build: name,
      summary: LEVELS.map((level, i) => ({
        level,
        grantsPerSec: runs.get(JSON.stringify([name, level])),
        median: medians[i],
      })),
      ratios: LEVELS.slice(1).map((level, i) => ({
        level,
        vsLevel: LEVELS[0],
        ratio: Number((medians[i + 1]! / medians[0]!).toFixed(2)),
      })),
      loadavg: loadavg(),
    }),
  );
}
