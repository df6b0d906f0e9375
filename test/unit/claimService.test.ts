// The claim path (services/leases/claims.ts) over a real ready set and lease table laid on plain
// ArrayBuffers, with a fake schedule, clock, keeper view and claim-mark writer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig, type QueueKeeperConfig } from '../../util/config/schema.js';
import { MIN_KEY_BYTES_PER_SLOT, ReadySet, type ReadyEntryInput } from '../../util/handoff/readySet.js';
import { LeaseTable } from '../../util/leases/table.js';
import { nameHash } from '../../util/leases/token.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import {
  CLAIM_MARK_EVERY_MS,
  ClaimService,
  FULL_WARN_EVERY_MS,
  type Caller,
} from '../../services/leases/claims.js';

const NOW = Date.UTC(2026, 2, 1, 12, 0, 0);
const MINUTE = 60_000;
const FLEET: Caller = { user: nameHash('fleet-a'), superUser: false };
const url = (queue: string, i: number) => `https://shop.test/${queue}/${i}`;

function row(key: string, nextRenderTime: number): ScheduleRow {
  return {
    cacheKey: key,
    nextRenderTime,
    fromSitemap: false,
    effectiveInterval: null,
    verified: true,
    urgentAt: null,
    changedAt: null,
    strikes: 0,
    lastOutcome: null,
    lastRenderedAt: null,
    lastStatusCode: null,
  };
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
  const leases = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(64)), 64);
  // A key whose probe window is full (colliding keys) is refused by the table; faked per key here.
  const fullFor = opts.fullFor ?? (() => false);
  const rows = new Map<string, ScheduleRow>();
  const marks: Array<{ queues: string[]; now: number }> = [];
  const counts = new Map<string, number>();
  const warnings: string[] = [];
  const pokes: number[] = [];
  const state = { paused: false, pauseKnown: true, serving: true, due: 10 };
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
    isPaused: () => state.paused,
    pauseKnown: () => state.pauseKnown,
    servingView: () => ({ serving: state.serving, due: state.due }),
    nodeStatus: () => 'empty',
    pokeKeeper: (now) => pokes.push(now),
    config: () => cfg,
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
      route: new URL(key).pathname.split('/')[1],
    }));
    ready.publish(entries, NOW);
  };
  return { claims, ready, leases, rows, marks, counts, warnings, pokes, state, publish, cfg };
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
  // The overlap of two worker 0s (issue 12.5): the old keeper's set is still published and serving,
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

test('the claim limit defaults to 20 and is capped at queue.maxClaimLimit; a bad limit is a 400', () => {
  const w = world({ cfg: (c) => (c.queue.maxClaimLimit = 7) });
  assert.equal(w.claims.parseLimit(undefined), 7);
  assert.equal(w.claims.parseLimit({ limit: 3 }), 3);
  assert.equal(w.claims.parseLimit({ limit: 50 }), 7);
  assert.throws(() => w.claims.parseLimit({ limit: 0 }), { status: 400, code: 'invalid_limit' });
  assert.throws(() => w.claims.parseLimit({ limit: 'x' }), { status: 400, code: 'invalid_limit' });
});
