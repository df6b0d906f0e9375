// The claim path (services/leases/claims.ts) over a real ready set and lease table laid on plain
// ArrayBuffers, with a fake schedule, clock, keeper view and claim-mark writer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig, type QueueKeeperConfig } from '../../util/config/schema.js';
import { MIN_KEY_BYTES_PER_SLOT, ReadySet, type ReadyEntryInput } from '../../util/sharedMemory/readySet.js';
import { LeaseTable } from '../../util/leases/table.js';
import { FakeClock } from '../fakeClock.js';
import { nameHash } from '../../util/leases/token.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import {
  CLAIM_MARK_EVERY_MS,
  ClaimService,
  FULL_WARN_EVERY_MS,
  REFILL_WAIT_MS,
} from '../../services/leases/claims.js';
import type { Caller } from '../../services/leases/caller.js';

const NOW = Date.UTC(2026, 2, 1, 12, 0, 0);
import { scheduleRow } from '../scheduleRow.js';

const MINUTE = 60_000;
const FLEET: Caller = { user: nameHash('fleet-a'), worker: nameHash(''), superUser: false };
// Short URLs: the test's ready set has the smallest key region, and every entry of its top must fit.
const url = (queue: string, i: number) => `http://s.t/${queue}/${i}|desktop`;

function row(key: string, nextRenderTime: number): ScheduleRow {
  return scheduleRow(key, nextRenderTime);
}

function world(opts: { fullFor?: (key: string) => boolean; cfg?: (c: QueueKeeperConfig) => void } = {}) {
  const cfg = defaultConfig();
  cfg.render.routes = [
    { name: 'product', match: 'prefix', path: '/product/' },
    { name: 'blog', match: 'prefix', path: '/blog/' },
  ];
  opts.cfg?.(cfg);
  const capacity = 64;
  const ready = new ReadySet(
    new ArrayBuffer(ReadySet.byteLength(capacity, MIN_KEY_BYTES_PER_SLOT)),
    capacity,
    MIN_KEY_BYTES_PER_SLOT,
  );
  // Room for every lease the tests grant at once (90 across the scoped claims), so no window fills by chance.
  const leases = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(256)), 256);
  // A key whose probe window is full (colliding keys) is refused by the table; faked per key here.
  const fullFor = opts.fullFor ?? (() => false);
  const rows = new Map<string, ScheduleRow>();
  const marks: Array<{ queues: string[]; now: number }> = [];
  const counts = new Map<string, number>();
  const warnings: string[] = [];
  const pokes: number[] = [];
  const state = { paused: false, pauseKnown: true, serving: true, due: 10, leftOut: false };
  const clock = new FakeClock(NOW);
  const claims = new ClaimService({
    readySet: () => ready,
    leases: () => ({
      isLeased: (key, now) => leases.isLeased(key, now),
      grant: (key, now, o) => (fullFor(key) ? { ok: false, reason: 'full' } : leases.grant(key, now, o)),
    }),
    readRow: (key) => rows.get(key),
    writeClaimMarks: async (queues, now) => {
      marks.push({ queues: [...queues], now });
    },
    timer: clock,
    isPaused: () => state.paused,
    pauseKnown: () => state.pauseKnown,
    servingView: () => ({ serving: state.serving, due: state.due, leftOut: state.leftOut }),
    nodeStatus: () => 'empty',
    pokeKeeper: (now) => pokes.push(now),
    config: () => cfg,
    jobTarget: () => ({ callbackOrigin: 'http://127.0.0.1:9926' }),
    count: (name, n) => counts.set(name, (counts.get(name) ?? 0) + n),
    log: { warn: (...a: unknown[]) => warnings.push(String(a[0])) },
  });
  /** Files due rows and publishes them (in this order) as the keeper would. */
  const publish = (keys: string[], dueMs = NOW - MINUTE) => {
    for (const k of keys) rows.set(k, row(k, dueMs));
    const entries: ReadyEntryInput[] = keys.map((key, i) => ({
      key,
      score: 100 - i,
      dueMs,
      fromSitemap: false,
      verified: true,
      mark: 'none',
      route: new URL(key.slice(0, key.lastIndexOf('|'))).pathname.split('/')[1],
    }));
    ready.publish(entries, NOW);
  };
  return { claims, ready, leases, rows, marks, counts, warnings, pokes, state, publish, cfg, clock };
}

