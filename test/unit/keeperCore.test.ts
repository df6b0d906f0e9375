import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { hashUrl } from '../../util/keeper/urlHash.js';
import { keyHash } from '../../util/keyHash.js';
import {
  type Classify,
  type HeldClass,
  KeeperCore,
  type Mark,
  type ScheduleRow,
  type TopSkip,
} from '../../util/keeper/core.js';
import { markOf, score, type ScoreOptions } from '../../util/keeper/score.js';
import { sectionQuotas } from '../../util/keeper/sections.js';
import { PARK_MAX_MS } from '../../util/keeper/selection.js';
import { MINUTE_MS, minuteOf } from '../../util/time.js';
import { heldRow } from '../fakeSchedule.js';

const HOUR = 60 * MINUTE_MS;
const DAY = 24 * HOUR;
const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);
const OPTIONS: ScoreOptions = { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 };

// /blog/ has its own interval, /news/ is a route without one, anything else is unrouted.
const classify: Classify = (url, own) => {
  const path = new URL(url).pathname;
  if (path.startsWith('/blog/')) return { route: 'blog', cadenceMs: HOUR };
  if (path.startsWith('/news/')) return { route: 'news', cadenceMs: own ?? DAY };
  return { route: 'unrouted', cadenceMs: own ?? DAY };
};

const row = heldRow;

const keeper = (): KeeperCore => new KeeperCore({ classify, score: OPTIONS });

/** Every key the core holds, through its sliced walk. */
function heldKeys(core: KeeperCore): Set<string> {
  const out = new Set<string>();
  const walk = core.keyWalk();
  for (let keys = walk.next(500); keys !== null; keys = walk.next(500)) for (const k of keys) out.add(k);
  return out;
}

/** A row as a publish walk hands it over, collected by a test. */
interface Walked {
  key: string;
  score: number;
  dueMs: number;
  fromSitemap: boolean;
  verified: boolean;
  route: string;
  mark: Mark;
}

function walked(key: string, score: number, dueMs: number, held: HeldClass): Walked {
  const { fromSitemap, verified, route, mark } = held;
  return { key, score, dueMs, fromSitemap, verified, route, mark };
}

/**
 * What one publish writes, collected from the walk the keeper runs (KeeperCore.publishWalk): the top
 * rows best first, then the section extras, with what the walk reports.
 */
function published(core: KeeperCore, k: number, extraBudget: number, now: number, skip?: KeySkip) {
  const entries: Walked[] = [];
  const extras: Walked[] = [];
  const walk = core.selection.publishWalk(
    k,
    extraBudget,
    now,
    {
      top: (slot, s, dueMs, held) => entries.push(walked(core.keyAt(slot), s, dueMs, held)),
      extra: (slot, s, dueMs, held) => extras.push(walked(core.keyAt(slot), s, dueMs, held)),
    },
    bySlot(core, skip),
  );
  return { entries, extras, ...walk };
}

/** A skip as the tests write it, by the row's key (the walk hands it the row's slot). */
type KeySkip = (key: string, leaseHashHi: number, leaseHashLo: number) => boolean | number;

function bySlot(core: KeeperCore, skip?: KeySkip): TopSkip | undefined {
  return skip && ((slot, hi, lo) => skip(core.keyAt(slot), hi, lo));
}

/** The best `k` due rows alone: a publish walk with no room for section extras. */
function topOf(core: KeeperCore, k: number, now: number, skip?: KeySkip) {
  const { entries, extras, complete, skipped } = published(core, k, 0, now, skip);
  assert.deepEqual(extras, [], 'no extras without an extra budget');
  return { entries, complete, skipped };
}

/** A publish walk of the best `k` due rows (no extras) that hands each row's key to `visit`. */
function topWalk(core: KeeperCore, k: number, now: number, visit: (key: string) => void, skip?: KeySkip) {
  return core.selection.publishWalk(
    k,
    0,
    now,
    { top: (slot) => visit(core.keyAt(slot)), extra: () => assert.fail('no extras without an extra budget') },
    bySlot(core, skip),
  );
}

function expectedScore(r: ScheduleRow, now: number, classifier: Classify = classify): number {
  const own = Number.isFinite(r.effectiveInterval) ? r.effectiveInterval : null;
  return score(
    {
      dueMs: minuteOf(r.nextRenderTime) * MINUTE_MS,
      cadenceMs: classifier(r.cacheKey, own).cadenceMs,
      fromSitemap: r.fromSitemap,
      mark: markOf(r.urgentAt, r.changedAt),
    },
    now,
    OPTIONS,
  );
}

describe('score', () => {
  const base = { dueMs: NOW - HOUR, cadenceMs: HOUR, fromSitemap: false, mark: 'none' as const };

  it('is lateness in cadences, and zero before the row is due', () => {
    assert.equal(score(base, NOW, OPTIONS), 1);
    assert.equal(score({ ...base, dueMs: NOW + HOUR }, NOW, OPTIONS), 0);
  });

  it('multiplies a sitemap row by the boost', () => {
    assert.equal(score({ ...base, fromSitemap: true }, NOW, OPTIONS), 2);
  });

  it('adds one head start scaled by max(1, boost), urgent winning over changed, never summed', () => {
    const opts = { sitemapBoost: 3, urgentHeadStart: 5, changedHeadStart: 2 };
    assert.equal(score({ ...base, mark: 'urgent' }, NOW, opts), 1 + 15);
    assert.equal(score({ ...base, mark: 'changed', fromSitemap: true }, NOW, opts), 3 + 6);
    assert.equal(score({ ...base, mark: 'urgent' }, NOW, { ...opts, sitemapBoost: 0.5 }), 1 + 5);
    assert.equal(markOf(1, 2), 'urgent');
    assert.equal(markOf(null, 2), 'changed');
    assert.equal(markOf(null, null), 'none');
  });

  it('scores a non-finite due or now as 0 and degrades a non-positive cadence to raw lateness', () => {
    assert.equal(score({ ...base, dueMs: NaN, mark: 'urgent' }, NOW, OPTIONS), 0);
    assert.equal(score(base, Infinity, OPTIONS), 0);
    assert.equal(score({ ...base, cadenceMs: 0 }, NOW, OPTIONS), HOUR);
    assert.equal(score({ ...base, cadenceMs: -5 }, NOW, OPTIONS), HOUR);
  });
});

