// Builds of the keeper core side by side in one process, rounds alternating (A, B, …, then B, …, A), so
// a shared machine's load falls on every build alike. Per round and build, on a fresh KeeperCore: the load
// of ROWS rows (rows/s), 100,000 schedule writes that move due rows a cadence ahead (µs a write), each
// apply handed a key string made just before it from bytes, as the load's decoder and the table's events
// hand them (a build that keeps the string then pays for keeping it, one that copies the bytes does not), and
// PUBLISHES publishes as the keeper runs them (KeeperPublisher.walkInto: the walk with its section extras,
// leased rows skipped by their stored hash, written into a 5,000-entry ready set), wall ms each; then a
// reclassify of every row (ms). A build
// whose walk hands keys over as strings writes them with `top`; one that hands slots copies the key
// bytes with `topFrom`.
// Run: node --expose-gc dist/bench/keeper-ab.js <build>/dist <build>/dist … [ROWS=1000000] [ROUNDS=3]
//      [PUBLISHES=200] [DUE_SHARE=1] [LEASED=600]; MIX=scale [DEVICES=2] (keyMix.ts).
import { resolve } from 'node:path';
import type { HeldClass, HeldFields, KeeperCore } from '../util/keeper/core.js';
import type { LeaseTable } from '../util/leases/table.js';
import type { ReadySet } from '../util/sharedMemory/readySet.js';
import { MINUTE_MS } from '../util/time.js';
import { DAY, seededRandom } from './fixtures.js';
import { DEVICES, MIX, classify, indexOfKey, keyOf } from './keyMix.js';
import { loadavg, summarize } from './lib.js';

const builds = process.argv.slice(2).map((d) => resolve(d));
if (builds.length === 0) throw new Error('usage: keeper-ab.js <build>/dist …');
const ROWS = Number(process.env.ROWS ?? 1_000_000);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const PUBLISHES = Number(process.env.PUBLISHES ?? 200);
const DUE_SHARE = Number(process.env.DUE_SHARE ?? 1);
const LEASED = Number(process.env.LEASED ?? 600);
const WRITES = 100_000;
const CAPACITY = 5000;
const NOW = Date.UTC(2025, 5, 1, 12, 0, 0) + 17_000;
const gc = (globalThis as { gc?: () => void }).gc ?? (() => undefined);

/** Row i's key as a new string, decoded from its bytes. */
function freshKey(i: number): string {
  return keyBytes.toString('utf8', keyStarts[i]!, keyStarts[i + 1]!);
}

interface Build {
  dir: string;
  KeeperCore: new (o: object) => KeeperCore;
  ReadySet: typeof ReadySet;
  LeaseTable: typeof LeaseTable;
  flagBits: (fromSitemap: boolean, verified: boolean, mark: string) => number;
}

async function loadBuild(dir: string): Promise<Build> {
  const core = (await import(`${dir}/util/keeper/core.js`)) as { KeeperCore: Build['KeeperCore'] };
  const ready = (await import(`${dir}/util/sharedMemory/readySet.js`)) as {
    ReadySet: Build['ReadySet'];
    flagBits: Build['flagBits'];
  };
  const leases = (await import(`${dir}/util/leases/table.js`)) as { LeaseTable: Build['LeaseTable'] };
  return {
    dir,
    KeeperCore: core.KeeperCore,
    ReadySet: ready.ReadySet,
    LeaseTable: leases.LeaseTable,
    flagBits: ready.flagBits,
  };
}

// Every build holds the same keys (kept as bytes here, so the bench itself holds no key string) and rows.
const random = seededRandom();
const keyStarts = new Int32Array(ROWS + 1);
let keyBytes = Buffer.alloc(1 << 20);
const rows: HeldFields[] = [];
for (let i = 0; i < ROWS; i++) {
  const key = keyOf(i);
  if (keyStarts[i]! + Buffer.byteLength(key) > keyBytes.length) {
    const grown = Buffer.alloc(keyBytes.length * 2);
    keyBytes.copy(grown);
    keyBytes = grown;
  }
  keyStarts[i + 1] = keyStarts[i]! + keyBytes.write(key, keyStarts[i]!, 'utf8');
  const own = random() < 0.1 ? 7 * DAY : null;
  const cadence = classify(key, own).cadenceMs;
  const due = random() < DUE_SHARE;
  const offset = due ? -random() * 2 * cadence : 1 + random() * cadence;
  rows.push({
    nextRenderTime: Math.floor((NOW + offset) / MINUTE_MS) * MINUTE_MS,
    fromSitemap: i % 2 === 0,
    effectiveInterval: own,
    verified: true,
    urgentAt: due ? NOW - 1 : null,
    changedAt: null,
  });
}

