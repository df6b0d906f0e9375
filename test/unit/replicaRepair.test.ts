// Replica repair's pure part (util/cluster/repair.ts): digests, the buckets that differ, key lists, and
// what each node does so that every node ends on the newest version of every key.
import test from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  bucketOf,
  decodeDetails,
  differingBuckets,
  encodeDetails,
  planRepair,
  REPAIR_BUCKETS,
  REPAIR_WINDOW_MS,
  repairWindowMs,
  RepairDigest,
  type DetailEntry,
  type VersionedKey,
} from '../../util/cluster/repair.js';

const NOW = 1_800_000_000_000;
const CUTOFF = NOW - 120_000;

function digestOf(rows: ReadonlyArray<[string, number]>): RepairDigest {
  const d = new RepairDigest();
  for (const [k, v] of rows) d.add(k, v);
  return d;
}

const asPeer = (entries: readonly VersionedKey[]): Map<string, DetailEntry> =>
  decodeDetails(encodeDetails(entries))!;

test('a digest does not depend on the order rows were added, and one changed version moves only its bucket', () => {
  const rows: Array<[string, number]> = Array.from({ length: 500 }, (_, i) => [
    `https://a.example/${i}`,
    NOW - i,
  ]);
  const a = digestOf(rows);
  const b = digestOf([...rows].reverse());
  assert.deepEqual(a.words, b.words);
  assert.equal(a.rows(), 500);
  const changed = rows.map(([k, v], i): [string, number] => [k, i === 7 ? v + 0.5 : v]);
  const c = digestOf(changed);
  const diff = differingBuckets(a.words, [c.words]);
  assert.deepEqual(diff, { buckets: [bucketOf('https://a.example/7')], total: 1 });
});

test('a digest round-trips through its text, and anything else is refused', () => {
  const d = digestOf([['k', 1.5]]);
  assert.deepEqual(RepairDigest.decode(d.encode()), d.words);
  assert.equal(RepairDigest.decode(42), null);
  assert.equal(RepairDigest.decode('AAAA'), null);
  assert.equal(RepairDigest.decode(null), null);
});

test('differing buckets are the union over peers, lowest first, up to a key budget, with the full count', () => {
  const base = digestOf([]);
  const keys = Array.from({ length: 200 }, (_, i) => `k${i}`);
  const peerA = digestOf(keys.slice(0, 100).map((k) => [k, 1]));
  const peerB = digestOf(keys.slice(100).map((k) => [k, 1]));
  const all = [...new Set(keys.map(bucketOf))].sort((x, y) => x - y);
  const count = (b: number) => keys.filter((k) => bucketOf(k) === b).length;
  const r = differingBuckets(base.words, [peerA.words, peerB.words], 0, 10);
  assert.equal(r.total, all.length);
  // Lowest first while the listed buckets' keys fit the budget of 10.
  const want: number[] = [];
  let used = 0;
  for (const b of all) {
    if (want.length > 0 && used + count(b) > 10) break;
    want.push(b);
    used += count(b);
  }
  assert.deepEqual(r.buckets, want);
  assert.deepEqual(differingBuckets(base.words, [peerA.words, peerB.words]).buckets, all);
  // Another round starts at another bucket, so a budget-limited list moves on; unlimited, it is the same set.
  const later = differingBuckets(base.words, [peerA.words, peerB.words], 1_800_000_300_000, 10);
  assert.equal(later.total, all.length);
  assert.notDeepEqual(later.buckets, r.buckets);
  const whole = differingBuckets(base.words, [peerA.words, peerB.words], 1_800_000_300_000);
  assert.deepEqual(
    [...whole.buckets].sort((x, y) => x - y),
    all,
  );
  assert.ok(r.buckets.every((b) => b >= 0 && b < REPAIR_BUCKETS));
});

