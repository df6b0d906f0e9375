// The keeper's passes over every lease slot, single thread, no Harper: `collectExpired` (every publish)
// and `reconcile` (every state document and status sync), at the side by side's table size (maxLeases
// 262,144: 1,048,576 slots, 64 MiB) with the slots a few drains leave behind — released keys kept for the
// dead-slot retention hour — and a few thousand live leases.
// Run: npx tsc -p tsconfig.json && node dist/bench/lease-scans.js [dead=600000] [live=2000] [passes=30]
import { LeaseTable, RELEASE_GRACE_MS } from '../util/leases/table.js';
import { median } from './lib.js';

const DEAD = Number(process.argv[2] ?? 600_000);
const LIVE = Number(process.argv[3] ?? 2_000);
const PASSES = Number(process.argv[4] ?? 30);
const MAX_LEASES = 262_144;
const T0 = Date.UTC(2026, 0, 1);
const lease = { leaseMs: 120_000, dueMs: T0, cadenceMs: 86_400_000, fastRetries: 2 };
const url = (tag: string, i: number): string =>
  `https://shop.example.com/category-${i % 97}/product/${tag}-${i}?utm_source=sitemap&ref=bench-scan`;

const table = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(MAX_LEASES)), MAX_LEASES);
let now = T0;
for (let i = 0; i < DEAD; i++) {
  const key = url('dead', i);
  const g = table.grant(key, now, lease);
  if (!g.ok) throw new Error(`seeding: grant ${i} refused ${g.reason}`);
  table.release(key, g.token, now);
  if (i % 20_000 === 19_999) now += 1000;
}
now += RELEASE_GRACE_MS + 1000;
for (let i = 0; i < LIVE; i++) {
  const g = table.grant(url('live', i), now, lease);
  if (!g.ok) throw new Error(`seeding: live grant ${i} refused ${g.reason}`);
}

function time(pass: () => unknown): number[] {
  const ms: number[] = [];
  for (let p = 0; p < PASSES; p++) {
    const t0 = performance.now();
    pass();
    ms.push(performance.now() - t0);
    now += 1000;
  }
  return ms;
}
const round = (x: number) => Math.round(x * 100) / 100;
const collect = time(() => table.upkeep.collectExpired(now, () => undefined));
const reconcile = time(() => table.upkeep.reconcile(now));
console.log(
  JSON.stringify({
    bench: 'lease-scans',
    node: process.version,
    slots: (LeaseTable.byteLength(MAX_LEASES) / 64) | 0,
    dead: DEAD,
    live: LIVE,
    passes: PASSES,
    collectExpiredMs: { median: round(median(collect)), max: round(Math.max(...collect)) },
    reconcileMs: { median: round(median(reconcile)), max: round(Math.max(...reconcile)) },
    occupancy: table.occupancy(),
  }),
);
