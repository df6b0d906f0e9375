// The keeper's publish, taken apart without Harper (target: publish incl. top-K and write, 300k due,
// ≤ 5 ms p99). Builds a KeeperCore like keeper-core.ts (30 % due, ~100-char URLs), a lease table with
// LEASED live leases on the best rows, and a ready set of capacity 5,000, then times each step the
// keeper's publishOnce takes: dueSummary, topK with and without the lease-skip predicate, the lease
// check alone (keyHash + probe), keyHash alone, and the ready-set write.
// Run: npx tsc -p tsconfig.json && node dist/bench/publish-core.js [rows=1000000] [leased=600]
//      keeperPublish* is publishOnce's own shape (selection + write) in whichever form the build has.
//      (add --cpu-prof --cpu-prof-dir=/tmp/qk-prof to see the same split in a profile)
import { KeeperCore, type ScheduleRow } from '../util/keeper/core.js';
import { keyHash } from '../util/keyHash.js';
import { LeaseTable } from '../util/leases/table.js';
import { ReadySet } from '../util/handoff/readySet.js';
import { MINUTE_MS } from '../util/time.js';
import { summarize } from './lib.js';
import { DAY, classify, seededRandom, urlOf } from './fixtures.js';

const NOW = Date.now();
const ROWS = Number(process.argv[2] ?? 1_000_000);
const LEASED = Number(process.argv[3] ?? 600);
const CAPACITY = 5000;
const RUNS = 300;

const random = seededRandom();

function rowOf(key: string, i: number): ScheduleRow {
  const own = random() < 0.1 ? 7 * DAY : null;
  const cadence = classify(key, own).cadenceMs;
  const due = random() < 0.3;
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
  const key = urlOf(i);
  core.apply(key, rowOf(key, i), NOW);
}
const TABLE = Number(process.env.MAX_LEASES ?? 4096);
const leases = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(TABLE)), TABLE);
for (const e of core.topK(LEASED, NOW).entries)
  leases.grant(e.key, NOW, { leaseMs: 600_000, dueMs: e.dueMs, cadenceMs: DAY, fastRetries: 2 });
const ready = new ReadySet(
  new ArrayBuffer(ReadySet.byteLength(CAPACITY, CAPACITY * 192)),
  CAPACITY,
  CAPACITY * 192,
);
const skip = (k: string) => leases.isLeased(k, NOW);
// What the keeper does since the row stores its keyHash: no re-hash of each candidate.
const skipStored = (_k: string, hi: number, lo: number) => leases.isLeasedHash(hi, lo, NOW);
let sink = 0;
// What KeeperService.publishOnce does, in whichever form this build has: the selection walked straight
// into the ready set (publishWalk + publishWith), or built as entry arrays first (publishSelection + publish).
type Streaming = {
  publishWalk?: (k: number, extra: number, now: number, sink: unknown, skip?: unknown) => unknown;
};
type StreamingSet = { publishWith?: (now: number, fill: (w: never) => Iterable<string>) => unknown };
const streamCore = core as unknown as Streaming;
const streamSet = ready as unknown as StreamingSet;
const keeperForm = streamCore.publishWalk && streamSet.publishWith ? 'publishWalk+publishWith' : 'arrays';
const flagsOf = (h: { fromSitemap: boolean; verified: boolean; mark: string }) =>
  (h.fromSitemap ? 1 << 24 : 0) |
  (h.verified ? 1 << 25 : 0) |
  (h.mark === 'urgent' ? 1 << 26 : h.mark === 'changed' ? 1 << 27 : 0);
type Held = { fromSitemap: boolean; verified: boolean; mark: string; route: string };
type Writer = {
  top(k: string, s: number, d: number, f: number, r: string): void;
  extra(k: string, s: number, d: number, f: number, r: string): void;
};
function keeperPublish(): number {
  if (keeperForm === 'arrays') {
    const sel = core.publishSelection(CAPACITY, ready.extraCapacity, NOW, skipStored);
    const r = ready.publish(sel.entries, NOW, { entries: sel.extras, complete: sel.completeQueues });
    return r.published + sel.entries.slice(0, 20).length;
  }
  const head: string[] = [];
  const r = streamSet.publishWith!(NOW, (w: Writer) => {
    const walk = streamCore.publishWalk!(
      CAPACITY,
      ready.extraCapacity,
      NOW,
      {
        top: (key: string, score: number, dueMs: number, held: Held) => {
          if (head.length < 20) head.push(key);
          w.top(key, score, dueMs, flagsOf(held), held.route);
        },
        extra: (key: string, score: number, dueMs: number, held: Held) =>
          w.extra(key, score, dueMs, flagsOf(held), held.route),
      },
      skipStored,
    ) as { completeQueues: Set<string> };
    return walk.completeQueues;
  }) as { published: number };
  return r.published + head.length;
}
const top = core.topK(CAPACITY, NOW, skip).entries;
const keys = top.map((e) => e.key);

console.log(
  JSON.stringify({
    bench: 'publish-core',
    rows: ROWS,
    due: core.dueSummary(NOW).due,
    leased: LEASED,
    node: process.version,
    dueSummaryMs: time(() => (sink += core.dueSummary(NOW).due)),
    topKNoSkipMs: time(() => (sink += core.topK(CAPACITY, NOW).entries.length)),
    topKWithLeaseSkipMs: time(() => (sink += core.topK(CAPACITY, NOW, skip).entries.length)),
    topKWithStoredHashSkipMs: time(() => (sink += core.topK(CAPACITY, NOW, skipStored).entries.length)),
    leaseCheck5000Ms: time(() => {
      for (const k of keys) sink += skip(k) ? 1 : 0;
    }),
    keyHash5000Ms: time(() => {
      for (const k of keys) sink += keyHash(k).lo & 1;
    }),
    readySetWrite5000Ms: time(() => (sink += ready.publish(top, NOW).published)),
    wholePublishRehashMs: time(() => {
      sink += core.dueSummary(NOW).due;
      sink += ready.publish(core.topK(CAPACITY, NOW, skip).entries, NOW).published;
    }),
    wholePublishMs: time(() => {
      sink += core.dueSummary(NOW).due;
      sink += ready.publish(core.topK(CAPACITY, NOW, skipStored).entries, NOW).published;
    }),
    keeperForm,
    keeperPublishMs: time(() => (sink += keeperPublish())),
    keeperPublishCpu: cpuOf(() => (sink += keeperPublish())),
    sink: sink > 0,
  }),
);
