// The due instant alone (target: the first grant ≤ 50 ms after the due instant): 100,000 rows held and
// not due, then per round 20,000 rows filed due at the next whole minute, 24 fleet clients polling
// (claim 25, 10 ms back-off when empty, each grant reported), and the first grant's wall time after the
// due instant. The side by side's C measures the same within a longer run; this isolates it.
// Run: npx tsc -p tsconfig.json && ROUNDS=3 node dist/bench/due-burst.js
import type { Credentials } from '../test/harness.js';
import { bootSideBySide, renderedResults, type Granted } from './claim-drain.js';
import { benchUrl, fileAll, fleetClient, loadavg, machine, sleep } from './lib.js';

const ROUNDS = Number(process.env.ROUNDS ?? 3);
const AT_ONCE = Number(process.env.AT_ONCE ?? 20_000);
const HELD = Number(process.env.HELD ?? 100_000);
const CLIENTS = 24;
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

console.log(
  JSON.stringify({ bench: 'due-burst', ...machine(), rounds: ROUNDS, atOnce: AT_ONCE, held: HELD }),
);
const h = await bootSideBySide(fleet, process.env.COMPONENT);
const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
try {
  const later = Date.now() + 86_400_000;
  await fileAll(
    h,
    Array.from({ length: HELD }, (_, i) => ({ url: benchUrl('held', i), dueAt: later })),
  );
  for (let round = 1; round <= ROUNDS; round++) {
    const dueAt = Math.ceil((Date.now() + 20_000) / 60_000) * 60_000;
    await fileAll(
      h,
      Array.from({ length: AT_ONCE }, (_, i) => ({ url: benchUrl(`burst${round}`, i), dueAt })),
    );
    await sleep(dueAt - 1500 - Date.now());
    const loadBefore = loadavg();
    let first = NaN;
    let last = NaN;
    let granted = 0;
    await Promise.all(
      clients.map(async (c) => {
        while (granted < AT_ONCE) {
          const jobs = ((await c.post('/render_queue/claim', { limit: 25 })).json ?? []) as Granted[];
          if (jobs.length === 0) {
            await sleep(10);
            continue;
          }
          const at = Date.now() - dueAt;
          if (Number.isNaN(first)) first = at;
          granted += jobs.length;
          if (granted >= AT_ONCE && Number.isNaN(last)) last = at;
          await c.post('/render_queue/job_results', renderedResults(jobs));
        }
      }),
    );
    console.log(JSON.stringify({ round, loadBefore, firstMs: first, lastMs: last }));
  }
} finally {
  await Promise.all(clients.map((c) => c.close()));
  await h.destroy();
}