test('a claim grants each due key once: a second claim of the same set gets nothing more', () => {
  const w = world();
  const keys = [0, 1, 2, 3].map((i) => url('product', i));
  w.publish(keys);
  const first = w.claims.claim(3, FLEET, null, NOW);
  assert.deepEqual(
    first.jobs.map((j) => j.id),
    keys.slice(0, 3),
  );
  assert.equal(first.status, 'queued');
  assert.ok(first.jobs.every((j) => j.queue === 'product' && j.leaseToken.length > 0));
  // The set is published again with the same keys (the keeper republishes before results come in).
  w.publish(keys);
  const second = w.claims.claim(10, FLEET, null, NOW + 1);
  assert.deepEqual(
    second.jobs.map((j) => j.id),
    [keys[3]],
    'leased keys are never granted twice',
  );
  assert.equal(w.counts.get('claim_granted'), 4);
});

test('a row that is gone or no longer due is skipped and counted stale, and the claim takes on', () => {
  const w = world();
  const keys = [0, 1, 2].map((i) => url('product', i));
  w.publish(keys);
  w.rows.set(keys[0]!, row(keys[0]!, NOW + 10 * MINUTE)); // rescheduled since the publish
  w.rows.delete(keys[1]!); // deleted since the publish
  const r = w.claims.claim(2, FLEET, null, NOW);
  assert.deepEqual(
    r.jobs.map((j) => j.id),
    [keys[2]],
  );
  assert.equal(w.counts.get('claim_stale'), 2);
  assert.equal(w.leases.isLeased(keys[0]!, NOW), false, 'a stale entry is not leased');
});

test("a scoped claim grants only its queues and leaves the other queues' entries for the next claim", () => {
  const w = world();
  const keys = [url('blog', 0), url('product', 0), url('blog', 1), url('product', 1)];
  w.publish(keys);
  const scoped = w.claims.claim(10, FLEET, new Set(['product']), NOW);
  assert.deepEqual(
    scoped.jobs.map((j) => j.id),
    [url('product', 0), url('product', 1)],
  );
  const rest = w.claims.claim(10, FLEET, null, NOW);
  assert.deepEqual(
    rest.jobs.map((j) => j.id),
    [url('blog', 0), url('blog', 1)],
    'the scoped claim used up no entry of another queue',
  );
});

test('a paused node grants nothing and says paused; a node whose keeper does not serve says unready', () => {
  const w = world();
  w.publish([url('product', 0)]);
  w.state.paused = true;
  assert.deepEqual(w.claims.claim(5, FLEET, null, NOW), { jobs: [], status: 'paused' });
  w.state.paused = false;
  w.state.serving = false;
  assert.deepEqual(w.claims.claim(5, FLEET, null, NOW), { jobs: [], status: 'unready' });
  w.state.serving = true;
  assert.equal(w.claims.claim(5, FLEET, null, NOW).jobs.length, 1, 'the entry was left for a serving node');
});

test('a worker that has not yet read the pause intent grants nothing and says unready, even from a live set', () => {
  // The overlap of two worker 0s: the old keeper's set is still published and serving,
  // and a pause made earlier is not yet known to the new worker.
  const w = world();
  w.publish([0, 1].map((i) => url('product', i)));
  w.state.pauseKnown = false;
  const r = w.claims.claim(5, FLEET, null, NOW);
  assert.deepEqual(r, { jobs: [], status: 'unready' });
  assert.equal(w.counts.get('claim_granted'), undefined);
  w.state.pauseKnown = true;
  w.state.paused = true;
  assert.deepEqual(w.claims.claim(5, FLEET, null, NOW), { jobs: [], status: 'paused' });
  w.state.paused = false;
  assert.equal(w.claims.claim(5, FLEET, null, NOW).jobs.length, 2, 'the set was left whole');
});

test('a claim that finds the set used up while rows are due pokes the keeper; with nothing due it does not', () => {
  const w = world();
  w.publish([url('product', 0)]);
  w.claims.claim(5, FLEET, null, NOW);
  assert.deepEqual(w.pokes, [NOW]);
  w.state.due = 0;
  w.claims.claim(5, FLEET, null, NOW + 1);
  assert.deepEqual(w.pokes, [NOW]);
});

