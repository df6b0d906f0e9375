// Heap per held row (target: ≤ 170 B with ~100-char URLs, the key included).
// Run: node --expose-gc dist/bench/keeper-heap.js [rows...]   — prints one JSON object.
//      MIX=scale [DEVICES=2] holds the scale bench's `<url>|<device>` keys (keyMix.ts).
// Each size is measured in its own child process, so one run's leftovers never blur the next.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { KeeperCore, type ScheduleRow } from '../util/keeper/core.js';
import { MINUTE_MS } from '../util/time.js';
import { DEVICES, MIX, classify, keyOf } from './keyMix.js';

const HOUR = 60 * MINUTE_MS;
const DAY = 24 * HOUR;
const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);
const SIZES = process.argv.length > 2 ? process.argv.slice(2).map(Number) : [250_000, 1_000_000];

if (SIZES.length > 1) {
  const result: Record<string, unknown> = { node: process.version, mix: MIX, devices: DEVICES };
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

let seed = 12345;
const random = (): number => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};

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
  jsHeap = m.heapUsed;
  return m.heapUsed + m.arrayBuffers;
}
/** The JS heap alone at the last heapUsed(): what a worker's heap limit (max-old-space-size) counts. */
let jsHeap = 0;

/** The key set's bytes, and what of them repeats: scheme+host per host, the URL per device row. */
function keyShares(rows: number) {
  const hosts = new Set<string>();
  const out = { keyBytes: 0, hostBytes: 0, distinctHostBytes: 0, repeatedUrlBytes: 0, urls: 0 };
  for (let i = 0; i < rows; i++) {
    const key = keyOf(i);
    out.keyBytes += Buffer.byteLength(key);
    const hostEnd = key.indexOf('/', key.indexOf('://') + 3);
    out.hostBytes += hostEnd;
    const host = key.slice(0, hostEnd);
    if (!hosts.has(host)) {
      hosts.add(host);
      out.distinctHostBytes += hostEnd;
    }
    if (i % DEVICES === 0) out.urls++;
    else out.repeatedUrlBytes += key.lastIndexOf('|');
  }
  return out;
}

const result: Record<string, unknown> = {};
for (const rows of SIZES) {
  const shares = keyShares(rows);
  const before = heapUsed();
  const jsBefore = jsHeap;
  const core = new KeeperCore({
    classify,
    score: { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 },
  });
  for (let i = 0; i < rows; i++) {
    const key = keyOf(i);
    core.apply(key, rowOf(key, i, 0), NOW);
  }
  const loaded = heapUsed();
  const jsLoaded = jsHeap;
  // A third of the rows rendered and rescheduled (fresh key strings, as events carry): measures what
  // moved rows leave behind, not just a freshly loaded keeper.
  for (let i = 0; i < rows; i += 3) {
    const key = keyOf(i);
    core.apply(key, rowOf(key, i, 3 * DAY), NOW);
  }
  const churned = heapUsed();
  const strings: string[] = [];
  for (let i = 0; i < rows; i++) strings.push(keyOf(i));
  const withStrings = heapUsed();
  result[String(rows)] = {
    classes: core.classCount,
    keyBytesPerRow: Math.round((shares.keyBytes / rows) * 10) / 10,
    // What the sharing variants would spare a row, estimated from the key set (no structure built): the
    // scheme+host stored once per host, less a 2-byte host number a row; a URL stored once for all its
    // device rows, less a 4-byte reference a row and a 4-byte URL table entry (at ~60 % load) a URL.
    hostInterningSparesPerRow:
      Math.round(((shares.hostBytes - shares.distinctHostBytes) / rows - 2) * 10) / 10,
    urlSharingSparesPerRow:
      Math.round((shares.repeatedUrlBytes / rows - 4 - (4 / 0.6) * (shares.urls / rows)) * 10) / 10,
    bytesPerRowLoaded: Math.round(((loaded - before) / rows) * 10) / 10,
    bytesPerRowAfterRescheduling: Math.round(((churned - before) / rows) * 10) / 10,
    jsHeapBytesPerRowLoaded: Math.round(((jsLoaded - jsBefore) / rows) * 10) / 10,
    // What the URLs alone cost (minus the 8-byte array slot holding each): the floor under any design.
    bytesPerKeyString: Math.round(((withStrings - churned) / rows - 8) * 10) / 10,
  };
  strings.length = 0;
  if (core.size !== rows) throw new Error('lost rows');
}
console.log(JSON.stringify(result));