// --- the property: a publish's top equals "score every due row at minute resolution and sort" ---

const KEY_POOL = 3000;
const url = (i: number): string =>
  ['https://a.example/blog/', 'https://a.example/news/', 'https://b.example/p/'][i % 3]! + `page-${i}?x=1`;

// Weighted towards a few classes and a few minutes, so buckets hold dozens of rows and rows leave and
// re-enter the same bucket: the paths where a stale copy could be listed twice or not at all.
const rowArb = (i: number): fc.Arbitrary<ScheduleRow> =>
  fc.record({
    cacheKey: fc.constant(url(i)),
    nextRenderTime: fc.oneof(
      { weight: 6, arbitrary: fc.integer({ min: -3 * MINUTE_MS, max: 3 * MINUTE_MS }).map((d) => NOW + d) },
      { weight: 2, arbitrary: fc.integer({ min: -40 * MINUTE_MS, max: 40 * MINUTE_MS }).map((d) => NOW + d) },
      { weight: 1, arbitrary: fc.integer({ min: -3 * DAY, max: 3 * DAY }).map((d) => NOW + d) },
    ),
    fromSitemap: fc.boolean(),
    effectiveInterval: fc.oneof(
      { weight: 6, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.constantFrom(MINUTE_MS, 5 * MINUTE_MS, HOUR, DAY, 0, -5) },
    ),
    verified: fc.oneof(
      { weight: 5, arbitrary: fc.constant(true) },
      { weight: 1, arbitrary: fc.constant(false) },
    ),
    urgentAt: fc.option(fc.constant(NOW - 1), { freq: 10 }),
    changedAt: fc.option(fc.constant(NOW - 2), { freq: 8 }),
  });

type Op = { key: number; row: ScheduleRow | null };
const opArb: fc.Arbitrary<Op> = fc
  .integer({ min: 0, max: KEY_POOL - 1 })
  .chain((key) => fc.record({ key: fc.constant(key), row: fc.option(rowArb(key), { freq: 12 }) }));

function replay(ops: readonly Op[]): { core: KeeperCore; model: Map<string, ScheduleRow> } {
  const core = keeper();
  const model = new Map<string, ScheduleRow>();
  for (const op of ops) {
    // A fresh string each time, as a decoded event would carry.
    const key = (' ' + url(op.key)).slice(1);
    core.apply(key, op.row, NOW);
    if (op.row === null) model.delete(key);
    else model.set(key, op.row);
  }
  return { core, model };
}

