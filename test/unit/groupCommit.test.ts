// Group commit of result writes: batches close at N items or T ms, every caller is
// answered from its own slice only after the batch ran, a failed batch fails all of its callers, and a
// merged batch of results locks its keys in one sorted set; a wait given as text is checked.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeClock, turns } from '../fakeClock.js';
import {
  GroupCommit,
  MAX_GROUP_COMMIT_WAIT_MS,
  parseGroupCommitWait,
} from '../../util/schedule/groupCommit.js';
import { defaultConfig } from '../../util/config/schema.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import { ScheduleWrites, type ScheduleStore, type ScheduleWrite } from '../../util/schedule/writes.js';
import { withKeyLocks } from '../../services/runtime/storeLock.js';
import type { RawStore } from '../../services/runtime/harper.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);

interface Rig {
  clock: FakeClock;
  runs: string[][];
  batcher: GroupCommit<string, string>;
}

/** A batcher whose run answers each item upper-cased, recording every batch it ran. */
function rig(
  maxItems: number,
  maxWaitMs: number,
  run?: (items: readonly string[]) => Promise<string[]>,
): Rig {
  const clock = new FakeClock(NOW);
  const runs: string[][] = [];
  const batcher = new GroupCommit<string, string>({
    run: (items) => {
      runs.push([...items]);
      return run ? run(items) : Promise.resolve(items.map((i) => i.toUpperCase()));
    },
    maxItems,
    maxWaitMs,
    setTimer: (fn, ms) => clock.set(fn, ms),
    clearTimer: (h) => clock.clear(h),
  });
  return { clock, runs, batcher };
}

/** Tracks whether a promise has settled, without awaiting it. */
function watch<T>(p: Promise<T>): {
  settled: () => boolean;
  value: () => T | undefined;
  error: () => unknown;
} {
  let settled = false;
  let value: T | undefined;
  let error: unknown;
  p.then(
    (v) => {
      settled = true;
      value = v;
    },
    (e: unknown) => {
      settled = true;
      error = e;
    },
  );
  return { settled: () => settled, value: () => value, error: () => error };
}

test('results submitted within the wait share one run and each caller gets its own answers', async () => {
  const { clock, runs, batcher } = rig(100, 2);
  const a = watch(batcher.submit(['a1', 'a2']));
  await clock.advance(1);
  const b = watch(batcher.submit(['b1', 'b2', 'b3']));
  await turns();
  assert.deepEqual(runs, [], 'nothing runs before the batch closes');
  await clock.advance(1);
  assert.deepEqual(runs, [['a1', 'a2', 'b1', 'b2', 'b3']]);
  assert.deepEqual(a.value(), ['A1', 'A2']);
  assert.deepEqual(b.value(), ['B1', 'B2', 'B3']);
  const c = watch(batcher.submit(['c']));
  await clock.advance(2);
  assert.deepEqual(runs.at(-1), ['c'], 'the next batch starts afresh');
  assert.deepEqual(c.value(), ['C']);
});

test('a batch closes as soon as it holds maxItems, without waiting for its timer', async () => {
  const { clock, runs, batcher } = rig(4, 2);
  void batcher.submit(['a', 'b']);
  const full = watch(batcher.submit(['c', 'd']));
  await turns();
  assert.deepEqual(runs, [['a', 'b', 'c', 'd']]);
  assert.deepEqual(full.value(), ['C', 'D']);
  assert.deepEqual(clock.armed, [], 'the closed batch leaves no timer behind');
});

test('a submission that would overflow the open batch closes it first, and a big one runs alone', async () => {
  const { clock, runs, batcher } = rig(4, 2);
  void batcher.submit(['a', 'b', 'c']);
  void batcher.submit(['d', 'e']);
  await turns();
  assert.deepEqual(runs, [['a', 'b', 'c']]);
  void batcher.submit(['f', 'g', 'h', 'i', 'j']);
  await turns();
  assert.deepEqual(runs, [
    ['a', 'b', 'c'],
    ['d', 'e'],
    ['f', 'g', 'h', 'i', 'j'],
  ]);
  assert.equal(batcher.pending, 0);
  await clock.advance(5);
  assert.equal(runs.length, 3);
});

test('a caller is answered only once its batch has finished running', async () => {
  let finish!: () => void;
  const { clock, batcher } = rig(100, 1, (items) => new Promise((r) => (finish = () => r([...items]))));
  const a = watch(batcher.submit(['a']));
  await clock.advance(1);
  await turns();
  assert.equal(a.settled(), false, 'not acknowledged while the commit runs');
  finish();
  await turns();
  assert.deepEqual(a.value(), ['a']);
});

test('a failing commit fails every caller in its batch and none gets an answer', async () => {
  const boom = new Error('commit failed');
  let fail = true;
  const { clock, batcher } = rig(100, 1, (items) =>
    fail ? Promise.reject(boom) : Promise.resolve(items.map((i) => `ok ${i}`)),
  );
  const a = watch(batcher.submit(['a']));
  const b = watch(batcher.submit(['b', 'c']));
  await clock.advance(1);
  assert.equal(a.error(), boom);
  assert.equal(b.error(), boom);
  assert.equal(a.value(), undefined);
  assert.equal(b.value(), undefined);
  fail = false;
  const c = watch(batcher.submit(['d']));
  await clock.advance(1);
  assert.deepEqual(c.value(), ['ok d'], 'a later batch is not tainted');
});

