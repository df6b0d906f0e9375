// Lease grants at high table occupancy, single-threaded over an ArrayBuffer, no Harper.
// Run: npx tsc -p tsconfig.json && node dist/bench/lease-occupancy.js   (MAX_LEASES=262144 by default)
//
// For each live occupancy (10 %, 50 %, 90 %, 99 % of maxLeases, plus 130 % and 150 % because
// nothing stops a node from leasing past maxLeases) the table is filled with live leases of one
// set of keys, then fresh keys are granted in rounds of 1 % of maxLeases, each round released again
// and the clock moved past the release grace, so occupancy stays where it was put. `expired` adds
// as many leases again that ran out a second ago: past their end but not yet past the expiry grace,
// so they neither block their key nor may be taken over. `round 2` is the claims bench's shape: a
// table at 38 % (100,000 of 262,144) gets 100,000 more grants on top.
import { LeaseTable, PROBE_WINDOW, RELEASE_GRACE_MS } from '../util/leases/table.js';
import { HEADER_WORDS, SLOT_WORDS, S_REACH } from '../util/leases/slots.js';

const MAX_LEASES = Number(process.env.MAX_LEASES ?? 262_144);
const T0 = Date.UTC(2026, 0, 1);
const LONG = { leaseMs: 3_600_000, dueMs: T0, cadenceMs: 86_400_000, fastRetries: 2 };
const SHORT = { ...LONG, leaseMs: 60_000 };
const ROUNDS = Number(process.env.ROUNDS ?? 20);

const url = (tag: string, i: number): string =>
  `https://shop.example.com/category-${i % 97}/product/${tag}-${i}?utm_source=sitemap`;

interface Row {
  scenario: string;
  live: number;
  grantsPerSec: number;
  refused: number;
  tried: number;
  /** Homes whose window grew past PROBE_WINDOW, and the longest window. */
  grown: string;
}

/** Word 15 of each slot is its home's window length (0: PROBE_WINDOW), read straight from the buffer. */
function grown(buffer: ArrayBuffer, table: LeaseTable): string {
  const words = new Int32Array(buffer);
  let homes = 0;
  let longest = PROBE_WINDOW;
  for (let slot = 0; slot < table.slotCount; slot++) {
    const reach = words[HEADER_WORDS + slot * SLOT_WORDS + S_REACH]!;
    if (reach > PROBE_WINDOW) homes++;
    longest = Math.max(longest, reach);
  }
  return `${homes} homes grown, longest window ${longest}`;
}

function measure(scenario: string, fill: number, expiredToo: boolean): Row {
  const buffer = new ArrayBuffer(LeaseTable.byteLength(MAX_LEASES));
  const table = new LeaseTable(buffer, MAX_LEASES);
  let now = T0;
  const liveCount = Math.round(MAX_LEASES * fill);
  if (expiredToo) {
    for (let i = 0; i < liveCount; i++) table.grant(url('x', i), now, SHORT);
    now += SHORT.leaseMs + 1000;
  }
  for (let i = 0; i < liveCount; i++) table.grant(url('live', i), now, LONG);
  const batch = Math.max(1, Math.round(MAX_LEASES / 100));
  let refused = 0;
  let ns = 0n;
  for (let round = 0; round < ROUNDS; round++) {
    const keys = Array.from({ length: batch }, (_, i) => url(`r${round}`, i));
    const tokens: Array<string | undefined> = [];
    const t0 = process.hrtime.bigint();
    for (const key of keys) {
      const g = table.grant(key, now, LONG);
      if (g.ok) tokens.push(g.token);
      else {
        tokens.push(undefined);
        refused++;
      }
    }
    ns += process.hrtime.bigint() - t0;
    keys.forEach((key, i) => tokens[i] !== undefined && table.release(key, tokens[i]!, now));
    if (!expiredToo) now += RELEASE_GRACE_MS + 1000;
  }
  const tried = batch * ROUNDS;
  const grantsPerSec = Math.round((tried * 1e9) / Number(ns));
  return { scenario, live: fill, grantsPerSec, refused, tried, grown: grown(buffer, table) };
}

function roundTwo(): Row {
  const buffer = new ArrayBuffer(LeaseTable.byteLength(MAX_LEASES));
  const table = new LeaseTable(buffer, MAX_LEASES);
  const first = Math.round(MAX_LEASES * 0.38);
  for (let i = 0; i < first; i++) table.grant(url('a1', i), T0, LONG);
  let refused = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < first; i++) if (!table.grant(url('a2', i), T0 + 60_000, LONG).ok) refused++;
  const ns = process.hrtime.bigint() - t0;
  return {
    scenario: 'round 2',
    live: 0.76,
    grantsPerSec: Math.round((first * 1e9) / Number(ns)),
    refused,
    tried: first,
    grown: grown(buffer, table),
  };
}

console.log(`lease occupancy, maxLeases ${MAX_LEASES}, node ${process.version}`);
measure('warm-up', 0.5, false);
const rows: Row[] = [];
for (const fill of [0.1, 0.5, 0.9, 0.99, 1.3, 1.5]) rows.push(measure('live', fill, false));
for (const fill of [0.9, 0.99]) rows.push(measure('+expired', fill, true));
rows.push(roundTwo());
for (const r of rows)
  console.log(
    `${r.scenario.padEnd(9)} live ${String(Math.round(r.live * 100)).padStart(3)} %` +
      `   grants/s ${r.grantsPerSec.toLocaleString('en-US').padStart(10)}` +
      `   refused ${String(r.refused).padStart(5)} of ${r.tried}   ${r.grown}`,
  );