describe("KeeperCore.publishWalk's top", () => {
  it('equals scoring every due row at minute resolution and sorting, with skip and complete', () => {
    fc.assert(
      fc.property(
        fc.array(opArb, { minLength: 1000, maxLength: 6000, size: 'max' }),
        fc.integer({ min: -30 * MINUTE_MS, max: 30 * MINUTE_MS }),
        fc.integer({ min: 0, max: 1200 }),
        fc.integer({ min: 0, max: 6 }),
        (ops, shift, k, skipEvery) => {
          const { core, model } = replay(ops);
          const now = NOW + shift;
          const skipped = (key: string): boolean => skipEvery > 0 && key.length % 7 === skipEvery;
          const result = topOf(core, k, now, skipped);

          const due = [...model.values()].filter((r) => minuteOf(r.nextRenderTime) * MINUTE_MS <= now);
          const eligible = due.filter((r) => !skipped(r.cacheKey));
          const expected = eligible.map((r) => expectedScore(r, now)).sort((a, b) => b - a);
          assert.deepEqual(
            result.entries.map((e) => e.score),
            expected.slice(0, k),
          );
          assert.equal(result.complete, eligible.length <= k);
          if (result.complete) assert.equal(result.skipped, due.length - eligible.length);
          else assert.ok(result.skipped <= due.length - eligible.length);
          const seen = new Set<string>();
          for (const entry of result.entries) {
            const r = model.get(entry.key);
            assert.ok(r !== undefined, `returned a key not held: ${entry.key}`);
            assert.ok(!seen.has(entry.key), `returned twice: ${entry.key}`);
            seen.add(entry.key);
            assert.ok(!skipped(entry.key));
            assert.equal(entry.score, expectedScore(r, now));
            assert.equal(entry.dueMs, minuteOf(r.nextRenderTime) * MINUTE_MS);
            assert.equal(entry.fromSitemap, r.fromSitemap);
            assert.equal(entry.verified, r.verified);
            assert.equal(entry.mark, markOf(r.urgentAt, r.changedAt));
            assert.equal(entry.route, classify(r.cacheKey, null).route);
          }
          assert.equal(core.size, model.size);
        },
      ),
      { numRuns: 30 },
    );
  });

  it('holds what apply would store, and summarises due rows like a scan of the model', () => {
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 200, maxLength: 3000, size: 'max' }), (ops) => {
        const { core, model } = replay(ops);
        for (const [key, r] of model) assert.ok(core.matches(key, r), `mismatch for ${key}`);
        assert.deepEqual(heldKeys(core), new Set(model.keys()));
        const summary = core.dueSummary(NOW);
        const due = [...model.values()].filter((r) => minuteOf(r.nextRenderTime) * MINUTE_MS <= NOW);
        assert.equal(summary.due, due.length);
        assert.equal(summary.dueVerified, due.filter((r) => r.verified).length);
        for (const [queue, counts] of summary.byQueue) {
          const inQueue = due.filter((r) => classify(r.cacheKey, null).route === queue);
          assert.equal(counts.due, inQueue.length);
          const verified = inQueue.filter((r) => r.verified);
          assert.equal(counts.dueVerified, verified.length);
          const oldest = Math.min(...verified.map((r) => minuteOf(r.nextRenderTime) * MINUTE_MS));
          assert.equal(counts.oldestVerifiedDue?.dueMs ?? Infinity, oldest);
          if (counts.oldestVerifiedDue !== null) {
            assert.equal(model.get(counts.oldestVerifiedDue.key)?.verified, true);
          }
        }
        // Reclassified under other routes and cadences, every row is held as that config would file it.
        const regrouped: Classify = (u, own) => ({
          route: u.includes('/news/') ? 'news' : 'rest',
          cadenceMs: u.includes('/blog/') ? 7 * MINUTE_MS : (own ?? 2 * HOUR),
        });
        core.reclassify(regrouped, OPTIONS);
        for (const [key, r] of model) assert.ok(core.matches(key, r), `mismatch after reclassify for ${key}`);
        assert.equal(core.size, model.size);
        const after = topOf(core, 500, NOW).entries.map((e) => e.score);
        const expected = due.map((r) => expectedScore(r, NOW, regrouped)).sort((a, b) => b - a);
        assert.deepEqual(after, expected.slice(0, 500));
      }),
      { numRuns: 40 },
    );
  });

  it('does not let a skipped row cost a place', () => {
    const core = keeper();
    for (let i = 0; i < 10; i++)
      core.apply(`https://x.example/p/${i}`, row(`https://x.example/p/${i}`, NOW - i * MINUTE_MS), NOW);
    const leased = new Set(['https://x.example/p/9', 'https://x.example/p/8']);
    const result = topOf(core, 3, NOW, (key) => leased.has(key));
    assert.deepEqual(
      result.entries.map((e) => e.key),
      ['https://x.example/p/7', 'https://x.example/p/6', 'https://x.example/p/5'],
    );
    assert.equal(result.skipped, 2);
    assert.equal(result.complete, false);
  });

  it("hands the skip each row's keyHash as the lease table computes it, through inserts, moves and deletes", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            n: fc.integer({ min: 0, max: 60 }),
            // A few minutes only, so buckets hold many rows and moves and deletes shift rows inside them.
            minutesAgo: fc.integer({ min: -1, max: 3 }),
            remove: fc.boolean(),
          }),
          { minLength: 1, maxLength: 300, size: 'max' },
        ),
        (ops) => {
          const core = keeper();
          for (const op of ops) {
            const url = `https://x.example/${op.n % 3 === 0 ? 'blog' : 'p'}/é${op.n}`;
            core.apply(url, op.remove ? null : row(url, NOW - op.minutesAgo * MINUTE_MS), NOW);
          }
          let seen = 0;
          topOf(core, 10_000, NOW, (key, hi, lo) => {
            const want = keyHash(key);
            assert.deepEqual({ hi, lo }, { hi: want.hi, lo: want.lo }, key);
            seen++;
            return false;
          });
          assert.equal(seen, core.dueSummary(NOW).due);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('is complete when the rows left over are all skipped, and incomplete when one is not', () => {
    const core = keeper();
    for (const i of [1, 2, 3])
      core.apply(`https://x.example/p/${i}`, row(`https://x.example/p/${i}`, NOW - i * HOUR), NOW);
    assert.equal(topOf(core, 2, NOW, (key) => key.endsWith('/1')).complete, true);
    assert.equal(topOf(core, 2, NOW).complete, false);
    assert.equal(topOf(core, 3, NOW).complete, true);
    assert.deepEqual(topOf(core, 0, NOW - 5 * DAY), { entries: [], complete: true, skipped: 0 });
    assert.equal(topOf(core, 0, NOW).complete, false);
  });

  it('leaves rows that are not yet due out, counting a row due at the start of the current minute', () => {
    const core = keeper();
    core.apply('https://x.example/p/now', row('https://x.example/p/now', NOW + 59_000), NOW);
    core.apply('https://x.example/p/later', row('https://x.example/p/later', NOW + MINUTE_MS), NOW);
    assert.deepEqual(
      topOf(core, 10, NOW).entries.map((e) => [e.key, e.dueMs, e.score]),
      [['https://x.example/p/now', NOW, 0]],
    );
  });

  it('lists a row once after it leaves a full bucket and comes back to it', () => {
    const core = keeper();
    const keys = Array.from({ length: 200 }, (_, i) => `https://x.example/p/${i}`);
    for (const key of keys) core.apply(key, row(key, NOW - HOUR), NOW);
    // Move rows out of the middle (left behind as stale copies), then back into the same minute.
    for (const key of keys.slice(50, 150)) core.apply(key, row(key, NOW + HOUR), NOW);
    for (const key of keys.slice(60, 70)) core.apply(key, row(key, NOW - HOUR), NOW);
    const result = topOf(core, 1000, NOW);
    assert.equal(result.entries.length, 110);
    assert.equal(new Set(result.entries.map((e) => e.key)).size, 110);
  });
});

