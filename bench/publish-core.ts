// The keeper's publish, taken apart without Harper (target: publish incl. top-K and write, 300k due,
// ≤ 5 ms p99). Builds a KeeperCore like keeper-core.ts (30 % due, ~100-char URLs), a lease table with
// LEASED live leases on the best rows, and a ready set of capacity 5,000, then times each step the
// keeper's publishOnce takes: dueSummary, the walk of the top (KeeperCore.publishWalk, no extras) with
// and without the lease-skip predicate, the lease check alone (keyHash + probe), keyHash alone, and the
// ready-set write (ReadySet.publishWith) of rows already selected.
// Run: npx tsc -p tsconfig.json && node dist/bench/publish-core.js [rows=1000000] [leased=600]
//      MIX=scale [DEVICES=2] holds the scale bench's `<url>|<device>` keys (keyMix.ts); DUE_SHARE (0.3) is
//      the share of rows due.
//      keeperPublish* is publishOnce's own shape: the walk with its extras written straight into the set.
//      (add --cpu-prof --cpu-prof-dir=/tmp/qk-prof to see the same split in a profile)
import { KeeperCore, type HeldClass, type ScheduleRow, type TopSkip } from '../util/keeper/core.js';
import { keyHash } from '../util/keyHash.js';
import { LeaseTable } from '../util/leases/table.js';
import { flagBits, ReadySet } from '../util/sharedMemory/readySet.js';
import { MINUTE_MS } from '../util/time.js';
import { summarize } from './lib.js';
import { DAY, seededRandom } from './fixtures.js';
import { DEVICES, MIX, classify, keyOf } from './keyMix.js';

const NOW = Date.now();
const ROWS = Number(process.argv[2] ?? 1_000_000);
const LEASED = Number(process.argv[3] ?? 600);
const CAPACITY = 5000;
const RUNS = 300;
const DUE_SHARE = Number(process.env.DUE_SHARE ?? 0.3);

const random = seededRandom();

function rowOf(key: string, i: number): ScheduleRow {
  const own = random() < 0.1 ? 7 * DAY : null;
  const cadence = classify(key, own).cadenceMs;
  const due = random() < DUE_SHARE;
  const offset = due ? -random() * 2 * cadence : 1 + random() * cadence;
  return {
    cacheKey: key,
    nextRenderTime: Math.floor((NOW + offset) / MINUTE_MS) * MINUTE_MS,
    fromSitemap: i % 2 === 0,
    effectiveInterval: own,
    verified: true,
    urgentAt: due ? NOW - 1 : null, // the API marks rows filed with a past dueAt urgent
    changedAt: null,
  };
}

function time(fn: () => void) {
  for (let i = 0; i < 20; i++) fn();
  const samples: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t = process.hrtime.bigint();
    fn();
    samples.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  const s = summarize(samples);
  return { p50: s.p50, p99: s.p99 };
}

/** CPU ms per run (process.cpuUsage over RUNS runs, after 20 warm-up runs). */
function cpuOf(fn: () => void) {
  for (let i = 0; i < 20; i++) fn();
  const c0 = process.cpuUsage();
  for (let i = 0; i < RUNS; i++) fn();
  const c = process.cpuUsage(c0);
  return { cpuMsPerRun: Math.round(((c.user + c.system) / 1000 / RUNS) * 1000) / 1000 };
}

const core = new KeeperCore({
  classify,
  score: { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 },
});
for (let i = 0; i < ROWS; i++) {
  const key = keyOf(i);
  core.apply(key, rowOf(key, i), NOW);
}
const TABLE = Number(process.env.MAX_LEASES ?? 4096);
const leases = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(TABLE)), TABLE);

