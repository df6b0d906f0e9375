// The keeper's load at N rows in process: KeeperCore reserved as a load reserves it (the table's row
// estimate × RESERVE_SLACK, services/keeper/service.ts), then every row applied in slices of 1,000 as the
// load walk does; prints the longest slice and where it fell. A held-rows table that must grow past its
// reservation re-files every entry in one slice (a hold of worker 0 of about 2 s at 13M rows).
// Run: npm run build && node dist/bench/held-growth.js [rows] (default 20,000,000; MIX=scale DEVICES=2
//      holds the scale bench's `<url>|<device>` keys, keyMix.ts).
import { KeeperCore } from '../util/keeper/core.js';
import { RESERVE_SLACK } from '../services/keeper/deps.js';
import { MINUTE_MS } from '../util/time.js';
import { DEVICES, MIX, classify, keyOf } from './keyMix.js';
import { loadavg } from './lib.js';

const ROWS = Number(process.argv[2] ?? 20_000_000);
const SLICE = 1000;
const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);

const core = new KeeperCore({
  classify,
  score: { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 },
});
const loadBefore = loadavg();
core.reserve(Math.ceil(ROWS * RESERVE_SLACK));
let longest = { ms: 0, atRow: 0 };
const slow: Array<{ atRow: number; ms: number }> = [];
const t0 = performance.now();
for (let from = 0; from < ROWS; from += SLICE) {
  const s0 = performance.now();
  for (let i = from; i < Math.min(ROWS, from + SLICE); i++) {
    const key = keyOf(i);
    core.apply(
      key,
      {
        nextRenderTime: NOW + (i % 97) * MINUTE_MS,
        fromSitemap: i % 2 === 0,
        effectiveInterval: null,
        verified: true,
        urgentAt: null,
        changedAt: null,
      },
      NOW,
    );
  }
  const ms = performance.now() - s0;
  if (ms > longest.ms) longest = { ms, atRow: from };
  if (ms >= 50) slow.push({ atRow: from, ms: Math.round(ms) });
}
if (core.size !== ROWS) throw new Error(`held ${core.size} of ${ROWS}`);
console.log(
  JSON.stringify({
    bench: 'held-growth',
    node: process.version,
    mix: MIX,
    devices: DEVICES,
    rows: ROWS,
    seconds: Math.round((performance.now() - t0) / 100) / 10,
    longestSliceMs: Math.round(longest.ms),
    longestAtRow: longest.atRow,
    slicesOver50Ms: slow,
    load: [loadBefore, loadavg()],
  }),
);