describe('KeeperCore parks leased rows', () => {
  const url = (n: number) => `https://x.example/${n % 3 === 0 ? 'blog' : 'p'}/${n}`;

  it('walks exactly as a walk that asks the lease table for every row, asking less often', () => {
    // Two cores fed the same rows: one walked with a skip that answers true (no park), one with a skip
    // that answers the lease's end (parks). Leases end at their end, or early together with a result
    // (a change to the row: moved to a later minute, or rewritten in place with the same held fields).
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({
              kind: fc.constant('file' as const),
              n: fc.nat(12),
              minutesAgo: fc.integer({ min: -1, max: 3 }),
            }),
            fc.record({
              kind: fc.constant('lease' as const),
              n: fc.nat(12),
              forMs: fc.integer({ min: 1, max: 90_000 }),
            }),
            fc.record({ kind: fc.constant('result' as const), n: fc.nat(12), inPlace: fc.boolean() }),
            fc.record({ kind: fc.constant('remove' as const), n: fc.nat(12) }),
            fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 1, max: 40_000 }) }),
            fc.record({ kind: fc.constant('walk' as const), k: fc.integer({ min: 0, max: 50 }) }),
          ),
          { minLength: 1, maxLength: 200, size: 'max' },
        ),
        (ops) => {
          const asking = keeper();
          const parking = keeper();
          const rows = new Map<string, ScheduleRow>();
          const leaseEnd = new Map<string, number>();
          let t = NOW;
          let asked = 0;
          let askedParking = 0;
          const both = (key: string, r: ScheduleRow | null) => {
            asking.apply(key, r, t);
            parking.apply(key, r, t);
            if (r === null) rows.delete(key);
            else rows.set(key, r);
          };
          const walk = (k: number) => {
            const plain: string[] = [];
            const parked: string[] = [];
            const a = topWalk(
              asking,
              k,
              t,
              (key) => plain.push(key),
              (key) => {
                asked++;
                return (leaseEnd.get(key) ?? 0) > t;
              },
            );
            const b = topWalk(
              parking,
              k,
              t,
              (key) => parked.push(key),
              (key) => {
                askedParking++;
                const end = leaseEnd.get(key) ?? 0;
                return end > t ? end : 0;
              },
            );
            assert.deepEqual(parked, plain);
            assert.deepEqual([b.complete, b.skipped], [a.complete, a.skipped]);
          };
          for (const op of ops) {
            if (op.kind === 'file') both(url(op.n), row(url(op.n), t - op.minutesAgo * MINUTE_MS));
            else if (op.kind === 'lease') {
              // A grant only finds a key no lease blocks (a live lease never gets a new end).
              if (rows.has(url(op.n)) && !((leaseEnd.get(url(op.n)) ?? 0) > t))
                leaseEnd.set(url(op.n), t + op.forMs);
            } else if (op.kind === 'result') {
              const held = rows.get(url(op.n));
              if (held === undefined) continue;
              leaseEnd.delete(url(op.n));
              both(url(op.n), op.inPlace ? { ...held } : { ...held, nextRenderTime: t + HOUR });
            } else if (op.kind === 'remove') {
              leaseEnd.delete(url(op.n));
              both(url(op.n), null);
            } else if (op.kind === 'advance') t += op.ms;
            else walk(op.k);
          }
          walk(1_000);
          assert.ok(askedParking <= asked, `${askedParking} > ${asked}`);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('passes a parked row without asking until its lease ends, then asks again', () => {
    const core = keeper();
    for (let i = 0; i < 5; i++) core.apply(url(i), row(url(i), NOW - MINUTE_MS), NOW);
    const end = NOW + 20_000;
    const asked: string[] = [];
    const skip = (key: string) => {
      asked.push(key);
      return key === url(2) ? end : 0;
    };
    assert.equal(topWalk(core, 10, NOW, () => {}, skip).skipped, 1);
    assert.equal(asked.length, 5);
    asked.length = 0;
    assert.equal(topWalk(core, 10, NOW + 19_000, () => {}, skip).skipped, 1);
    assert.ok(!asked.includes(url(2)), 'a parked row is passed without asking');
    asked.length = 0;
    topWalk(core, 10, end, () => {}, skip);
    assert.ok(asked.includes(url(2)), 'at its end the row is asked about again');
  });

  it('keeps a park with its row when a delete moves the row within its bucket, and drops it on a change', () => {
    const core = keeper();
    for (let i = 1; i <= 8; i++) core.apply(url(i), row(url(i), NOW - MINUTE_MS), NOW);
    const asked: string[] = [];
    const skip = (key: string) => {
      asked.push(key);
      return key === url(8) ? NOW + MINUTE_MS : 0;
    };
    topWalk(core, 20, NOW, () => {}, skip);
    core.apply(url(1), null, NOW); // the bucket's last row (url 8's neighbour or itself) fills the hole
    asked.length = 0;
    assert.equal(topWalk(core, 20, NOW + 1_000, () => {}, skip).skipped, 1);
    assert.ok(!asked.includes(url(8)), 'still parked after the delete moved rows');
    core.apply(url(8), row(url(8), NOW - MINUTE_MS), NOW + 1_000); // same bucket: a result in place
    asked.length = 0;
    topWalk(core, 20, NOW + 2_000, () => {}, skip);
    assert.ok(asked.includes(url(8)), 'a change to the row clears its park');
  });

  it('gives a row stored into a freed slot no park of the row that left it', () => {
    const core = keeper();
    for (let i = 1; i <= 3; i++) core.apply(url(i), row(url(i), NOW - MINUTE_MS), NOW);
    const leased = new Set([url(1), url(2), url(3)]);
    const skip = (key: string) => (leased.has(key) ? NOW + MINUTE_MS : 0);
    assert.equal(topWalk(core, 10, NOW, () => {}, skip).skipped, 3);
    // Each leaves its slot (deleted, or moved on by a result); new free rows take the slots.
    core.apply(url(3), null, NOW);
    core.apply(url(2), row(url(2), NOW + HOUR), NOW);
    for (const n of [4, 5]) core.apply(url(n), row(url(n), NOW - MINUTE_MS), NOW);
    const taken: string[] = [];
    topWalk(core, 10, NOW + 1_000, (key) => taken.push(key), skip);
    assert.deepEqual(taken.sort(), [url(4), url(5)].sort());
  });

  it('parks nothing and skips only what the skip says under a clock before the park epoch', () => {
    const core = keeper();
    const early = 3 * DAY; // a fake clock near 1970
    for (let i = 1; i <= 3; i++) core.apply(url(i), row(url(i), early - MINUTE_MS), early);
    const skip = (key: string) => (key === url(2) ? early + MINUTE_MS : 0);
    for (const at of [early, early + 1_000]) {
      const taken: string[] = [];
      topWalk(core, 10, at, (key) => taken.push(key), skip);
      assert.deepEqual(taken.sort(), [url(1), url(3)].sort());
    }
  });

  it('asks again after PARK_MAX_MS however long the lease, so a lease given back early is offered within it', () => {
    const core = keeper();
    core.apply(url(1), row(url(1), NOW - MINUTE_MS), NOW);
    let leased = true;
    const skip = () => (leased ? NOW + 10 * MINUTE_MS : 0);
    assert.equal(topWalk(core, 5, NOW, () => {}, skip).skipped, 1);
    leased = false; // given back without any change to the row
    assert.equal(topWalk(core, 5, NOW + PARK_MAX_MS - 1_000, () => {}, skip).skipped, 1);
    const taken: string[] = [];
    topWalk(core, 5, NOW + PARK_MAX_MS, (key) => taken.push(key), skip);
    assert.deepEqual(taken, [url(1)]);
  });
});

