// Scoped claim grants/s: a fleet bound to one queue that holds a given share of the due
// rows claims (limit 25, no results) from a real Harper with 2 worker threads. The other rows belong to
// a second queue nobody claims. Both queues' rows are due 0–60 minutes ago (seeded), so their scores
// interleave and the scoped queue holds about its share of the global top. Each (share, build) pair gets
// a fresh boot: queue.maxLeases is raised first (a restart key) so every grant of the run keeps its lease.
// Per phase: grants/s over the scoped drain, empty claims, duplicates, ready-set publishes, and the
// keeper's mean publish time during the drain (from the publish-duration histogram).
//
//   node dist/bench/scoped-claims.js [rounds=1] [<componentDir> …]   (ROWS=100000 CLIENTS=8 by default;
//   SHARES=1,50 in percent; the target is every scoped row, at most TARGET=20000)
import { startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import { drainClaims } from './claim-drain.js';
import { seededRandom } from './fixtures.js';
import { fileAll, fleetClient, loadavg, machine, median, metricValues, overview, until } from './lib.js';

const ROUNDS = Number(process.argv[2] ?? 1);
const DIRS = process.argv.length > 3 ? process.argv.slice(3) : [undefined];
const ROWS = Number(process.env.ROWS ?? 100_000);
const CLIENTS = Number(process.env.CLIENTS ?? 8);
const SHARES = (process.env.SHARES ?? '1,50').split(',').map(Number);
const TARGET = Number(process.env.TARGET ?? 20_000);
const MAX_LEASES = 65_536;
const fleet: Credentials = { username: 'scoped-fleet', password: 'scoped-fleet-pass' };
const ROUTES = [
  { name: 'scoped', match: 'prefix', path: '/s/' },
  { name: 'bulk', match: 'prefix', path: '/k/' },
];

/** ~100-character URL in a queue's path. */
function url(prefix: 's' | 'k', i: number): string {
  const u = `https://shop.example.com/${prefix}/catalogue/category-${i % 97}/product-${String(i).padStart(8, '0')}?ref=bench`;
  return u + '-'.repeat(Math.max(0, 100 - u.length));
}

async function boot(componentDir: string | undefined): Promise<HarperInstance> {
  const first = await startHarper({ componentDir, logLevel: 'warn' });
  const r = await first.fetch('/prerender_admin/config', { body: { queue: { maxLeases: MAX_LEASES } } });
  if (r.status !== 200) throw new Error(`config: ${r.status} ${r.text}`);
  await first.stop();
  const h = await startHarper({ componentDir, root: first.root, logLevel: 'warn' });
  const c = await h.fetch('/prerender_admin/config', { body: { render: { routes: ROUTES } } });
  if (c.status !== 200) throw new Error(`config: ${c.status} ${c.text}`);
  if ((await overview(h)).leases.maxLeases !== MAX_LEASES) throw new Error('maxLeases did not apply');
  await h.addUser(fleet.username, fleet.password, 'render_fleet');
  const f = await h.fetch('/prerender_admin/fleets', {
    body: { name: 'scoped', queues: ['scoped'], username: fleet.username },
  });
  if (f.status !== 200) throw new Error(`fleet: ${f.status} ${f.text}`);
  return h;
}

async function phase(componentDir: string | undefined, sharePct: number, round: number) {
  const loadBefore = loadavg();
  const h = await boot(componentDir);
  try {
    const scoped = Math.round((ROWS * sharePct) / 100);
    const random = seededRandom(round * 1000 + sharePct);
    const now = Date.now();
    const targets = Array.from({ length: ROWS }, (_, i) => ({
      url: i < scoped ? url('s', i) : url('k', i),
      dueAt: now - Math.floor(random() * 60) * 60_000 - 60_000,
    }));
    // Shuffled, so neither queue is filed (and applied by the keeper) first.
    for (let i = targets.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [targets[i], targets[j]] = [targets[j]!, targets[i]!];
    }
    await fileAll(h, targets);
    await until('the keeper counts every row due', async () =>
      Number((await overview(h)).keeper.dueCount) >= ROWS ? true : undefined,
    );
    const before = await metricValues(h);
    const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
    const d = await drainClaims(h, clients, { target: Math.min(scoped, TARGET), withResults: false });
    await Promise.all(clients.map((c) => c.close()));
    const after = await metricValues(h);
    const hist = 'queue_keeper_keeper_publish_duration_seconds';
    const publishes = after.get(`${hist}_count`)! - before.get(`${hist}_count`)!;
    const publishMs = ((after.get(`${hist}_sum`)! - before.get(`${hist}_sum`)!) / publishes) * 1000;
    return {
      componentDir: componentDir ?? 'this checkout',
      round,
      sharePct,
      scopedRows: scoped,
      target: Math.min(scoped, TARGET),
      grantsPerSec: d.jobsPerSec,
      complete: d.complete,
      jobs: d.jobs,
      dups: d.dups,
      claims: d.claims,
      emptyClaims: d.emptyClaims,
      publishes: d.publishes,
      meanPublishMs: Math.round(publishMs * 100) / 100,
      claimMs: d.claimMs,
      loadBefore,
      loadAfter: loadavg(),
    };
  } finally {
    await h.destroy();
  }
}

console.log(
  JSON.stringify({ bench: 'scoped-claims', ...machine(), rows: ROWS, clients: CLIENTS, shares: SHARES }),
);
const results: Array<Awaited<ReturnType<typeof phase>>> = [];
for (let round = 1; round <= ROUNDS; round++)
  for (const share of SHARES)
    for (const dir of DIRS) {
      const r = await phase(dir, share, round);
      results.push(r);
      console.log(JSON.stringify(r));
    }
console.log(
  JSON.stringify({
    summary: DIRS.flatMap((dir) =>
      SHARES.map((share) => {
        const rs = results.filter((r) => r.sharePct === share && r.componentDir === (dir ?? 'this checkout'));
        return {
          componentDir: dir ?? 'this checkout',
          sharePct: share,
          grantsPerSec: rs.map((r) => r.grantsPerSec),
          median: median(rs.map((r) => r.grantsPerSec)),
        };
      }),
    ),
  }),
);
