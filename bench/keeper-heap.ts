// Heap per held row (target: ≤ 170 B with ~100-char URLs, the key string included).
// Run: node --expose-gc dist/bench/keeper-heap.js [rows...]   — prints one JSON object.
// Each size is measured in its own child process, so one run's leftovers never blur the next.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { type Classify, KeeperCore, type ScheduleRow } from '../util/keeper/core.js';
import { MINUTE_MS } from '../util/time.js';

const HOUR = 60 * MINUTE_MS;
const DAY = 24 * HOUR;
const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);
const SIZES = process.argv.length > 2 ? process.argv.slice(2).map(Number) : [250_000, 1_000_000];

if (SIZES.length > 1) {
  const result: Record<string, unknown> = { node: process.version };
  for (const rows of SIZES) {
    const out = execFileSync(process.execPath, [
      ...process.execArgv,
      fileURLToPath(import.meta.url),
      String(rows),
    ]);
    Object.assign(result, JSON.parse(out.toString()) as Record<string, unknown>);
  }
  console.log(JSON.stringify(result, null, 2));
  process.exit(0);
}

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with node --expose-gc');

const PREFIXES = ['/catalog/products/', '/news/', '/blog/', '/help/articles/'];
const CADENCES = [6 * HOUR, HOUR, null, null];
const classify: Classify = (url, own) => {
  const path = url.slice(url.indexOf('/', 8));
  for (let i = 0; i < PREFIXES.length; i++) {
    if (path.startsWith(PREFIXES[i]!)) return { route: `r${i}`, cadenceMs: CADENCES[i] ?? own ?? DAY };
  }
  return { route: 'unrouted', cadenceMs: own ?? DAY };
};

let seed = 12345;
const random = (): number => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};

/** A flat 100-char URL, as a decoded record key would be (not a cons string of template parts). */
function urlOf(i: number): string {
  const text = `https://www.example-shop.com${PREFIXES[i % 4]}item-${i.toString(36)}-${'abcdefghij'.repeat(10)}`;
  return Buffer.from(text.slice(0, 100), 'latin1').toString('latin1');
}

function rowOf(key: string, i: number, shift: number): ScheduleRow {
  const own = random() < 0.1 ? 7 * DAY : null;
  const cadence = classify(key, own).cadenceMs;
  const offset = random() < 0.3 ? -random() * 2 * cadence : 1 + random() * cadence;
  const mark = random();
  return {
    cacheKey: key,
    nextRenderTime: Math.floor((NOW + offset + shift) / MINUTE_MS) * MINUTE_MS,
    fromSitemap: i % 2 === 0,
    effectiveInterval: own,
    verified: random() < 0.9,
    urgentAt: mark < 0.005 ? NOW : null,
    changedAt: mark > 0.99 ? NOW : null,
  };
}

/** The JS heap plus ArrayBuffer backing stores: the keeper's tables and pages are typed arrays, which
 * live outside heapUsed, and leaving them out would flatter the figure. */
function heapUsed(): number {
  gc!();
  gc!();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

const result: Record<string, unknown> = {};
for (const rows of SIZES) {
  const before = heapUsed();
  const core = new KeeperCore({
    classify,
    score: { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 },
  });
  for (let i = 0; i < rows; i++) {
    const key = urlOf(i);
    core.apply(key, rowOf(key, i, 0), NOW);
  }
  const loaded = heapUsed();
  // A third of the rows rendered and rescheduled (fresh key strings, as events carry): measures what
  // moved rows leave behind, not just a freshly loaded keeper.
  for (let i = 0; i < rows; i += 3) {
    const key = urlOf(i);
    core.apply(key, rowOf(key, i, 3 * DAY), NOW);
  }
  const churned = heapUsed();
  const strings: string[] = [];
  for (let i = 0; i < rows; i++) strings.push(urlOf(i));
  const withStrings = heapUsed();
  result[String(rows)] = {
    classes: core.classCount,
    bytesPerRowLoaded: Math.round(((loaded - before) / rows) * 10) / 10,
    bytesPerRowAfterRescheduling: Math.round(((churned - before) / rows) * 10) / 10,
    // What the URLs alone cost (minus the 8-byte array slot holding each): the floor under any design.
    bytesPerKeyString: Math.round(((withStrings - churned) / rows - 8) * 10) / 10,
  };
  strings.length = 0;
  if (core.size !== rows) throw new Error('lost rows');
}
console.log(JSON.stringify(result));