/** A row of the top as the walk hands it over, kept for the steps timed apart from the walk. */
interface Row {
  slot: number;
  key: string;
  score: number;
  dueMs: number;
  held: HeldClass;
}
/** The best `k` due rows, best first, as a publish walk (no extras) hands them over. */
function topRows(k: number, skip?: TopSkip): Row[] {
  const rows: Row[] = [];
  core.selection.publishWalk(
    k,
    0,
    NOW,
    {
      top: (slot, score, dueMs, held) => rows.push({ slot, key: core.keyAt(slot), score, dueMs, held }),
      extra: () => undefined,
    },
    skip,
  );
  return rows;
}
/** A walk of the top that only counts what it is handed. */
function countTop(skip?: TopSkip): number {
  let n = 0;
  core.selection.publishWalk(CAPACITY, 0, NOW, { top: () => n++, extra: () => n++ }, skip);
  return n;
}

for (const r of topRows(LEASED))
  leases.grant(r.key, NOW, { leaseMs: 600_000, dueMs: r.dueMs, cadenceMs: DAY, fastRetries: 2 });
const ready = new ReadySet(
  new ArrayBuffer(ReadySet.byteLength(CAPACITY, CAPACITY * 192)),
  CAPACITY,
  CAPACITY * 192,
);
const isLeased = (k: string) => leases.isLeased(k, NOW);
const skip: TopSkip = (slot) => isLeased(core.keyAt(slot));
// What the keeper does: the row stores its keyHash, so no candidate is hashed again.
const skipStored: TopSkip = (_slot, hi, lo) => leases.isLeasedHash(hi, lo, NOW);
let sink = 0;
const flagsOf = (h: HeldClass) => flagBits(h.fromSitemap, h.verified, h.mark);
/** What KeeperService.publishOnce does: the walk, its extras included, written straight into the set. */
function keeperPublish(leaseSkip: TopSkip): number {
  const head: string[] = [];
  const bytes = core.keyBytes;
  const r = ready.publishWith(NOW, (w) => {
    const walk = core.selection.publishWalk(
      CAPACITY,
      ready.extraCapacity,
      NOW,
      {
        top: (slot, score, dueMs, held) => {
          if (head.length < 20) head.push(core.keyAt(slot));
          w.topFrom(bytes, slot, score, dueMs, flagsOf(held), held.route);
        },
        extra: (slot, score, dueMs, held) =>
          w.extraFrom(bytes, slot, score, dueMs, flagsOf(held), held.route),
      },
      leaseSkip,
    );
    return walk.completeQueues;
  });
  return r.published + head.length;
}
const top = topRows(CAPACITY, skip);
const keys = top.map((r) => r.key);

console.log(
  JSON.stringify({
    bench: 'publish-core',
    rows: ROWS,
    mix: MIX,
    devices: DEVICES,
    due: core.dueSummary(NOW).due,
    leased: LEASED,
    node: process.version,
    dueSummaryMs: time(() => (sink += core.dueSummary(NOW).due)),
    topNoSkipMs: time(() => (sink += countTop())),
    topWithLeaseSkipMs: time(() => (sink += countTop(skip))),
    topWithStoredHashSkipMs: time(() => (sink += countTop(skipStored))),
    leaseCheck5000Ms: time(() => {
      for (const k of keys) sink += isLeased(k) ? 1 : 0;
    }),
    keyHash5000Ms: time(() => {
      for (const k of keys) sink += keyHash(k).lo & 1;
    }),
    readySetWrite5000Ms: time(
      () =>
        (sink += ready.publishWith(NOW, (w) => {
          for (const r of top) w.top(r.key, r.score, r.dueMs, flagsOf(r.held), r.held.route);
          return [];
        }).published),
    ),
    // The same rows, their keys copied from the held rows' bytes (what the keeper's publish writes).
    readySetWrite5000FromBytesMs: time(
      () =>
        (sink += ready.publishWith(NOW, (w) => {
          for (const r of top)
            w.topFrom(core.keyBytes, r.slot, r.score, r.dueMs, flagsOf(r.held), r.held.route);
          return [];
        }).published),
    ),
    keeperPublishRehashMs: time(() => (sink += keeperPublish(skip))),
    keeperPublishMs: time(() => (sink += keeperPublish(skipStored))),
    keeperPublishCpu: cpuOf(() => (sink += keeperPublish(skipStored))),
    sink: sink > 0,
  }),
);