test('a run that throws, or answers the wrong number of items, fails its callers too', async () => {
  const thrown = rig(100, 1, () => {
    throw new Error('sync failure');
  });
  const a = watch(thrown.batcher.submit(['a']));
  await thrown.clock.advance(1);
  assert.match(String(a.error()), /sync failure/);
  const short = rig(100, 1, () => Promise.resolve(['only one']));
  const b = watch(short.batcher.submit(['a']));
  const c = watch(short.batcher.submit(['b']));
  await short.clock.advance(1);
  assert.match(String(b.error()), /1 answers for 2 items/);
  assert.match(String(c.error()), /1 answers for 2 items/);
});

test('a wait of 0 runs every submission on its own at once', async () => {
  const { clock, runs, batcher } = rig(100, 0);
  void batcher.submit(['a']);
  void batcher.submit(['b']);
  await turns();
  assert.deepEqual(runs, [['a'], ['b']]);
  assert.deepEqual(clock.armed, []);
});

test('a wait given as text is whole milliseconds from 0 to the cap, and anything else is refused', () => {
  assert.deepEqual(['0', '2', ' 8 ', '0010', String(MAX_GROUP_COMMIT_WAIT_MS)].map(parseGroupCommitWait), [
    0,
    2,
    8,
    10,
    MAX_GROUP_COMMIT_WAIT_MS,
  ]);
  for (const text of [
    '',
    ' ',
    '-1',
    '1.5',
    '2ms',
    '1e3',
    '0x10',
    'Infinity',
    String(MAX_GROUP_COMMIT_WAIT_MS + 1),
  ])
    assert.equal(parseGroupCommitWait(text), null, JSON.stringify(text));
});

/** lmdb's attemptLock/unlock over a Map: a failed attempt is called back once the key is unlocked. */
function lockStore(): RawStore & { lock(key: string): void; release(key: string): void } {
  const held = new Set<string>();
  const waiters = new Map<string, Array<() => void>>();
  const release = (key: string): boolean => {
    held.delete(key);
    const list = waiters.get(key) ?? [];
    waiters.delete(key);
    for (const cb of list) setImmediate(cb);
    return true;
  };
  return {
    get: () => undefined,
    getRange: () => [],
    getKeys: () => [],
    getUserSharedBuffer: (_k, init) => init,
    attemptLock: (key, _v, cb) => {
      if (held.has(key)) {
        waiters.set(key, [...(waiters.get(key) ?? []), cb]);
        return false;
      }
      held.add(key);
      return true;
    },
    unlock: (key) => release(key),
    resetReadTxn: () => undefined,
    lock: (key) => void held.add(key),
    release: (key) => void release(key),
  };
}

test('merged batches with crossing keys lock in one sorted order, so two running at once both commit', async () => {
  // Deadlock guard: batch 1 is [b, a], batch 2 is [a, b], and b is held elsewhere when both start. In
  // sorted order batch 1 waits for b holding a, batch 2 waits for a, and b's release lets both finish.
  // With the sort removed from withKeyLocks, batch 1 waits holding nothing, batch 2 takes a and waits
  // for b, batch 1 then takes b and waits for a: each gives up after its wait (verified by removing it).
  const raw = lockStore();
  const rows = new Map<string, ScheduleRow>();
  const store: ScheduleStore = {
    read: (key) => rows.get(key),
    keysOfUrl: () => [],
    locked: async (keys, fn) => {
      const r = await withKeyLocks(raw, 'schedule', keys, 300, fn);
      if (!r.locked) throw new Error(`gave up waiting for a lock of ${keys.join(', ')}`);
      return r.value;
    },
    commit: async (writes: readonly ScheduleWrite[]) => {
      await new Promise((r) => setImmediate(r));
      for (const w of writes) if (w.row) rows.set(w.key, w.row);
    },
  };
  const writes = new ScheduleWrites(store, defaultConfig);
  const [a, b] = ['https://example.com/a', 'https://example.com/b'];
  await writes.fileTargets(
    [a, b].map((url) => ({ url, dueAt: NOW - 120_000 })),
    NOW - 60_000,
  );
  const batcher = new GroupCommit({
    run: (list: readonly { key: string; outcome: 'rendered'; statusCode: number; completedAt: number }[]) =>
      writes.applyResults(list),
    maxItems: 2,
    maxWaitMs: 1000,
    setTimer: (fn, ms) => setTimeout(fn, ms),
    clearTimer: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
  });
  const K = (url: string) => `${url}|desktop`;
  const result = (url: string) => [
    { key: K(url), outcome: 'rendered' as const, statusCode: 200, completedAt: NOW },
  ];
  raw.lock(K(b));
  const first = Promise.all([batcher.submit(result(b)), batcher.submit(result(a))]);
  const second = Promise.all([batcher.submit(result(a)), batcher.submit(result(b))]);
  await new Promise((r) => setImmediate(r));
  raw.release(K(b));
  const answers = (await Promise.all([first, second])).flat(2);
  assert.equal(answers.length, 4);
  assert.ok(answers.every((x) => x.found));
  assert.ok(rows.get(K(a))!.nextRenderTime > NOW && rows.get(K(b))!.nextRenderTime > NOW);
});
