// Single-threaded micro-bench of the lease table: grants/s and releases/s at the default size, then the
// result path and the keeper's lease skip.
// Run: npx tsc -p tsconfig.json && node dist/bench/lease-table.js
//
// Two workloads: `cycling` re-grants the same 4,096 keys every round (each key reuses its own slot, the
// steady state of a fleet working a fixed set), `fresh` grants never-seen keys every round, so most
// grants take over a dead slot of another key in place. Each round grants every key, then releases
// every key, then moves the clock past the release grace. `reported` is `cycling` with each lease ended
// as a result ends it (beginReport, then finishReport) instead of a release: reports/s times that pair.
// `skip` times isLeasedHash, the publish's lease skip, over 4,096 leased keys and 4,096 free ones.
import { keyHash } from '../util/keyHash.js';
import { LeaseTable, RELEASE_GRACE_MS } from '../util/leases/table.js';

const MAX_LEASES = 4096;
const ROUNDS = 200;
const T0 = Date.UTC(2026, 0, 1);
const options = { leaseMs: 600_000, dueMs: T0, cadenceMs: 86_400_000, fastRetries: 2 };

const caller = { user: 0, superUser: true };
const answer = { accepted: true as const, nextRenderTime: T0 + 86_400_000 };

const url = (round: number, i: number): string =>
  `https://shop.example.com/category-${i % 97}/product/${round}-${i}?utm_source=sitemap`;

function run(name: string, keyOf: (round: number, i: number) => string, reported = false): void {
  const table = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(MAX_LEASES)), MAX_LEASES);
  const tokens = new Array<string>(MAX_LEASES);
  let grantNs = 0n;
  let releaseNs = 0n;
  let refused = 0;
  let now = T0;
  for (let round = 0; round < ROUNDS; round++) {
    const keys = Array.from({ length: MAX_LEASES }, (_, i) => keyOf(round, i));
    const grantStart = process.hrtime.bigint();
    for (let i = 0; i < MAX_LEASES; i++) {
      const result = table.grant(keys[i]!, now, options);
      if (result.ok) tokens[i] = result.token;
      else refused++;
    }
    const releaseStart = process.hrtime.bigint();
    if (reported) {
      for (let i = 0; i < MAX_LEASES; i++) {
        if (table.beginReport(keys[i]!, tokens[i]!, caller).kind !== 'first') refused++;
        table.finishReport(keys[i]!, tokens[i]!, answer, false, now);
      }
    } else for (let i = 0; i < MAX_LEASES; i++) table.release(keys[i]!, tokens[i]!, now);
    const end = process.hrtime.bigint();
    grantNs += releaseStart - grantStart;
    releaseNs += end - releaseStart;
    now += RELEASE_GRACE_MS + 1000;
  }
  const ops = MAX_LEASES * ROUNDS;
  const perSecond = (ns: bigint): string => Math.round((ops * 1e9) / Number(ns)).toLocaleString('en-US');
  console.log(
    `${name.padEnd(8)} grants/s ${perSecond(grantNs).padStart(11)}   ${reported ? 'reports/s ' : 'releases/s'} ${perSecond(releaseNs).padStart(11)}` +
      `   refused ${refused} of ${ops}   occupancy after ${table.occupancy()}`,
  );
}

function skipRate(): void {
  const table = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(MAX_LEASES)), MAX_LEASES);
  const leased = Array.from({ length: MAX_LEASES }, (_, i) => url(0, i));
  for (const key of leased) table.grant(key, T0, options);
  const hashes = [...leased, ...Array.from({ length: MAX_LEASES }, (_, i) => url(1, i))].map(keyHash);
  let found = 0;
  const start = process.hrtime.bigint();
  for (let round = 0; round < ROUNDS; round++)
    for (const h of hashes) if (table.isLeasedHash(h.hi, h.lo, T0)) found++;
  const ns = Number(process.hrtime.bigint() - start);
  const perSecond = Math.round((hashes.length * ROUNDS * 1e9) / ns).toLocaleString('en-US');
  console.log(`skip     checks/s ${perSecond.padStart(11)}   (leased ${found / ROUNDS} of ${hashes.length})`);
}

function hashRate(): void {
  const keys = Array.from({ length: MAX_LEASES }, (_, i) => url(0, i));
  let sink = 0;
  const start = process.hrtime.bigint();
  for (let round = 0; round < ROUNDS; round++) for (const key of keys) sink ^= keyHash(key).lo;
  const ns = Number(process.hrtime.bigint() - start);
  const perSecond = Math.round((MAX_LEASES * ROUNDS * 1e9) / ns).toLocaleString('en-US');
  console.log(
    `keyHash  hashes/s ${perSecond.padStart(11)}   (${url(0, 1).length}-byte URL, sink ${sink & 1})`,
  );
}

console.log(`lease table, maxLeases ${MAX_LEASES}, ${ROUNDS} rounds, node ${process.version}`);
run('warm-up', (round, i) => url(round % 2, i));
run('cycling', (_round, i) => url(0, i));
run('fresh', (round, i) => url(round, i));
run('reported', (_round, i) => url(0, i), true);
skipRate();
hashRate();