test('with due rows left out of the set, the claim that takes it to half pokes the keeper; a complete set is not refilled early', () => {
  const w = world();
  w.publish(Array.from({ length: 8 }, (_, i) => url('product', i)));
  w.claims.claim(3, FLEET, null, NOW);
  assert.deepEqual(w.pokes, [], 'a complete set: nothing left out to refill with');
  w.state.leftOut = true;
  w.claims.claim(1, FLEET, null, NOW + 1);
  assert.deepEqual(w.pokes, [NOW + 1], '4 of 8 left: the refill is asked for');
  w.publish(Array.from({ length: 8 }, (_, i) => url('product', 10 + i)));
  w.claims.claim(3, FLEET, null, NOW + 2);
  assert.deepEqual(w.pokes, [NOW + 1], '5 of 8 left: not yet');
});

test('a claim that finds the set used up while rows were left out waits for the refill and grants from it', async () => {
  // Fails without claimOrWait's wait: the first claim's [] would be the answer.
  const w = world();
  w.state.leftOut = true;
  w.publish([url('product', 0)]);
  assert.equal(w.claims.claim(1, FLEET, null).jobs.length, 1);
  const answer = w.claims.claimOrWait(1, FLEET, null);
  await w.clock.advance(10);
  w.publish([url('product', 1)]);
  await w.clock.advance(2);
  const r = await answer;
  assert.deepEqual(
    r.jobs.map((j) => j.id),
    [url('product', 1)],
  );
  assert.equal(r.refillFrom, undefined);
});

test('a claim that finds the set used up answers [] after REFILL_WAIT_MS when no publish comes, and at once with nothing left out', async () => {
  const w = world();
  w.publish([url('product', 0)]);
  w.claims.claim(1, FLEET, null);
  const prompt = await w.claims.claimOrWait(1, FLEET, null);
  assert.deepEqual(prompt.jobs, [], 'nothing left out: answered at once');
  w.state.leftOut = true;
  let done = false;
  const answer = w.claims.claimOrWait(1, FLEET, null).then((r) => {
    done = true;
    return r;
  });
  await w.clock.advance(REFILL_WAIT_MS - 2);
  assert.equal(done, false, 'still waiting for the refill');
  await w.clock.advance(2);
  assert.deepEqual((await answer).jobs, []);
  assert.equal(done, true);
});

test('a claim gets past a head of entries leased or reported since the publish, beyond the over-take budget', () => {
  // Fails with leased entries counted against the 4× budget alone: 8 taken, all leased, nothing granted.
  const w = world();
  const keys = Array.from({ length: 40 }, (_, i) => url('product', i));
  w.publish(keys);
  const lease = { leaseMs: 60_000, dueMs: NOW - MINUTE, cadenceMs: 3_600_000, fastRetries: 0 };
  for (const k of keys.slice(0, 30)) assert.ok(w.leases.grant(k, NOW, lease).ok);
  // And past rows reported since (rescheduled: no longer due).
  for (const k of keys.slice(30, 35)) w.rows.set(k, row(k, NOW + 3_600_000));
  const r = w.claims.claim(2, FLEET, null, NOW);
  assert.deepEqual(
    r.jobs.map((j) => j.id),
    [keys[35], keys[36]],
  );
});

test("a queue's claim mark is written at most once per interval per worker, and again after it", () => {
  const w = world();
  const keys = [0, 1, 2].map((i) => url('product', i));
  w.publish(keys);
  w.claims.claim(1, FLEET, null, NOW);
  w.claims.claim(1, FLEET, null, NOW + 1000);
  assert.deepEqual(w.marks, [{ queues: ['product'], now: NOW }]);
  w.claims.claim(1, FLEET, null, NOW + CLAIM_MARK_EVERY_MS);
  assert.deepEqual(
    w.marks.map((m) => m.now),
    [NOW, NOW + CLAIM_MARK_EVERY_MS],
  );
});