describe('KeeperCore storage', () => {
  it('keeps a row findable when it is swapped into the place of a deleted row that shares its probe run', () => {
    // Two URLs with the same probe start in the first 1024-entry table and the same 4-bit tag. B is
    // filed after A into the same bucket, so deleting A moves B into A's place. If B's table entry were
    // looked up after A's slot already held B's URL, A's entry (met first on the probe) would be
    // rewritten instead of B's, and B would point at a freed slot. This test fails without that order.
    const seed = 0x5eed;
    const byProbe = new Map<number, string>();
    let pair: [string, string] | undefined;
    for (let i = 0; pair === undefined; i++) {
      const u = `https://x.example/p/${i}`;
      const h = hashUrl(u, seed);
      const probe = ((h >>> 28) << 10) | (h & 1023);
      const earlier = byProbe.get(probe);
      if (earlier !== undefined) pair = [earlier, u];
      else byProbe.set(probe, u);
    }
    const [a, b] = pair;
    const core = new KeeperCore({ classify, score: OPTIONS, hashSeed: seed });
    core.apply(a, row(a, NOW - HOUR), NOW);
    core.apply(b, row(b, NOW - HOUR), NOW);
    core.apply(a, null, NOW);
    assert.equal(core.has(b), true);
    assert.equal(core.heldValue(b)?.nextRenderTime, NOW - HOUR);
    assert.deepEqual(
      topOf(core, 10, NOW).entries.map((e) => e.key),
      [b],
    );
    core.apply(b, row(b, NOW + HOUR), NOW);
    assert.equal(core.heldValue(b)?.nextRenderTime, NOW + HOUR);
    assert.equal(core.has(a), false);
  });

  it('sweeps and cuts drained minutes without losing or repeating a row', () => {
    const core = keeper();
    const key = (i: number): string => `https://x.example/p/${i}`;
    // 200 rows, one per minute, all in one class and all due.
    for (let i = 0; i < 200; i++) core.apply(key(i), row(key(i), NOW - (200 - i) * MINUTE_MS), NOW);
    // Drain the 80 oldest minutes: a leading run of empty buckets, cut on the next read.
    for (let i = 0; i < 80; i++) core.apply(key(i), null, NOW);
    let top = topOf(core, 1000, NOW).entries.map((e) => e.key);
    assert.deepEqual(
      top,
      Array.from({ length: 120 }, (_, i) => key(80 + i)),
    );
    // Drain most of the rest from the middle (a sweep once empties outnumber filled), refill some.
    for (let i = 90; i < 190; i++) core.apply(key(i), null, NOW);
    for (let i = 0; i < 10; i++) core.apply(key(i), row(key(i), NOW - (200 - i) * MINUTE_MS), NOW);
    top = topOf(core, 1000, NOW).entries.map((e) => e.key);
    const ten = (from: number): number[] => Array.from({ length: 10 }, (_, i) => from + i);
    assert.deepEqual(top, [...ten(0), ...ten(80), ...ten(190)].map(key));
    assert.equal(core.dueSummary(NOW).due, 30);
    assert.equal(core.state(NOW).now.due, 30);
    assert.equal(core.oldestDue('unrouted', NOW)?.key, key(0));
  });

  it('walks every held key in slices while the walker deletes each one it is handed', () => {
    const core = keeper();
    for (let i = 0; i < 3000; i++)
      core.apply(`https://x.example/p/${i}`, row(`https://x.example/p/${i}`, NOW + i * 1000), NOW);
    let seen = 0;
    const walk = core.keyWalk();
    for (let keys = walk.next(100); keys !== null; keys = walk.next(100))
      for (const key of keys) {
        seen++;
        core.apply(key, null, NOW);
      }
    assert.equal(seen, 3000);
    assert.equal(core.size, 0);
    assert.equal(core.classCount, 0);
    assert.deepEqual(topOf(core, 10, NOW + DAY), { entries: [], complete: true, skipped: 0 });
  });
});

describe('KeeperCore.apply', () => {
  it('is idempotent: the same row twice changes nothing and leaves the version alone', () => {
    const core = keeper();
    const r = row('https://x.example/p/1', NOW - 30_000, { urgentAt: NOW });
    assert.equal(core.apply('https://x.example/p/1', r, NOW), true);
    const version = core.version;
    assert.equal(core.apply('https://x.example/p/1', { ...r }, NOW + HOUR), false);
    assert.equal(
      core.apply(('https://x.example/p/' + '1').slice(0), { ...r, nextRenderTime: NOW - 1 }, NOW),
      false,
    );
    assert.equal(core.version, version);
    assert.equal(core.apply('https://x.example/p/2', null, NOW), false);
    assert.equal(core.version, version);
    assert.equal(core.apply('https://x.example/p/1', null, NOW), true);
    assert.equal(core.version, version + 1);
    assert.equal(core.size, 0);
    assert.equal(core.classCount, 0);
  });

  it('bumps the version when only the class changes', () => {
    const core = keeper();
    core.apply('https://x.example/p/1', row('https://x.example/p/1', NOW), NOW);
    const version = core.version;
    assert.equal(
      core.apply('https://x.example/p/1', row('https://x.example/p/1', NOW, { verified: false }), NOW),
      true,
    );
    assert.equal(core.version, version + 1);
    assert.equal(core.describe('https://x.example/p/1', NOW)?.verified, false);
  });

  it('holds a row without a finite due time as due in the minute of its arrival', () => {
    const core = keeper();
    core.apply('https://x.example/p/1', row('https://x.example/p/1', NaN), NOW + 30_000);
    assert.equal(core.heldValue('https://x.example/p/1')?.nextRenderTime, NOW);
    assert.equal(core.matches('https://x.example/p/1', row('https://x.example/p/1', NaN)), true);
  });
});

