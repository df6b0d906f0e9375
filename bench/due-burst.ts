// The due instant alone: the side by side's C (claims-vs-bullmq.ts) without the rest. 100,000 rows held
// and not due, then per round 20,000 rows filed due at the next whole minute and drained with results by
// 24 fleet clients (claim 25, 10 ms back-off when empty). Per round: the first, median and last grant
// after the due instant, the claims answered empty while rows of the burst were still due (as a share of
// the burst's claims), the publishes during the drain (ready-set generations; the keeper's walks and
// flips with their mean cost on worker 0), the take rate (jobs/s) and the claims' latency (a claim that
// finds the set used up while rows were left out waits for the refill: that wait is in its latency).
// With COMPONENT_B=<dir> it boots a second build beside this one and alternates rounds between them
// (A, B, A, B, …), for a before/after pair taken in one run.
// Run: npx tsc -p tsconfig.json && ROUNDS=3 node dist/bench/due-burst.js
import type { Credentials, HarperInstance } from '../test/harness.js';
import { bootSideBySide, dueAtOnce } from './claim-drain.js';
import { benchUrl, fileAll, fleetClient, loadavg, machine, type FleetClient } from './lib.js';

const ROUNDS = Number(process.env.ROUNDS ?? 3);
const AT_ONCE = Number(process.env.AT_ONCE ?? 20_000);
const HELD = Number(process.env.HELD ?? 100_000);
const CLIENTS = 24;
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

interface Side {
  name: string;
  h: HarperInstance;
  clients: FleetClient[];
}

console.log(
  JSON.stringify({ bench: 'due-burst', ...machine(), rounds: ROUNDS, atOnce: AT_ONCE, held: HELD }),
);
const sides: Side[] = [];
try {
  const builds: Array<[string, string | undefined]> = [['A', process.env.COMPONENT]];
  if (process.env.COMPONENT_B) builds.push(['B', process.env.COMPONENT_B]);
  for (const [name, dir] of builds) {
    const h = await bootSideBySide(fleet, dir);
    sides.push({ name, h, clients: Array.from({ length: CLIENTS }, () => fleetClient(h, fleet)) });
    const later = Date.now() + 86_400_000;
    await fileAll(
      h,
      Array.from({ length: HELD }, (_, i) => ({ url: benchUrl('held', i), dueAt: later })),
    );
  }
  for (let round = 1; round <= ROUNDS; round++) {
    for (const side of sides) {
      const loadBefore = loadavg();
      const r = await dueAtOnce(side.h, side.clients, round, AT_ONCE);
      console.log(
        JSON.stringify({
          side: side.name,
          round,
          loadBefore,
          firstMs: r.dueMs?.first,
          p50Ms: r.dueMs?.p50,
          lastMs: r.dueMs?.last,
          emptyWhileDue: r.burst?.emptyWhileDue,
          emptyPct: r.burst?.emptyPct,
          claims: r.claims,
          publishes: r.publishes,
          keeperPublishes: r.keeperPublishes,
          publishMsMean: r.publishMsMean,
          claimMs: r.claimMs,
          jobsPerSec: r.jobsPerSec,
          dups: r.dups,
        }),
      );
    }
  }
} finally {
  for (const s of sides) {
    await Promise.all(s.clients.map((c) => c.close()));
    await s.h.destroy();
  }
}