test('key lists round-trip, and a list of the wrong size or with a non-finite version is refused', () => {
  const e: VersionedKey[] = [
    { key: 'https://x.example/a', version: NOW - 1.25, deleted: false },
    { key: 'https://x.example/b', version: NOW - 2, deleted: true },
  ];
  const m = decodeDetails(encodeDetails(e))!;
  assert.equal(m.size, 2);
  assert.deepEqual(
    [...m.values()].map((x) => [x.version, x.deleted]),
    [
      [NOW - 1.25, false],
      [NOW - 2, true],
    ],
  );
  assert.equal(decodeDetails(Buffer.alloc(19).toString('base64')), null);
  const bad = Buffer.alloc(20);
  bad.writeDoubleLE(NaN, 8);
  assert.equal(decodeDetails(bad.toString('base64')), null);
  assert.equal(decodeDetails(7), null);
});

test('a row the peer lacks (a skipped insert) is sent again by the node that has it, and only by it', () => {
  const row = { key: 'https://x.example/new', version: CUTOFF - 5000, deleted: false };
  const holder = planRepair([row], [asPeer([])], { cutoff: CUTOFF, now: NOW });
  assert.deepEqual(holder.send, [row]);
  assert.deepEqual(holder.deleteAt, []);
  const lacking = planRepair([], [asPeer([row])], { cutoff: CUTOFF, now: NOW });
  assert.deepEqual(lacking, { send: [], deleteAt: [], tooOld: 0, recent: 0, conflicting: 0, deferred: 0 });
});

test('an older version on the peer (a skipped update) is answered by the newest holder; the stale side does nothing', () => {
  const newer = { key: 'u', version: CUTOFF - 1000, deleted: false };
  const older = { key: 'u', version: CUTOFF - 9000, deleted: false };
  assert.deepEqual(planRepair([newer], [asPeer([older])], { cutoff: CUTOFF, now: NOW }).send, [newer]);
  const stale = planRepair([older], [asPeer([newer])], { cutoff: CUTOFF, now: NOW });
  assert.deepEqual([stale.send, stale.deleteAt], [[], []]);
});

test('a row another node deleted later (a skipped delete) is deleted here at that deletion version', () => {
  const tomb = { key: 'd', version: CUTOFF - 1000, deleted: true };
  const live = { key: 'd', version: CUTOFF - 9000, deleted: false };
  const plan = planRepair([live], [asPeer([tomb])], { cutoff: CUTOFF, now: NOW });
  assert.deepEqual(plan.deleteAt, [{ key: 'd', version: tomb.version, deleted: true }]);
  assert.deepEqual(plan.send, []);
  // The deleting side has nothing to send, and a row deleted before the live one was written stays live.
  assert.deepEqual(planRepair([tomb], [asPeer([live])], { cutoff: CUTOFF, now: NOW }).send, []);
  const laterWrite = { key: 'd', version: CUTOFF - 500, deleted: false };
  assert.deepEqual(planRepair([laterWrite], [asPeer([tomb])], { cutoff: CUTOFF, now: NOW }).send, [
    laterWrite,
  ]);
});

test('differences newer than the cutoff wait, older than the window stay, and a live/deleted tie is left', () => {
  const fresh = { key: 'f', version: CUTOFF + 1, deleted: false };
  assert.deepEqual(planRepair([fresh], [asPeer([])], { cutoff: CUTOFF, now: NOW }), {
    send: [],
    deleteAt: [],
    tooOld: 0,
    recent: 1,
    conflicting: 0,
    deferred: 0,
  });
  const old = { key: 'o', version: NOW - REPAIR_WINDOW_MS - 1, deleted: false };
  assert.equal(planRepair([old], [asPeer([])], { cutoff: CUTOFF, now: NOW }).tooOld, 1);
  const v = CUTOFF - 10;
  const tie = planRepair(
    [{ key: 't', version: v, deleted: false }],
    [asPeer([{ key: 't', version: v, deleted: true }])],
    {
      cutoff: CUTOFF,
      now: NOW,
    },
  );
  assert.deepEqual([tie.send, tie.deleteAt, tie.conflicting], [[], [], 1]);
});

test('no difference where every node agrees, or where the only copies left are deletions', () => {
  const row = { key: 's', version: CUTOFF - 10, deleted: false };
  assert.deepEqual(planRepair([row], [asPeer([row]), asPeer([row])], { cutoff: CUTOFF, now: NOW }).send, []);
  const tomb = { key: 'g', version: CUTOFF - 10, deleted: true };
  const gone = planRepair([tomb], [asPeer([])], { cutoff: CUTOFF, now: NOW });
  assert.deepEqual([gone.send, gone.deleteAt, gone.recent, gone.tooOld], [[], [], 0, 0]);
});

