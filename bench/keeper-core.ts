// Micro-benchmark of the keeper core (target: top 5,000 of 1M held rows ≤ 0.3 ms p50), through the walk
// a publish runs (KeeperCore.publishWalk), with no room for section extras unless named.
// Run: node dist/bench/keeper-core.js [rows=1000000]   — prints one JSON object.
//      MIX=scale [DEVICES=2] holds the scale bench's `<url>|<device>` keys (keyMix.ts).
import { KeeperCore, type PublishSink, type ScheduleRow, type TopSkip } from '../util/keeper/core.js';
import { rowHash } from '../util/schedule/rowKey.js';
import { MINUTE_MS } from '../util/time.js';
import { DAY, seededRandom } from './fixtures.js';
import { DEVICES, MIX, classify, indexOfKey, keyOf } from './keyMix.js';

const NOW = Date.UTC(2025, 5, 1, 12, 0, 0) + 17_000;
const ROWS = Number(process.argv[2] ?? 1_000_000);
const DUE_SHARE = 0.3;

const random = seededRandom();

function rowOf(key: string, i: number): ScheduleRow {
  const own = random() < 0.1 ? 7 * DAY : null;
  const cadence = classify(key, own).cadenceMs;
  const due = random() < DUE_SHARE;
  const offset = due ? -random() * 2 * cadence : 1 + random() * cadence;
  const mark = random();
  return {
    cacheKey: key,
    nextRenderTime: Math.floor((NOW + offset) / MINUTE_MS) * MINUTE_MS,
    fromSitemap: i % 2 === 0,
    effectiveInterval: own,
    verified: random() < 0.9,
    urgentAt: mark < 0.005 ? NOW - 1 : null,
    changedAt: mark > 0.99 ? NOW - 1 : null,
  };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

function timeIt(runs: number, fn: () => void): { p50: number; p99: number; max: number } {
  for (let i = 0; i < Math.min(20, runs); i++) fn();
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) {
    const start = process.hrtime.bigint();
    fn();
    samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  samples.sort((a, b) => a - b);
  const round = (x: number): number => Math.round(x * 1000) / 1000;
  return {
    p50: round(percentile(samples, 0.5)),
    p99: round(percentile(samples, 0.99)),
    max: round(samples.at(-1)!),
  };
}

const core = new KeeperCore({
  classify,
  score: { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 },
});
const keys: string[] = [];
for (let i = 0; i < ROWS; i++) keys.push(keyOf(i));
const rows = keys.map((key, i) => rowOf(key, i));

const loadStart = process.hrtime.bigint();
for (let i = 0; i < ROWS; i++) core.apply(keys[i]!, rows[i]!, NOW);
const loadMs = Number(process.hrtime.bigint() - loadStart) / 1e6;

const dueRows = core.dueSummary(NOW).due;
let sink = 0;
/** The keys of the best `k` due rows, best first, as a publish walk hands them over. */
function topKeys(k: number, skip?: TopSkip): string[] {
  const keys: string[] = [];
  core.selection.publishWalk(
    k,
    0,
    NOW,
    { top: (slot) => keys.push(core.keyAt(slot)), extra: () => undefined },
    skip,
  );
  return keys;
}
// The rows go straight to a callback, as the keeper's publish copies them into the ready set.
const scoreSink: PublishSink = {
  top: (_slot, score) => {
    sink += score;
  },
  extra: (_slot, score) => {
    sink += score;
  },
};
const top = timeIt(1000, () => {
  sink += core.selection.publishWalk(5000, 0, NOW, scoreSink).skipped;
});
// With the section extras a publish of a 5,000-entry set adds (half its capacity).
const withExtras = timeIt(1000, () => {
  sink += core.selection.publishWalk(5000, 2500, NOW, scoreSink).skipped;
});
// Leases sit on the best rows, so the walk has to step over them: the publish loop's real shape. The
// skip reads the row's stored lease hash, as the keeper's does.
const leased = new Set(topKeys(2000).map((key) => rowHash(key).lo));
const topSkip = timeIt(300, () => {
  sink += core.selection.publishWalk(5000, 0, NOW, scoreSink, (_slot, _hi, lo) => leased.has(lo)).skipped;
});
const state = timeIt(20, () => {
  sink += core.state(NOW).now.due;
});
const summary = timeIt(100, () => {
  sink += core.dueSummary(NOW).due;
});

// Schedule writes: each of 100k due rows rendered and rescheduled one cadence ahead, as results land.
const rendered = topKeys(100_000);
const writeStart = process.hrtime.bigint();
for (const key of rendered) {
  const r = rows[indexOfKey(key)]!;
  core.apply(key, { ...r, nextRenderTime: r.nextRenderTime + 3 * DAY, urgentAt: null, changedAt: null }, NOW);
}
const writeUs = (Number(process.hrtime.bigint() - writeStart) / 1e3 / rendered.length).toFixed(3);
const topAfterChurn = timeIt(1000, () => {
  sink += core.selection.publishWalk(5000, 0, NOW, scoreSink).skipped;
});
let bucketsTouched = 0;
let lastDue = NaN;
let lastRoute = '';
core.selection.publishWalk(5000, 0, NOW, {
  top: (_key, _score, dueMs, held) => {
    if (dueMs !== lastDue || held.route !== lastRoute) bucketsTouched++;
    lastDue = dueMs;
    lastRoute = held.route;
  },
  extra: () => undefined,
});

console.log(
  JSON.stringify(
    {
      rows: ROWS,
      mix: MIX,
      devices: DEVICES,
      dueRows,
      classes: core.classCount,
      node: process.version,
      loadMs: Math.round(loadMs),
      loadRowsPerSec: Math.round(ROWS / (loadMs / 1000)),
      top5000Ms: top,
      top5000With2500ExtrasMs: withExtras,
      top5000Skipping2000LeasedMs: topSkip,
      stateMs: state,
      dueSummaryMs: summary,
      applyRescheduleUs: Number(writeUs),
      top5000AfterRescheduling100kMs: topAfterChurn,
      bucketRunsInTop5000AfterRescheduling: bucketsTouched,
      sink: sink > 0,
    },
    null,
    2,
  ),
);