describe('KeeperCore.apply with only the held fields', () => {
  it('takes the held fields without a cacheKey, from one object reused for every row', () => {
    const fresh = keeper();
    const reused = keeper();
    const fields = {
      nextRenderTime: 0,
      fromSitemap: false,
      effectiveInterval: null as number | null,
      verified: true,
      urgentAt: null as number | null,
      changedAt: null as number | null,
    };
    const keys: string[] = [];
    for (let i = 0; i < 200; i++) {
      const key = `https://x.example/${['blog', 'news', 'p'][i % 3]}/${i}`;
      keys.push(key);
      const r = row(key, NOW + (i % 7) * HOUR - 3 * HOUR, {
        fromSitemap: i % 2 === 0,
        effectiveInterval: i % 5 === 0 ? 7 * DAY : null,
        verified: i % 4 !== 0,
        urgentAt: i % 11 === 0 ? NOW : null,
        changedAt: i % 13 === 0 ? NOW : null,
      });
      fresh.apply(key, r, NOW);
      Object.assign(fields, { ...r, cacheKey: undefined });
      delete (fields as Record<string, unknown>).cacheKey;
      reused.apply(key, fields, NOW);
    }
    // The object now holds the last row; every other key still holds its own.
    fields.nextRenderTime = NOW + 40 * DAY;
    fields.urgentAt = NOW;
    for (const key of keys) {
      assert.deepEqual(reused.heldValue(key), fresh.heldValue(key), key);
      assert.deepEqual(reused.describe(key, NOW), fresh.describe(key, NOW), key);
    }
    assert.deepEqual(
      topOf(reused, 50, NOW).entries.map((e) => e.key),
      topOf(fresh, 50, NOW).entries.map((e) => e.key),
    );
  });
});

describe('KeeperCore.describe, heldValue and matches', () => {
  it('describes a held row in table terms with its score', () => {
    const core = keeper();
    const key = 'https://x.example/news/a';
    core.apply(
      key,
      row(key, NOW - 2 * HOUR + 10, { fromSitemap: true, effectiveInterval: 4 * HOUR, changedAt: 1 }),
      NOW,
    );
    assert.deepEqual(core.describe(key, NOW), {
      route: 'news',
      cadenceMs: 4 * HOUR,
      fromSitemap: true,
      verified: true,
      mark: 'changed',
      dueMs: NOW - 2 * HOUR,
      score: 0.5 * 2 + 1 * 2,
      due: true,
    });
    assert.deepEqual(core.heldValue(key), {
      nextRenderTime: NOW - 2 * HOUR,
      route: 'news',
      cadenceMs: 4 * HOUR,
      effectiveInterval: 4 * HOUR,
      fromSitemap: true,
      verified: true,
      mark: 'changed',
    });
    assert.equal(core.describe('https://x.example/none', NOW), null);
    assert.equal(core.heldValue('https://x.example/none'), null);
  });

  it('matches only the row apply would store, and null only when nothing is held', () => {
    const core = keeper();
    const key = 'https://x.example/news/a';
    const held = row(key, NOW, { effectiveInterval: HOUR });
    core.apply(key, held, NOW);
    assert.equal(core.matches(key, { ...held, nextRenderTime: NOW + 59_999 }), true);
    assert.equal(core.matches(key, { ...held, nextRenderTime: NOW + MINUTE_MS }), false);
    assert.equal(core.matches(key, { ...held, effectiveInterval: null }), false);
    assert.equal(core.matches(key, { ...held, urgentAt: NOW }), false);
    assert.equal(core.matches(key, { ...held, fromSitemap: true }), false);
    assert.equal(core.matches(key, null), false);
    assert.equal(core.matches('https://x.example/other', null), true);
    assert.equal(core.matches('https://x.example/other', held), false);
  });
});

describe('KeeperCore.reclassify', () => {
  it('keeps every row and its minute while moving rows to the classes the new config gives', () => {
    const core = keeper();
    const blog = 'https://x.example/blog/a';
    const own = 'https://x.example/blog/own';
    const plain = 'https://x.example/p/b';
    core.apply(blog, row(blog, NOW - HOUR), NOW);
    core.apply(own, row(own, NOW - HOUR, { effectiveInterval: 4 * HOUR }), NOW);
    core.apply(plain, row(plain, NOW - HOUR, { fromSitemap: true }), NOW);
    const version = core.version;
    // New config: /blog/ loses its interval (rows fall back to their own, else the default 2 h), and
    // /p/ becomes its own route.
    const next: Classify = (u, ownInterval) => {
      const path = new URL(u).pathname;
      if (path.startsWith('/blog/')) return { route: 'blog', cadenceMs: ownInterval ?? 2 * HOUR };
      if (path.startsWith('/p/')) return { route: 'pages', cadenceMs: 30 * MINUTE_MS };
      return { route: 'unrouted', cadenceMs: ownInterval ?? 2 * HOUR };
    };
    core.reclassify(next, { ...OPTIONS, sitemapBoost: 3 });
    assert.ok(core.version > version);
    assert.equal(core.size, 3);
    assert.deepEqual(
      [blog, own, plain].map((k) => [
        core.describe(k, NOW)?.route,
        core.describe(k, NOW)?.cadenceMs,
        core.describe(k, NOW)?.dueMs,
      ]),
      [
        ['blog', 2 * HOUR, NOW - HOUR],
        ['blog', 4 * HOUR, NOW - HOUR],
        ['pages', 30 * MINUTE_MS, NOW - HOUR],
      ],
    );
    assert.deepEqual(
      topOf(core, 10, NOW).entries.map((e) => [e.key, e.score]),
      [
        [plain, 2 * 3],
        [blog, 0.5],
        [own, 0.25],
      ],
    );
    assert.equal(core.matches(own, row(own, NOW - HOUR, { effectiveInterval: 4 * HOUR })), true);
    assert.equal(core.dueSummary(NOW).due, 3);
    assert.equal(core.state(NOW).now.due, 3);
  });
});

