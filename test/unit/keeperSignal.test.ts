import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  KeeperSignal,
  keeperStaleAfterMs,
  leaderIdFor,
  POKE_MIN_INTERVAL_MS,
} from '../../util/sharedMemory/keeperSignal.js';

const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);

function twoViews(): [KeeperSignal, KeeperSignal] {
  const buf = new ArrayBuffer(KeeperSignal.byteLength());
  return [new KeeperSignal(buf), new KeeperSignal(buf)];
}

test('a blank signal reads as a stopped keeper that is stale and has no leader', () => {
  const [signal] = twoViews();
  assert.deepEqual(signal.read(), {
    live: false,
    phase: 'stopped',
    heartbeatAt: null,
    dueCount: 0,
    complete: false,
    leftOut: false,
    leader: null,
    lastPokeAt: null,
  });
  assert.equal(signal.isStale(NOW, 1000), true);
});

test('what the keeper writes through one view every worker reads through another', () => {
  const [keeper, worker] = twoViews();
  keeper.write({ live: true, phase: 'live', dueCount: 1234, complete: true, leftOut: true }, NOW + 200);
  assert.deepEqual(worker.read(), {
    live: true,
    phase: 'live',
    heartbeatAt: NOW + 1000, // rounded up to the second
    dueCount: 1234,
    complete: true,
    leftOut: true,
    leader: null,
    lastPokeAt: null,
  });
  for (const phase of ['waiting-for-peers', 'loading', 'failed', 'stopped'] as const) {
    keeper.write({ live: false, phase, dueCount: 0, complete: false }, NOW);
    assert.equal(worker.read().phase, phase);
  }
});

test('a keeper is stale once its heartbeat is older than max(30 s, 10 × publishInterval)', () => {
  assert.equal(keeperStaleAfterMs(1000), 30_000);
  assert.equal(keeperStaleAfterMs(100), 30_000);
  assert.equal(keeperStaleAfterMs(5000), 50_000);
  const [keeper, worker] = twoViews();
  keeper.write({ live: true, phase: 'live', dueCount: 1, complete: true }, NOW);
  assert.equal(worker.isStale(NOW + 30_000, 1000), false);
  assert.equal(worker.isStale(NOW + 30_001, 1000), true);
  assert.equal(worker.isStale(NOW + 50_000, 5000), false);
  assert.equal(worker.isStale(NOW + 50_001, 5000), true);
  keeper.write({ live: true, phase: 'live', dueCount: 1, complete: true }, NOW + 50_000);
  assert.equal(worker.isStale(NOW + 50_001, 5000), false);
});

test('a heartbeat is never read back older than it was, so staleness is never declared early', () => {
  const [keeper, worker] = twoViews();
  keeper.write({ live: true, phase: 'live', dueCount: 1, complete: true }, NOW + 999);
  assert.equal(worker.isStale(NOW + 999 + 30_000, 1000), false);
});

test('heartbeats after 2038 are kept (Int32 seconds from 2024)', () => {
  const [keeper, worker] = twoViews();
  const in2040 = Date.UTC(2040, 0, 1, 0, 0, 5);
  keeper.write({ live: true, phase: 'live', dueCount: 1, complete: true }, in2040);
  assert.equal(worker.read().heartbeatAt, in2040);
  assert.equal(worker.isStale(in2040 + 1000, 1000), false);
  assert.ok(keeper.claimLeadership(7, in2040, 1000));
  assert.deepEqual(worker.leader(), { ownerId: 7, heartbeatAt: in2040 });
});

test('one worker 0 holds the leader slot; a live holder is not displaced and renews it', () => {
  const [first, second] = twoViews();
  assert.equal(first.claimLeadership(11, NOW, 1000), true);
  assert.equal(second.claimLeadership(12, NOW + 1000, 1000), false);
  assert.equal(first.claimLeadership(11, NOW + 20_000, 1000), true); // renewal
  assert.equal(second.claimLeadership(12, NOW + 45_000, 1000), false); // 25 s after the renewal
  assert.deepEqual(second.leader(), { ownerId: 11, heartbeatAt: NOW + 20_000 });
});

test('a stale leader is taken over, and its next renewal fails so it steps down', () => {
  const [old, successor] = twoViews();
  assert.ok(old.claimLeadership(11, NOW, 1000));
  assert.equal(successor.claimLeadership(12, NOW + 30_000, 1000), false);
  assert.equal(successor.claimLeadership(12, NOW + 30_001, 1000), true);
  assert.equal(old.claimLeadership(11, NOW + 30_002, 1000), false);
  assert.equal(old.read().leader?.ownerId, 12);
});

test('leadership released on exit can be claimed at once, and only the holder can release it', () => {
  const [old, successor] = twoViews();
  assert.ok(old.claimLeadership(11, NOW, 1000));
  assert.equal(successor.releaseLeadership(12), false);
  assert.equal(old.releaseLeadership(11), true);
  assert.equal(old.leader(), null);
  assert.equal(successor.claimLeadership(12, NOW + 1, 1000), true);
  assert.equal(old.releaseLeadership(11), false);
  assert.equal(successor.leader()?.ownerId, 12);
});

test('a leader owner id must be a positive Int32', () => {
  const [signal] = twoViews();
  assert.throws(() => signal.claimLeadership(0, NOW, 1000), RangeError);
  assert.throws(() => signal.claimLeadership(2 ** 31, NOW, 1000), RangeError);
});

test('pokes to worker 0 are granted to one caller per 50 ms across all workers', () => {
  const [a, b] = twoViews();
  assert.equal(POKE_MIN_INTERVAL_MS, 50);
  assert.equal(a.requestPublish(NOW), true);
  assert.equal(b.requestPublish(NOW), false);
  assert.equal(a.requestPublish(NOW + 49), false);
  assert.equal(b.requestPublish(NOW + 50), true);
  assert.equal(a.requestPublish(NOW + 50), false);
  assert.equal(a.read().lastPokeAt, NOW + 50);
});

test('a clock stepped back does not silence pokes', () => {
  const [a] = twoViews();
  assert.ok(a.requestPublish(NOW));
  assert.equal(a.requestPublish(NOW - 500), false);
  assert.equal(a.requestPublish(NOW - 5_000), true);
});

test('two overlapping worker 0s of one process never share a leader id, so only one publishes', () => {
  // The restarted worker 0 runs in the same process (same pid) on a new thread. With the old
  // pid-based ids, equal random draws gave both keepers the same id and both "held" the slot.
  const oldThread = 3;
  const newThread = 5;
  for (const [ra, rb] of [
    [0, 0],
    [0x7fff, 0x7fff],
    [12345, 12345],
    [0xffffffff, 0],
  ] as const) {
    const a = leaderIdFor(oldThread, ra);
    const b = leaderIdFor(newThread, rb);
    assert.notEqual(a, b);
    assert.ok(a >= 1 && a <= 0x7fffffff && b >= 1 && b <= 0x7fffffff);
    const [oldKeeper, newKeeper] = twoViews();
    assert.equal(oldKeeper.claimLeadership(a, NOW, 1000), true);
    assert.equal(newKeeper.claimLeadership(b, NOW + 500, 1000), false, 'the newcomer waits');
    assert.equal(oldKeeper.claimLeadership(a, NOW + 1000, 1000), true, 'the holder keeps publishing');
  }
});
