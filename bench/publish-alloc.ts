// What one publish allocates on the JS heap, per build: the heap's growth over PUBLISHES publishes (the
// walk with its section extras into a 5,000-entry ready set, as keeper-ab.ts runs them) of 200,000 due
// rows, with a young generation large enough that no collection runs meanwhile (checked: a collection
// would show as a shrinking heap, and the run says so). Each build runs in a process of its own: code
// shared between builds in one process is compiled for both, and then boxes numbers it would not box
// for one.
// Run: node --expose-gc --max-semi-space-size=256 dist/bench/publish-alloc.js <build>/dist … ; MIX=scale
//      (keyMix.ts).
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HeldClass, KeeperCore } from '../util/keeper/core.js';
import type { ReadySet } from '../util/sharedMemory/readySet.js';
import { MIX, classify, keyOf } from './keyMix.js';

const ROWS = 200_000;
const PUBLISHES = 20;
const CAPACITY = 5000;
const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with node --expose-gc');

type Visitor = (keyOrSlot: string | number, score: number, dueMs: number, held: HeldClass) => void;
type AnyWriter = Record<'top' | 'extra' | 'topFrom' | 'extraFrom', (...args: unknown[]) => void>;

const dirs = process.argv.slice(2).map((d) => resolve(d));
if (dirs.length > 1) {
  for (const dir of dirs) {
    const args = [...process.execArgv, fileURLToPath(import.meta.url), dir];
    process.stdout.write(execFileSync(process.execPath, args));
  }
  process.exit(0);
}
for (const dir of dirs) {
  const { KeeperCore: Core } = (await import(`${dir}/util/keeper/core.js`)) as {
    KeeperCore: new (o: object) => KeeperCore;
  };
  const { ReadySet: Ready, flagBits } = (await import(`${dir}/util/sharedMemory/readySet.js`)) as {
    ReadySet: typeof ReadySet;
    flagBits: (fromSitemap: boolean, verified: boolean, mark: string) => number;
  };
  const core = new Core({ classify, score: { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 } });
  for (let i = 0; i < ROWS; i++) {
    const row = {
      nextRenderTime: NOW - 3_600_000 - (i % 500) * 60_000,
      fromSitemap: i % 2 === 0,
      effectiveInterval: null,
      verified: true,
      urgentAt: null,
      changedAt: null,
    };
    core.apply(keyOf(i), row, NOW);
  }
  const ready = new Ready(
    new ArrayBuffer(Ready.byteLength(CAPACITY, CAPACITY * 192)),
    CAPACITY,
    CAPACITY * 192,
  );
  const bytes = (core as unknown as { keyBytes?: unknown }).keyBytes;
  const flags = (h: HeldClass) => flagBits(h.fromSitemap, h.verified, h.mark);
  const walk = core.selection.publishWalk.bind(core.selection) as unknown as (
    k: number,
    extra: number,
    now: number,
    sink: { top: Visitor; extra: Visitor },
    skip: () => boolean,
  ) => { completeQueues: Set<string> };
  const publish = () =>
    ready.publishWith(NOW, (writer) => {
      const w = writer as unknown as AnyWriter;
      const sink: { top: Visitor; extra: Visitor } =
        bytes === undefined
          ? {
              top: (k, s, d, h) => w.top(k, s, d, flags(h), h.route),
              extra: (k, s, d, h) => w.extra(k, s, d, flags(h), h.route),
            }
          : {
              top: (k, s, d, h) => w.topFrom(bytes, k, s, d, flags(h), h.route),
              extra: (k, s, d, h) => w.extraFrom(bytes, k, s, d, flags(h), h.route),
            };
      return walk(CAPACITY, ready.extraCapacity, NOW, sink, () => false).completeQueues;
    });
  for (let i = 0; i < 50; i++) publish();
  gc();
  const before = process.memoryUsage().heapUsed;
  let written = 0;
  for (let i = 0; i < PUBLISHES; i++) {
    const r = publish();
    written += r.published + r.extras;
  }
  const grown = process.memoryUsage().heapUsed - before;
  console.log(
    JSON.stringify({
      build: dir,
      mix: MIX,
      entriesPerPublish: written / PUBLISHES,
      bytesPerPublish: grown < 0 ? null : Math.round(grown / PUBLISHES),
      collected: grown < 0,
    }),
  );
}
