// Two builds of the lease table side by side in one process: the same operations on each, sample by
// sample in alternating order, timed in process CPU time, so a shared machine's load falls on both alike.
// Finer than comparing two runs of lease-table.ts, whose figures move ±20 % with the load.
// Run: npx tsc -p tsconfig.json && node dist/bench/lease-ab.js <a/util/leases/table.js> <b/util/leases/table.js> [samples=100]
// (a checkout built elsewhere: its dist/util/leases/table.js; `b/a` < 1 means b is faster)
//
// Operations, each over 4,096 keys of a 4,096-lease table: `grant` re-grants keys released a round ago
// (each reuses its own slot), `fresh` grants never-seen keys (taking over dead slots of other keys),
// `release` releases them, `report` ends them as a result does (beginReport, then finishReport), `check`
// asks check of each token 4 times, `skip` asks isLeasedHash of 4,096 leased and 4,096 free keys 8 times.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { keyHash } from '../util/keyHash.js';
import type { LeaseTable } from '../util/leases/table.js';
import { median } from './lib.js';

const [pathA, pathB] = process.argv.slice(2);
const SAMPLES = Number(process.argv[4] ?? 100);
if (!pathA || !pathB) throw new Error('usage: lease-ab.js <a table.js> <b table.js> [samples]');
const N = 4096;
const T0 = Date.UTC(2026, 0, 1);
const options = { leaseMs: 600_000, dueMs: T0, cadenceMs: 86_400_000, fastRetries: 2 };
const caller = { user: 0, superUser: true };
const answer = { accepted: true as const, nextRenderTime: T0 + 86_400_000 };
const url = (round: number, i: number): string =>
  `https://shop.example.com/category-${i % 97}/product/${round}-${i}?utm_source=sitemap`;
const keys = Array.from({ length: N }, (_, i) => url(0, i));
const hashes = [...keys, ...Array.from({ length: N }, (_, i) => url(1, i))].map(keyHash);
const OPS = ['grant', 'fresh', 'release', 'report', 'check', 'skip'] as const;
type Op = (typeof OPS)[number];

type TableClass = typeof LeaseTable;
const load = async (path: string): Promise<TableClass> =>
  ((await import(pathToFileURL(resolve(path)).href)) as { LeaseTable: TableClass }).LeaseTable;

/** One build's table and the untimed set-up each timed operation needs before it. */
function side(Table: TableClass): Record<Op, () => void> & { before(op: Op): void } {
  const table = new Table(new ArrayBuffer(Table.byteLength(N)), N);
  const tokens = new Array<string>(N);
  let current = keys;
  let round = 2;
  let now = T0;
  const grantAll = (list: string[]): void => {
    current = list;
    for (let i = 0; i < N; i++) {
      const g = table.grant(list[i]!, now, options);
      tokens[i] = g.ok ? g.token : '';
    }
  };
  const releaseAll = (): void => {
    for (let i = 0; i < N; i++) table.release(current[i]!, tokens[i]!, now);
    now += 6_000;
  };
  let fresh: string[] = [];
  grantAll(keys);
  return {
    // Leaves the table as the operation expects it: leases out for release, report, check and skip.
    before(op: Op): void {
      releaseAll();
      if (op === 'fresh') fresh = Array.from({ length: N }, (_, i) => url(round++, i));
      else if (op !== 'grant') grantAll(keys);
    },
    grant: () => grantAll(keys),
    fresh: () => grantAll(fresh),
    release: releaseAll,
    report(): void {
      for (let i = 0; i < N; i++) {
        table.beginReport(current[i]!, tokens[i]!, caller);
        table.finishReport(current[i]!, tokens[i]!, answer, false, now);
      }
    },
    check(): void {
      for (let r = 0; r < 4; r++) for (let i = 0; i < N; i++) table.check(current[i]!, tokens[i]!);
    },
    skip(): void {
      for (let r = 0; r < 8; r++) for (const h of hashes) table.isLeasedHash(h.hi, h.lo, now);
    },
  };
}

const cpuUs = (): number => {
  const u = process.cpuUsage();
  return u.user + u.system;
};
const sides = [side(await load(pathA)), side(await load(pathB))];
console.log(`lease table A/B, ${N} keys, ${SAMPLES} samples a side per operation, node ${process.version}`);
console.log(`a ${pathA}\nb ${pathB}`);
for (const op of OPS) {
  const us: number[][] = [[], []];
  for (let s = 0; s < SAMPLES; s++) {
    for (const j of s % 2 === 0 ? [0, 1] : [1, 0]) {
      sides[j]!.before(op);
      const start = cpuUs();
      sides[j]![op]();
      us[j]!.push(cpuUs() - start);
    }
  }
  // The first samples warm the JIT up; the rest count.
  const [a, b] = us.map((x) => median(x.slice(5)));
  console.log(
    `${op.padEnd(8)} a ${String(a).padStart(7)} µs   b ${String(b).padStart(7)} µs   b/a ${(b! / a!).toFixed(3)}`,
  );
}