test('a claim the pacing held back is written when its window ends, with its own instant (stall progress)', async () => {
  const w = world();
  w.publish([0, 1, 2, 3].map((i) => url('product', i)));
  w.claims.claim(1, FLEET, null, NOW); // written at once
  w.clock.t = NOW + 1000;
  w.claims.claim(1, FLEET, null, NOW + 1000); // a nudge could have come in between: this is progress
  w.clock.t = NOW + 1500;
  w.claims.claim(1, FLEET, null, NOW + 1500);
  assert.deepEqual(w.marks, [{ queues: ['product'], now: NOW }], 'held back inside the window');
  await w.clock.advance(CLAIM_MARK_EVERY_MS - 1500);
  // Without the trailing write nothing more was ever written until another claim came.
  assert.deepEqual(w.marks, [
    { queues: ['product'], now: NOW },
    { queues: ['product'], now: NOW + 1500 },
  ]);
  await w.clock.advance(60_000);
  assert.equal(w.marks.length, 2, 'nothing more to write, and no timer left re-arming');
  assert.deepEqual(w.clock.armed, []);
});

test('a full lease window is warned about once per interval, not once per refused key, and pokes nothing', () => {
  const w = world({ fullFor: () => true });
  const keys = [0, 1, 2, 3, 4, 5].map((i) => url('product', i));
  w.publish(keys);
  const r = w.claims.claim(6, FLEET, null, NOW);
  assert.equal(r.jobs.length, 0);
  assert.equal(r.status, 'empty', 'the node status when nothing was granted');
  const refused = w.warnings.filter((m) => m.startsWith('lease window full'));
  assert.equal(refused.length, 1);
  assert.deepEqual(w.pokes, [], 'a set used up only by refused keys is not republished at once');
  w.publish(keys);
  w.claims.claim(6, FLEET, null, NOW + FULL_WARN_EVERY_MS - 1);
  assert.equal(w.warnings.filter((m) => m.startsWith('lease window full')).length, 1);
  w.publish(keys);
  w.claims.claim(6, FLEET, null, NOW + FULL_WARN_EVERY_MS);
  assert.equal(w.warnings.filter((m) => m.startsWith('lease window full')).length, 2);
});

test('the claim limit defaults to 20 and is capped at queue.maxClaimLimit', () => {
  const w = world({ cfg: (c) => (c.queue.maxClaimLimit = 7) });
  assert.equal(w.claims.limitOf(undefined), 7);
  assert.equal(w.claims.limitOf(3), 3);
  assert.equal(w.claims.limitOf(50), 7);
});

// --- scoped claims over ready-set sections -----------------------------------------------------------------

/** A keeper-like publish: the global top of `capacity` by score, then the small queue's rows as extras. */
function publishShares(w: ReturnType<typeof world>, big: string[], small: string[], now = NOW) {
  for (const k of [...big, ...small]) w.rows.set(k, row(k, now - MINUTE));
  const entry = (key: string, score: number): ReadyEntryInput => ({
    key,
    score,
    dueMs: now - MINUTE,
    fromSitemap: false,
    verified: true,
    mark: 'none',
    route: new URL(key).pathname.split('/')[1],
  });
  // Every big row outscores every small one, so the small queue has no row in the global top.
  const top = big.slice(0, w.ready.capacity).map((k, i) => entry(k, 100 - i / 1000));
  const extras = small.slice(0, w.ready.extraCapacity).map((k, i) => entry(k, 1 - i / 1000));
  const complete = new Set(small.length <= w.ready.extraCapacity ? ['blog'] : []);
  return w.ready.publish(top, now, { entries: extras, complete });
}

test('a fleet scoped to a queue with 1 % of the due rows gets full claims while that queue has due rows', () => {
  // Fails with the scoped claim reading the global top (the claim before sections): it then gets nothing.
  const w = world();
  const big = Array.from({ length: 990 }, (_, i) => url('product', i));
  const small = Array.from({ length: 10 }, (_, i) => url('blog', i));
  publishShares(w, big, small);
  const blogFleet = new Set(['blog']);
  const first = w.claims.claim(4, FLEET, blogFleet, NOW);
  assert.deepEqual(
    first.jobs.map((j) => j.id),
    small.slice(0, 4),
  );
  assert.deepEqual(
    w.claims.claim(4, FLEET, blogFleet, NOW).jobs.map((j) => j.id),
    small.slice(4, 8),
  );
  const last = w.claims.claim(4, FLEET, blogFleet, NOW);
  assert.deepEqual(
    last.jobs.map((j) => j.id),
    small.slice(8),
    'the rest of what is due',
  );
  assert.ok([first, last].every((r) => r.status === 'queued'));
  assert.deepEqual(w.pokes, [], 'a complete section used up asks for no publish');
});