describe('KeeperCore ownership and queues', () => {
  it('drops the rows a predicate names and keeps the rest', () => {
    const core = keeper();
    for (let i = 0; i < 20; i++)
      core.apply(`https://x.example/p/${i}`, row(`https://x.example/p/${i}`, NOW - i * MINUTE_MS), NOW);
    const version = core.version;
    assert.equal(
      core.dropWhere((key) => Number(key.split('/').pop()) % 2 === 0),
      10,
    );
    assert.equal(core.size, 10);
    assert.ok(core.version > version);
    assert.ok(topOf(core, 100, NOW).entries.every((e) => Number(e.key.split('/').pop()) % 2 === 1));
    assert.equal(core.dueSummary(NOW).due, 10);
    assert.equal(
      core.dropWhere(() => false),
      0,
    );
  });

  it('finds the oldest due row of a queue, verified only and past the skip predicate', () => {
    const core = keeper();
    core.apply(
      'https://x.example/blog/old',
      row('https://x.example/blog/old', NOW - 3 * HOUR, { verified: false }),
      NOW,
    );
    core.apply(
      'https://x.example/blog/mid',
      row('https://x.example/blog/mid', NOW - 2 * HOUR, { fromSitemap: true }),
      NOW,
    );
    core.apply('https://x.example/blog/new', row('https://x.example/blog/new', NOW - HOUR), NOW);
    core.apply('https://x.example/blog/future', row('https://x.example/blog/future', NOW + HOUR), NOW);
    core.apply('https://x.example/p/other', row('https://x.example/p/other', NOW - 9 * HOUR), NOW);
    assert.equal(core.oldestDue('blog', NOW)?.key, 'https://x.example/blog/old');
    assert.deepEqual(core.oldestDue('blog', NOW, { verifiedOnly: true }), {
      key: 'https://x.example/blog/mid',
      dueMs: NOW - 2 * HOUR,
      fromSitemap: true,
      verified: true,
      mark: 'none',
    });
    const skip = (key: string): boolean => key.endsWith('/mid');
    assert.equal(
      core.oldestDue('blog', NOW, { verifiedOnly: true, skip })?.key,
      'https://x.example/blog/new',
    );
    assert.equal(core.oldestDue('blog', NOW - 2.5 * HOUR, { verifiedOnly: true }), null);
    assert.equal(core.oldestDue('nope', NOW), null);
    const summary = core.dueSummary(NOW);
    assert.deepEqual(summary.byQueue.get('blog'), {
      due: 3,
      dueVerified: 2,
      oldestVerifiedDue: {
        key: 'https://x.example/blog/mid',
        dueMs: NOW - 2 * HOUR,
        fromSitemap: true,
        verified: true,
        mark: 'none',
      },
    });
    assert.equal(summary.due, 4);
    assert.equal(summary.dueVerified, 3);
  });
});

describe('keys that cannot round-trip through UTF-8', () => {
  it('a row whose key holds a lone surrogate is never held, so it can never top a published set', () => {
    const k = keeper();
    const bad = 'https://a.co/p/1\ud800';
    const good = 'https://a.co/p/\ud83d\ude00'; // a surrogate pair is well-formed
    assert.equal(k.apply(bad, row(bad, 0), NOW), false);
    assert.equal(k.apply(good, row(good, NOW - HOUR), NOW), true);
    assert.equal(k.has(bad), false);
    assert.equal(k.unclaimable, 1);
    assert.deepEqual(
      topOf(k, 10, NOW, () => false).entries.map((e) => e.key),
      [good],
    );
  });
});

// --- the publish selection: the global top, then section extras ---