type Visitor = (keyOrSlot: string | number, score: number, dueMs: number, held: HeldClass) => void;
interface AnyCore {
  keyBytes?: unknown;
  keyAt?: (slot: number) => string;
  selection: {
    publishWalk(
      k: number,
      extra: number,
      now: number,
      sink: { top: Visitor; extra: Visitor },
      skip?: (keyOrSlot: string | number, hi: number, lo: number) => boolean | number,
    ): { completeQueues: Set<string> };
  };
}
interface AnyWriter {
  top(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void;
  extra(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void;
  topFrom?(
    k: unknown,
    ref: number,
    score: number,
    dueMs: number,
    flags: number,
    route: string | undefined,
  ): void;
  extraFrom?(
    k: unknown,
    ref: number,
    score: number,
    dueMs: number,
    flags: number,
    route: string | undefined,
  ): void;
}

function round(b: Build): Record<string, number> {
  gc();
  const core = new b.KeeperCore({
    classify,
    score: { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 },
    hashSeed: 7,
  });
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < ROWS; i++) core.apply(freshKey(i), rows[i]!, NOW);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;

  const any = core as unknown as AnyCore;
  const bytes = any.keyBytes;
  const keyOfVisit = (v: string | number): string => (typeof v === 'number' ? any.keyAt!(v) : v);
  // The best rows' keys (as strings) get leases, as claims would hold them.
  const leases = new b.LeaseTable(new ArrayBuffer(b.LeaseTable.byteLength(262_144)), 262_144);
  const best: string[] = [];
  any.selection.publishWalk(LEASED, 0, NOW, {
    top: (v) => best.push(keyOfVisit(v)),
    extra: () => undefined,
  });
  for (const key of best)
    leases.grant(key, NOW, { leaseMs: 600_000, dueMs: NOW, cadenceMs: DAY, fastRetries: 2 });
  const ready = new b.ReadySet(
    new ArrayBuffer(b.ReadySet.byteLength(CAPACITY, CAPACITY * 192)),
    CAPACITY,
    CAPACITY * 192,
  );
  const skip = (_v: string | number, hi: number, lo: number) => leases.isLeasedHash(hi, lo, NOW);
  const flags = (h: HeldClass) => b.flagBits(h.fromSitemap, h.verified, h.mark);
  let sink = 0;
  const publish = (): void => {
    const head: string[] = [];
    const r = ready.publishWith(NOW, (w) => {
      const wr = w as unknown as AnyWriter;
      const walk = any.selection.publishWalk(
        CAPACITY,
        ready.extraCapacity,
        NOW,
        bytes === undefined
          ? {
              top: (k, s, d, h) => {
                if (head.length < 20) head.push(k as string);
                wr.top(k as string, s, d, flags(h), h.route);
              },
              extra: (k, s, d, h) => wr.extra(k as string, s, d, flags(h), h.route),
            }
          : {
              top: (slot, s, d, h) => {
                if (head.length < 20) head.push(any.keyAt!(slot as number));
                wr.topFrom!(bytes, slot as number, s, d, flags(h), h.route);
              },
              extra: (slot, s, d, h) => wr.extraFrom!(bytes, slot as number, s, d, flags(h), h.route),
            },
        skip,
      );
      return walk.completeQueues;
    });
    sink += r.published + r.extras + head.length;
  };
  for (let i = 0; i < 20; i++) publish();
  const publishMs: number[] = [];
  const c0 = process.cpuUsage();
  for (let i = 0; i < PUBLISHES; i++) {
    const t = process.hrtime.bigint();
    publish();
    publishMs.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  const cpu = process.cpuUsage(c0);

  // Schedule writes: the best due rows rendered and moved one cadence ahead, as results land.
  const rendered: number[] = [];
  any.selection.publishWalk(WRITES, 0, NOW, {
    top: (v) => rendered.push(indexOfKey(keyOfVisit(v))),
    extra: () => undefined,
  });
  const moved = rendered.map((i) => ({
    ...rows[i]!,
    nextRenderTime: rows[i]!.nextRenderTime + 3 * DAY,
    urgentAt: null,
  }));
  const t1 = process.hrtime.bigint();
  for (let j = 0; j < rendered.length; j++) core.apply(freshKey(rendered[j]!), moved[j]!, NOW);
  const writeUs = Number(process.hrtime.bigint() - t1) / 1e3 / rendered.length;
  // A routes change: every held row classified again from its key.
  const t2 = process.hrtime.bigint();
  core.reclassify(classify, { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 });
  const reclassifyMs = Number(process.hrtime.bigint() - t2) / 1e6;
  const s = summarize(publishMs);
  if (sink === 0) throw new Error('nothing published');
  return {
    loadRowsPerSec: Math.round(ROWS / (loadMs / 1000)),
    applyWriteUs: Math.round(writeUs * 1000) / 1000,
    publishP50Ms: s.p50,
    publishP99Ms: s.p99,
    publishCpuMs: Math.round(((cpu.user + cpu.system) / 1000 / PUBLISHES) * 1000) / 1000,
    reclassifyMs: Math.round(reclassifyMs),
  };
}

const loaded = await Promise.all(builds.map(loadBuild));
console.log(
  JSON.stringify({ bench: 'keeper-ab', rows: ROWS, mix: MIX, devices: DEVICES, dueShare: DUE_SHARE, builds }),
);
const all: Array<Array<Record<string, number>>> = builds.map(() => []);
for (let r = 0; r < ROUNDS; r++) {
  // Each round starts one build later, so no build always runs first (or right after the same one).
  loaded.forEach((_, at) => {
    const i = (at + r) % loaded.length;
    const b = loaded[i]!;
    const load = loadavg();
    const result = round(b);
    all[i]!.push(result);
    console.log(JSON.stringify({ round: r + 1, build: b.dir, loadavg: load, ...result }));
  });
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
builds.forEach((dir, i) => {
  const runs = all[i]!;
  const out: Record<string, number> = {};
  for (const k of Object.keys(runs[0]!)) out[k] = median(runs.map((x) => x[k]!));
  console.log(JSON.stringify({ median: dir, ...out }));
});