test('one round repairs at most maxRows rows and defers the rest', () => {
  const rows = Array.from({ length: 10 }, (_, i) => ({ key: `r${i}`, version: CUTOFF - i, deleted: false }));
  const plan = planRepair(rows, [asPeer([])], { cutoff: CUTOFF, now: NOW, maxRows: 4 });
  assert.equal(plan.send.length, 4);
  assert.equal(plan.deferred, 6);
});

// Simulates rounds over up to four nodes: each node's plan is applied as Harper applies a write with a
// version (a node keeps a newer version than it is sent). After one round every node holds each key's
// newest version, live or deleted (a node that never saw a deleted key may stay without a marker).
test('one round brings every node to the newest version of every key, never to an older one', () => {
  const entry = fc.record({
    version: fc.integer({ min: 1, max: 50 }),
    deleted: fc.boolean(),
  });
  const nodeState = fc.dictionary(fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f'), entry, { maxKeys: 6 });
  fc.assert(
    fc.property(fc.array(nodeState, { minLength: 2, maxLength: 4 }), (states) => {
      const nodes = states.map((s) => new Map(Object.entries(s).map(([k, e]) => [k, { key: k, ...e }])));
      const t = (v: number) => CUTOFF - 100_000 + v * 1000;
      for (const n of nodes) for (const e of n.values()) e.version = t(e.version);
      // A key whose newest version is held live on one node and deleted on another is a conflict: skip it.
      const keys = new Set(nodes.flatMap((n) => [...n.keys()]));
      const newest = new Map<string, { version: number; deleted: boolean } | 'conflict'>();
      for (const k of keys) {
        const es = nodes.map((n) => n.get(k)).filter((e) => e !== undefined);
        const top = Math.max(...es.map((e) => e.version));
        const at = es.filter((e) => e.version === top);
        newest.set(
          k,
          at.every((e) => e.deleted === at[0]!.deleted)
            ? { version: top, deleted: at[0]!.deleted }
            : 'conflict',
        );
      }
      const plans = nodes.map((n, i) =>
        planRepair(
          [...n.values()],
          nodes.filter((_, j) => j !== i).map((p) => asPeer([...p.values()])),
          { cutoff: CUTOFF, now: NOW },
        ),
      );
      const apply = (n: Map<string, VersionedKey>, e: VersionedKey): void => {
        const cur = n.get(e.key);
        if (cur === undefined || cur.version < e.version) n.set(e.key, { ...e });
      };
      plans.forEach((p, i) => {
        for (const e of p.send) for (const n of nodes) apply(n, e);
        for (const e of p.deleteAt) apply(nodes[i]!, { key: e.key, version: e.version, deleted: true });
      });
      for (const [k, want] of newest) {
        for (const n of nodes) {
          const got = n.get(k);
          if (want === 'conflict') continue;
          if (want.deleted)
            assert.ok(got === undefined || got.deleted, `key ${k} is live on a node after its deletion`);
          else assert.deepEqual([got?.version, got?.deleted], [want.version, false], `key ${k}`);
          if (got) assert.ok(got.version <= want.version);
        }
      }
    }),
    { numRuns: 300 },
  );
});

test("the window is half Harper's audit retention, at most 3 hours, and Harper's default when unreadable", () => {
  assert.equal(repairWindowMs('3d'), REPAIR_WINDOW_MS);
  assert.equal(repairWindowMs(undefined), REPAIR_WINDOW_MS);
  assert.equal(repairWindowMs('2h'), 3_600_000);
  assert.equal(repairWindowMs('90m'), 45 * 60_000);
  assert.equal(repairWindowMs(1_200_000), 600_000);
  assert.equal(repairWindowMs('soon'), REPAIR_WINDOW_MS);
  // A shorter window leaves a younger difference alone.
  const row = { key: 'w', version: NOW - 2 * 3_600_000, deleted: false };
  assert.equal(
    planRepair([row], [asPeer([])], { cutoff: CUTOFF, now: NOW, windowMs: repairWindowMs('2h') }).tooOld,
    1,
  );
});