test('the unscoped claim keeps the global order while scoped claims take from sections', () => {
  const w = world();
  const big = Array.from({ length: 100 }, (_, i) => url('product', i));
  const small = Array.from({ length: 20 }, (_, i) => url('blog', i));
  publishShares(w, big, small);
  w.claims.claim(5, FLEET, new Set(['blog']), NOW);
  w.claims.claim(5, FLEET, new Set(['product']), NOW); // product's section: its rows of the top
  const free = w.claims.claim(10, FLEET, null, NOW);
  assert.deepEqual(
    free.jobs.map((j) => j.id),
    big.slice(5, 15),
    'the global top in order, past what the product fleet holds, never an extra',
  );
});

test('each entry is granted once across scoped and unscoped claims', () => {
  const w = world();
  const big = Array.from({ length: 60 }, (_, i) => url('product', i));
  const small = Array.from({ length: 30 }, (_, i) => url('blog', i));
  publishShares(w, big, small);
  const granted: string[] = [];
  const scopes = [null, new Set(['product']), new Set(['blog']), new Set(['product', 'blog'])];
  for (let round = 0; round < 40; round++) {
    const r = w.claims.claim(3, FLEET, scopes[round % scopes.length]!, NOW);
    granted.push(...r.jobs.map((j) => j.id));
  }
  assert.equal(new Set(granted).size, granted.length, 'no key granted twice');
  // The global top holds 64 of the 90; the scoped claims reach the extras too.
  assert.deepEqual(new Set(granted), new Set([...big, ...small.slice(0, w.ready.extraCapacity)]));
});

test('a claim scoped to two queues takes the best head first and draws on both sections', () => {
  const w = world();
  for (const k of [url('product', 0), url('product', 1), url('blog', 0), url('blog', 1)])
    w.rows.set(k, row(k, NOW - MINUTE));
  const e = (key: string, score: number, route: string): ReadyEntryInput => ({
    key,
    score,
    dueMs: NOW - MINUTE,
    fromSitemap: false,
    verified: true,
    mark: 'none',
    route,
  });
  w.ready.publish(
    [e(url('product', 0), 9, 'product'), e(url('blog', 0), 8, 'blog'), e(url('product', 1), 2, 'product')],
    NOW,
    { entries: [e(url('blog', 1), 5, 'blog')], complete: new Set(['product', 'blog']) },
  );
  const r = w.claims.claim(10, FLEET, new Set(['product', 'blog']), NOW);
  assert.deepEqual(
    r.jobs.map((j) => j.id),
    [url('product', 0), url('blog', 0), url('blog', 1), url('product', 1)],
  );
});

test('a scoped claim that uses up a section of a queue with rows left out of the set pokes the keeper', () => {
  const w = world();
  const big = Array.from({ length: 70 }, (_, i) => url('product', i));
  const small = Array.from({ length: 50 }, (_, i) => url('blog', i)); // more than the 32 extras
  publishShares(w, big, small);
  const r = w.claims.claim(40, FLEET, new Set(['blog']), NOW);
  assert.equal(r.jobs.length, w.ready.extraCapacity);
  assert.deepEqual(w.pokes, [NOW]);
  // A queue with no section (nothing of it published) pokes nothing: the next publish brings its rows.
  w.claims.claim(5, FLEET, new Set(['docs']), NOW + 1);
  assert.deepEqual(w.pokes, [NOW]);
});

test('a scoped claim does not grant a row routed to another queue since the publish', () => {
  const w = world();
  const key = url('blog', 0);
  publishShares(w, [], [key]);
  w.cfg.render.routes = [{ name: 'product', match: 'prefix', path: '/blog/' }]; // /blog/ is product's now
  const r = w.claims.claim(5, FLEET, new Set(['blog']), NOW);
  assert.deepEqual(r.jobs, []);
  assert.equal(w.counts.get('claim_stale'), 1);
});