describe("KeeperCore.publishWalk's section extras", () => {
  it('keep the top exactly the walk without extras and give each queue a prefix of its own order, no row twice', () => {
    fc.assert(
      fc.property(
        fc.array(opArb, { minLength: 500, maxLength: 4000, size: 'max' }),
        fc.integer({ min: 0, max: 600 }),
        fc.integer({ min: 0, max: 600 }),
        fc.integer({ min: 0, max: 6 }),
        (ops, k, budget, skipEvery) => {
          const { core, model } = replay(ops);
          const skipped = (key: string): boolean => skipEvery > 0 && key.length % 7 === skipEvery;
          const top = topOf(core, k, NOW, skipped);
          const sel = published(core, k, budget, NOW, skipped);
          assert.deepEqual(
            sel.entries.map((e) => e.key),
            top.entries.map((e) => e.key),
            'the global top is unchanged',
          );
          assert.deepEqual([sel.complete, sel.skipped >= top.skipped], [top.complete, true]);
          assert.ok(sel.extras.length <= budget);
          const keys = [...sel.entries, ...sel.extras].map((e) => e.key);
          assert.equal(new Set(keys).size, keys.length, 'no row twice');
          const due = [...model.values()].filter((r) => minuteOf(r.nextRenderTime) * MINUTE_MS <= NOW);
          for (const queue of new Set(due.map((r) => classify(r.cacheKey, null).route))) {
            const rows = due.filter((r) => classify(r.cacheKey, null).route === queue);
            const eligible = rows.filter((r) => !skipped(r.cacheKey));
            const expected = eligible.map((r) => expectedScore(r, NOW)).sort((a, b) => b - a);
            const section = [...sel.entries, ...sel.extras].filter((e) => e.route === queue);
            assert.deepEqual(
              section.map((e) => e.score),
              expected.slice(0, section.length),
              `${queue}: its best rows, best first`,
            );
            for (const e of section) assert.equal(expectedScore(model.get(e.key)!, NOW), e.score);
            if (sel.completeQueues.has(queue))
              assert.equal(section.length, eligible.length, `${queue} complete`);
            else assert.ok(section.length < rows.length, `${queue} not complete, so rows are left`);
          }
          if (skipEvery === 0 && budget >= due.length) {
            // Room for everything: every queue's section holds all of its due rows.
            assert.equal(sel.entries.length + sel.extras.length, due.length);
          }
        },
      ),
      { numRuns: 40 },
    );
  });

  it('gives a queue with 1 % of the due rows a section beyond the top, up to the extra budget', () => {
    // Fails with the extras left out of the publish walk: the small queue then has no row in the set.
    const core = keeper();
    const blog = (i: number) => `https://a.example/blog/${i}`;
    const news = (i: number) => `https://a.example/news/${i}`;
    // Blog rows (hourly) an hour late score 1; news rows (daily) score 1/24: none reaches the top.
    for (let i = 0; i < 990; i++) core.apply(blog(i), row(blog(i), NOW - HOUR), NOW);
    for (let i = 0; i < 10; i++) core.apply(news(i), row(news(i), NOW - HOUR - i * MINUTE_MS), NOW);
    const sel = published(core, 100, 50, NOW);
    assert.ok(sel.entries.every((e) => e.route === 'blog'));
    assert.deepEqual(
      sel.extras.map((e) => e.key),
      [9, 8, 7, 6, 5, 4, 3, 2, 1, 0].map(news),
      'every news row, most late first',
    );
    assert.deepEqual([...sel.completeQueues], ['news']);
    // A budget smaller than the queue: its best rows, and it is not complete.
    const tight = published(core, 100, 4, NOW);
    assert.deepEqual(
      tight.extras.map((e) => e.key),
      [9, 8, 7, 6].map(news),
    );
    assert.deepEqual([...tight.completeQueues], []);
    // Leased rows cost no place in a section either.
    const leased = new Set([news(9), news(7)]);
    const skipping = published(core, 100, 4, NOW, (key) => leased.has(key));
    assert.deepEqual(
      skipping.extras.map((e) => e.key),
      [8, 6, 5, 4].map(news),
    );
  });

  it('resumes a class cut mid-bucket at the next row: none repeated, none left out', () => {
    const core = keeper();
    const blog = (i: number) => `https://a.example/blog/${i}`;
    // One bucket of 300 rows (more than a chunk) and a second, slightly less late queue.
    for (let i = 0; i < 300; i++) core.apply(blog(i), row(blog(i), NOW - HOUR), NOW);
    const news = (i: number) => `https://a.example/news/${i}`;
    for (let i = 0; i < 5; i++) core.apply(news(i), row(news(i), NOW - HOUR), NOW);
    const sel = published(core, 137, 1000, NOW);
    const blogRows = [...sel.entries, ...sel.extras].filter((e) => e.route === 'blog').map((e) => e.key);
    assert.equal(sel.entries.length, 137);
    assert.equal(new Set(blogRows).size, 300);
    assert.deepEqual([...sel.completeQueues].sort(), ['blog', 'news']);
  });
});

describe('sectionQuotas', () => {
  it('fills the queues the top under-represents to one level, max-min fair, never above the budget', () => {
    const q = sectionQuotas(
      new Map([
        ['big', { due: 99_000, have: 4_990 }],
        ['small', { due: 1_000, have: 10 }],
        ['tiny', { due: 40, have: 0 }],
      ]),
      2_500,
    );
    // big's top rows are above the floor (833): tiny and small share the budget and get all they have.
    assert.deepEqual(Object.fromEntries(q), { small: 990, tiny: 40 });
    const even = sectionQuotas(
      new Map([
        ['a', { due: 10_000, have: 0 }],
        ['b', { due: 10_000, have: 0 }],
        ['c', { due: 10_000, have: 0 }],
      ]),
      100,
    );
    assert.deepEqual(Object.fromEntries(even), { a: 34, b: 33, c: 33 });
    assert.deepEqual(Object.fromEntries(sectionQuotas(new Map([['a', { due: 5, have: 5 }]]), 100)), {});
    assert.deepEqual(Object.fromEntries(sectionQuotas(new Map([['a', { due: 5, have: 0 }]]), 0)), {});
  });

  it('never hands out more than the budget or more than a queue has left', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ due: fc.nat(500), have: fc.nat(500) }), { maxLength: 12 }),
        fc.nat(3000),
        (shares, budget) => {
          const queues = new Map(
            shares.map((s, i) => [`q${i}`, { due: s.due, have: Math.min(s.have, s.due) }]),
          );
          const q = sectionQuotas(queues, budget);
          let sum = 0;
          for (const [name, n] of q) {
            const s = queues.get(name)!;
            assert.ok(n > 0 && n <= s.due - s.have);
            sum += n;
          }
          assert.ok(sum <= budget);
          const floor = Math.floor(budget / Math.max(1, queues.size));
          for (const [name, s] of queues) {
            const section = s.have + (q.get(name) ?? 0);
            // Every queue reaches min(due, floor) unless its top rows already did.
            assert.ok(section >= Math.min(s.due, floor), `${name}: ${section} below the floor ${floor}`);
            if (s.have >= Math.max(1, floor))
              assert.equal(q.get(name), undefined, `${name} was covered by the top`);
          }
          const short = [...queues].filter(
            ([name, s]) => s.have < Math.max(1, floor) && s.have + (q.get(name) ?? 0) < s.due,
          );
          // A queue under the floor is short only when the budget ran out, within one row of fair shares.
          if (short.length > 0) assert.ok(sum > budget - short.length, `${budget - sum} rows left unused`);
        },
      ),
      { numRuns: 300 },
    );
  });
});
