import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  flagBits,
  ReadySet,
  MIN_KEY_BYTES_PER_SLOT,
  type ReadyEntry,
  type ReadyEntryInput,
  type PublishResult,
} from '../../util/sharedMemory/readySet.js';
import { nameHash } from '../../util/leases/token.js';
import { SLOT_HEADER, S_COUNT } from '../../util/sharedMemory/readyLayout.js';

const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);
const MINUTE = 60_000;

function entry(key: string, i = 0): ReadyEntryInput {
  return {
    key,
    score: 10 - i / 3,
    dueMs: NOW - (i + 1) * MINUTE,
    fromSitemap: i % 2 === 0,
    verified: i % 3 !== 0,
    mark: 'none',
  };
}

function entries(prefix: string, n: number): ReadyEntryInput[] {
  return Array.from({ length: n }, (_, i) => entry(`https://ex.test/${prefix}/${i}`, i));
}

function twoViews(capacity = 8, keyBytes = MIN_KEY_BYTES_PER_SLOT): [ReadySet, ReadySet] {
  const buf = new ArrayBuffer(ReadySet.byteLength(capacity, keyBytes));
  return [new ReadySet(buf, capacity, keyBytes), new ReadySet(buf, capacity, keyBytes)];
}

const keysOf = (xs: ReadyEntry[]) => xs.map((e) => e.key);

/** Runs a step-wise operation to its end and returns its result. */
function finish<R>(steps: Generator<unknown, R, void>): R {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/** Advances a step-wise operation until it yields `step`; fails if it ends first. */
function stepTo(steps: Generator<string, unknown, void>, step: string): void {
  for (;;) {
    const r = steps.next();
    assert.equal(r.done, false, `operation ended before reaching '${step}'`);
    if (r.value === step) return;
  }
}

test('a set published through one view is taken, in order and with every field, through another', () => {
  const [keeper, claimer] = twoViews();
  const published = entries('a', 5);
  published[1]!.mark = 'urgent';
  published[2]!.mark = 'changed';
  const result = keeper.publish(published, NOW);
  assert.deepEqual(result, { published: 5, extras: 0, sections: 0, generation: 1, busy: false });
  const got = [...claimer.take(2), ...claimer.take(10)];
  assert.deepEqual(
    got,
    published.map((e) => ({ ...e, generation: 1, queue: 0 })),
  );
  assert.deepEqual(keeper.take(1), []);
});

test('the snapshot reports what was published and how much of it is consumed', () => {
  const [keeper, claimer] = twoViews();
  assert.deepEqual(claimer.snapshot(), {
    capacity: 8,
    count: 0,
    consumed: 0,
    remaining: 0,
    generation: 0,
    publishedAt: null,
  });
  keeper.publish(entries('a', 5), NOW + 1_700);
  claimer.take(2);
  assert.deepEqual(keeper.snapshot(), {
    capacity: 8,
    count: 5,
    consumed: 2,
    remaining: 3,
    generation: 1,
    publishedAt: NOW + 1_000, // whole seconds, floored
  });
});

test('a publish larger than the capacity keeps the best entries up to the capacity', () => {
  const [set] = twoViews(4);
  assert.equal(set.publish(entries('a', 10), NOW).published, 4);
  assert.deepEqual(keysOf(set.take(10)), keysOf(entries('a', 4) as ReadyEntry[]));
});

test('an empty publish withdraws the set', () => {
  const [set] = twoViews();
  set.publish(entries('a', 3), NOW);
  assert.equal(set.publish([], NOW).published, 0);
  assert.deepEqual(set.take(3), []);
});

test('the cursor never runs away: takes past the end leave it at the end, and the next publish serves its head', () => {
  // Fails with the clamp removed from takeSteps: the cursor then ends at 5 + 1000 × 10.
  const [keeper, claimer] = twoViews();
  keeper.publish(entries('a', 5), NOW);
  assert.equal(claimer.take(10).length, 5);
  for (let i = 0; i < 1000; i++) assert.deepEqual(claimer.take(10), []);
  assert.equal(claimer.cursorPosition(), 5);
  assert.equal(claimer.snapshot().remaining, 0);
  keeper.publish(entries('b', 3), NOW + 1000);
  assert.deepEqual(keysOf(claimer.take(2)), ['https://ex.test/b/0', 'https://ex.test/b/1']);
});

test('a take that straddles a publish may repeat an entry but never skips the new head', () => {
  const [keeper, claimer] = twoViews();
  keeper.publish(entries('a', 5), NOW);
  claimer.take(2);
  const straddler = claimer.takeSteps(2);
  stepTo(straddler, 'reserved'); // holds positions 2 and 3 of the old set
  const b = keeper.publish(entries('b', 3), NOW + 1000);
  const late = finish(straddler);
  // It reads the set active when it looks, at the positions it reserved: a future repeat, not a loss.
  assert.deepEqual(keysOf(late), ['https://ex.test/b/2']);
  assert.equal(late[0]!.generation, b.generation);
  assert.deepEqual(keysOf(claimer.take(3)), [
    'https://ex.test/b/0',
    'https://ex.test/b/1',
    'https://ex.test/b/2',
  ]);
});

test('a take that lands between the flip and the cursor reset is re-served from the head afterwards', () => {
  const [keeper, claimer] = twoViews();
  keeper.publish(entries('a', 5), NOW);
  claimer.take(2);
  const publish = keeper.publishSteps(entries('b', 5), NOW + 1000);
  stepTo(publish, 'released'); // flipped and released, cursor not yet reset
  assert.deepEqual(keysOf(claimer.take(2)), ['https://ex.test/b/2', 'https://ex.test/b/3']);
  finish(publish);
  assert.deepEqual(keysOf(claimer.take(1)), ['https://ex.test/b/0']);
});

test('a take never returns entries from a slot rewritten while it read them', () => {
  // Fails with the seq re-check in takeSteps removed: the take then labels the third publish's keys
  // with the first publish's generation.
  const [keeper, claimer] = twoViews();
  const generationKeys = new Map<number, string[]>();
  const publish = (prefix: string, at: number) => {
    const xs = entries(prefix, 4);
    generationKeys.set(keeper.publish(xs, at).generation, keysOf(xs as ReadyEntry[]));
  };
  publish('a', NOW);
  const reader = claimer.takeSteps(3);
  stepTo(reader, 'slotRead'); // has read the header of a's slot
  publish('b', NOW + 1000);
  publish('c', NOW + 2000); // rewrites a's slot
  const got = finish(reader);
  assert.ok(got.length > 0);
  for (const e of got)
    assert.ok(generationKeys.get(e.generation)!.includes(e.key), `${e.key} in gen ${e.generation}`);
});

test('a take that meets a slot still held by its writer gives up, and the head is served once it is released', () => {
  const [keeper, claimer] = twoViews();
  keeper.publish(entries('a', 3), NOW);
  const publish = keeper.publishSteps(entries('b', 3), NOW + 1000);
  stepTo(publish, 'flipped');
  assert.deepEqual(claimer.take(2), []);
  finish(publish);
  assert.deepEqual(keysOf(claimer.take(2)), ['https://ex.test/b/0', 'https://ex.test/b/1']);
});

/** A writer's fill that writes `xs` as the global top. */
const fillWith =
  (xs: readonly ReadyEntryInput[]) => (w: import('../../util/sharedMemory/readySet.js').ReadyWriter) => {
    for (const e of xs) w.top(e.key, e.score, e.dueMs, 0, e.route);
    return [];
  };

test('a staged publish stays out of sight until its flip, which stamps the flip instant', () => {
  const [keeper, claimer] = twoViews();
  keeper.publish(entries('a', 3), NOW);
  const staged = keeper.stageWith(NOW + MINUTE, fillWith(entries('b', 4)));
  assert.ok(staged !== null);
  assert.deepEqual(keysOf(claimer.take(1)), ['https://ex.test/a/0'], 'takes still read the active set');
  assert.equal(keeper.publish(entries('c', 2), NOW + 1000).busy, true, 'the staged slot is held');
  const r = staged.flip(NOW + MINUTE + 5);
  assert.equal(r.busy, false);
  assert.equal(r.published, 4);
  assert.deepEqual(
    keysOf(claimer.take(4)),
    entries('b', 4).map((e) => e.key),
  );
  assert.equal(claimer.snapshot().publishedAt, NOW + MINUTE);
  assert.equal(staged.flip(NOW + MINUTE + 9).busy, true, 'a staged slot flips once');
});

test('an abandoned stage lets its slot go: the active set stays and the next publish is not busy', () => {
  // Fails with abandon() a no-op: the next publish then meets the slot still held.
  const [keeper, claimer] = twoViews();
  const g = keeper.publish(entries('a', 3), NOW).generation;
  const staged = keeper.stageWith(NOW + MINUTE, fillWith(entries('b', 4)))!;
  staged.abandon();
  assert.equal(claimer.snapshot().generation, g);
  assert.deepEqual(
    keysOf(claimer.take(3)),
    entries('a', 3).map((e) => e.key),
  );
  const next = keeper.publish(entries('c', 2), NOW + 1000);
  assert.equal(next.busy, false);
  assert.deepEqual(
    keysOf(claimer.take(2)),
    entries('c', 2).map((e) => e.key),
  );
  assert.equal(staged.flip(NOW + MINUTE).busy, true, 'an abandoned stage never flips');
  assert.ok(keeper.stageWith(NOW + 2000, fillWith(entries('d', 1))) !== null, 'the slot can be staged again');
});

test('an abandoned stage empties its slot header before letting it go, so a late reader finds nothing', () => {
  // Fails without the header reset in abandon(): the slot's counts still describe its older generation.
  const buf = new ArrayBuffer(ReadySet.byteLength(8, MIN_KEY_BYTES_PER_SLOT));
  const keeper = new ReadySet(buf, 8, MIN_KEY_BYTES_PER_SLOT);
  const header = new Int32Array(buf, 0, SLOT_HEADER[1]! + S_COUNT + 1);
  keeper.publish(entries('a', 3), NOW); // slot 1 active
  keeper.publish(entries('b', 2), NOW + 1000); // slot 0 active, slot 1 still counts a's 3
  assert.equal(header[SLOT_HEADER[1]! + S_COUNT], 3);
  keeper.stageWith(NOW + MINUTE, fillWith(entries('c', 4)))!.abandon();
  assert.equal(header[SLOT_HEADER[1]! + S_COUNT], 0);
  assert.equal(keeper.publish(entries('d', 1), NOW + 2000).busy, false);
});

test('a fill that throws lets the slot go instead of holding it until the stall limit', () => {
  const [keeper, claimer] = twoViews();
  assert.throws(
    () =>
      keeper.publishWith(NOW, () => {
        throw new Error('walk failed');
      }),
    /walk failed/,
  );
  assert.throws(() => keeper.stageWith(NOW, () => assert.fail('stage walk failed')), /stage walk failed/);
  assert.equal(keeper.publish(entries('a', 2), NOW + 1000).busy, false);
  assert.deepEqual(
    keysOf(claimer.take(2)),
    entries('a', 2).map((e) => e.key),
  );
});

test('a second publisher is refused while the first holds the slot', () => {
  const [keeper, intruder] = twoViews();
  const first = keeper.publishSteps(entries('a', 3), NOW);
  stepTo(first, 'acquired');
  assert.deepEqual(intruder.publish(entries('b', 3), NOW), {
    published: 0,
    extras: 0,
    sections: 0,
    generation: 0,
    busy: true,
  });
  assert.equal(finish(first).published, 3);
  assert.deepEqual(keysOf(intruder.take(1)), ['https://ex.test/a/0']);
});

test('publishWith writes rows handed one by one exactly as publish writes the same entries', () => {
  const rows = entries('w', 12).map((e, i) => ({ ...e, route: i % 3 === 0 ? 'news' : 'blog' }));
  const extras = entries('x', 5).map((e) => ({ ...e, route: 'news' }));
  const [arrays, arraysReader] = twoViews(8);
  const [stream, streamReader] = twoViews(8);
  const a = arrays.publish(rows, NOW, { entries: extras, complete: new Set(['news', 'blog']) });
  const flags = (e: ReadyEntryInput) => flagBits(e.fromSitemap, e.verified, e.mark);
  const b = stream.publishWith(NOW, (w) => {
    for (const e of rows) w.top(e.key, e.score, e.dueMs, flags(e), e.route);
    for (const e of extras) w.extra(e.key, e.score, e.dueMs, flags(e), e.route);
    return ['news', 'blog'];
  });
  assert.deepEqual(b, a);
  assert.deepEqual(streamReader.take(20), arraysReader.take(20));
  assert.deepEqual(stream.section(nameHash('news')), arrays.section(nameHash('news')));
  assert.deepEqual(
    streamReader.takeSection(nameHash('news'), 20),
    arraysReader.takeSection(nameHash('news'), 20),
  );
});

test('publishWith still runs the fill when another writer holds the slot, and writes nothing', () => {
  const [keeper, intruder] = twoViews();
  const first = keeper.publishSteps(entries('a', 3), NOW);
  stepTo(first, 'acquired');
  let handed = 0;
  const r = intruder.publishWith(NOW, (w) => {
    for (const e of entries('b', 3)) {
      w.top(e.key, e.score, e.dueMs, 0, undefined);
      handed++;
    }
    return [];
  });
  assert.equal(handed, 3);
  assert.equal(r.busy, true);
  assert.equal(finish(first).published, 3);
  assert.deepEqual(keysOf(intruder.take(3)), keysOf(entries('a', 3) as ReadyEntry[]));
});

test('a publisher that died mid-write is replaced after 10 s, not before, and cannot write once replaced', () => {
  const [keeper, successor] = twoViews();
  const dead = keeper.publishSteps(entries('a', 3), NOW);
  stepTo(dead, 'acquired'); // then never resumed, as if its thread were killed
  assert.equal(successor.publish(entries('b', 3), NOW + 9_000).busy, true);
  assert.equal(successor.publish(entries('b', 3), NOW + 10_000).published, 3);
  // If the "dead" writer was only stalled, it notices on resuming and backs off without touching the set.
  const result: PublishResult = finish(dead);
  assert.equal(result.busy, true);
  assert.deepEqual(keysOf(successor.take(3)), keysOf(entries('b', 3) as ReadyEntry[]));
});

test('a 600-byte key is published intact', () => {
  const [keeper, claimer] = twoViews();
  const long = `https://ex.test/${'p'.repeat(584)}`;
  assert.equal(Buffer.byteLength(long), 600);
  keeper.publish([entry('https://ex.test/short', 0), entry(long, 1), entry('https://ex.test/after', 2)], NOW);
  assert.deepEqual(keysOf(claimer.take(3)), ['https://ex.test/short', long, 'https://ex.test/after']);
});

test('multi-byte keys (emoji, CJK, combining marks) round trip', () => {
  const [keeper, claimer] = twoViews();
  const keys = [
    'https://ex.test/🚀/launch?q=🎉',
    'https://例え.テスト/東京/渋谷区',
    'https://ex.test/cafe\u0301/naïve',
    'https://ex.test/한국어/😀😃😄',
  ];
  keeper.publish(
    keys.map((k, i) => entry(k, i)),
    NOW,
  );
  assert.deepEqual(keysOf(claimer.take(10)), keys);
});

test('a generation ends where the next key does not fit: no key is truncated or skipped', () => {
  const [keeper, claimer] = twoViews(8, 2048);
  const key600 = (i: number) => `https://ex.test/${i}/${'k'.repeat(582)}`;
  const xs = [0, 1, 2, 3].map((i) => entry(key600(i), i));
  xs.push(entry('https://ex.test/small', 4)); // would fit on its own, but comes after the one that does not
  assert.equal(keeper.publish(xs, NOW).published, 3);
  assert.deepEqual(keysOf(claimer.take(10)), [key600(0), key600(1), key600(2)]);
});

test('a key that fills the key region exactly is kept', () => {
  const [keeper, claimer] = twoViews(8, 2048);
  const exact = '🚀'.repeat(512); // 4 bytes each
  assert.equal(Buffer.byteLength(exact), 2048);
  assert.equal(keeper.publish([entry(exact), entry('x', 1)], NOW).published, 1);
  assert.deepEqual(keysOf(claimer.take(2)), [exact]);
});

test('Int32 seconds from the 2024 epoch hold times past 2038', () => {
  const [keeper, claimer] = twoViews();
  const now2040 = Date.UTC(2040, 5, 1, 12, 0, 30, 500);
  assert.ok(now2040 / 1000 > 2 ** 31, 'Unix seconds would have overflowed Int32 here');
  const due = Date.UTC(2040, 5, 1, 11, 59);
  keeper.publish([{ ...entry('https://ex.test/late'), dueMs: due }], now2040);
  assert.equal(claimer.take(1)[0]!.dueMs, due);
  assert.equal(claimer.snapshot().publishedAt, Date.UTC(2040, 5, 1, 12, 0, 30));
});

test('flags, marks, exact scores and an unknown due time round trip', () => {
  const [keeper, claimer] = twoViews();
  const xs: ReadyEntryInput[] = [
    {
      key: 'https://ex.test/1',
      score: 1 / 3,
      dueMs: NOW,
      fromSitemap: true,
      verified: false,
      mark: 'urgent',
    },
    { key: 'https://ex.test/2', score: 0, dueMs: NaN, fromSitemap: false, verified: true, mark: 'changed' },
    {
      key: 'https://ex.test/3',
      score: 1e12,
      dueMs: NOW - 1000,
      fromSitemap: true,
      verified: true,
      mark: 'none',
    },
  ];
  keeper.publish(xs, NOW);
  assert.deepEqual(
    claimer.take(3),
    xs.map((e) => ({ ...e, generation: 1, queue: 0 })),
  );
});

test('a buffer laid out for one capacity refuses another, and reports the original', () => {
  const buf = new ArrayBuffer(ReadySet.byteLength(16, 4096));
  assert.equal(ReadySet.storedLayout(buf), null);
  new ReadySet(buf, 16, 4096);
  assert.throws(() => new ReadySet(buf, 8, 4096), /laid out for capacity 16/);
  assert.deepEqual(ReadySet.storedLayout(buf), { capacity: 16, keyBytesPerSlot: 4096 });
  assert.throws(() => new ReadySet(new ArrayBuffer(1024), 16, 4096), /needs \d+ bytes/);
  assert.throws(() => new ReadySet(buf, 16, 1000), /at least 2048/);
});

// --- random interleavings -------------------------------------------------------------------------

/** One keeper publishing (one publish at a time) and any number of takes, advanced a step at a time. */
class Interleaving {
  readonly keeper: ReadySet;
  readonly claimer: ReadySet;
  readonly published: ReadyEntryInput[][] = [];
  readonly generationOf: number[] = [];
  readonly results: { reservedAt: number; got: ReadyEntry[] }[] = [];
  clock = 0;
  publisher: { steps: Generator<string, PublishResult, void>; no: number } | null = null;
  takers: { steps: Generator<string, ReadyEntry[], void>; reservedAt: number }[] = [];

  constructor(readonly capacity: number) {
    [this.keeper, this.claimer] = twoViews(capacity);
  }

  startPublish(size: number): number {
    const no = this.published.length;
    const xs = entries(`p${no}`, size);
    this.published.push(xs);
    this.publisher = { steps: this.keeper.publishSteps(xs, NOW + no * 1000), no };
    return no;
  }

  stepPublisher(): void {
    const p = this.publisher!;
    const r = p.steps.next();
    if (!r.done) return;
    this.generationOf[p.no] = r.value.generation;
    this.publisher = null;
    this.clock++;
  }

  finishPublisher(): void {
    while (this.publisher) this.stepPublisher();
  }

  startTake(n: number): void {
    this.takers.push({ steps: this.claimer.takeSteps(n), reservedAt: -1 });
  }

  stepTaker(i: number): void {
    const t = this.takers[i]!;
    const r = t.steps.next();
    if (!r.done) {
      if (r.value === 'reserved') t.reservedAt = ++this.clock;
      return;
    }
    this.results.push({ reservedAt: t.reservedAt, got: r.value });
    this.takers.splice(i, 1);
  }

  /** Steps one in-flight operation chosen by `pick` (the publisher only when `withPublisher`). */
  stepSomeone(pick: number, withPublisher: boolean): void {
    const actors = this.takers.length + (withPublisher && this.publisher ? 1 : 0);
    if (actors === 0) return;
    const i = pick % actors;
    if (i === this.takers.length) this.stepPublisher();
    else this.stepTaker(i);
  }

  finishTakers(): void {
    while (this.takers.length > 0) this.stepTaker(0);
  }

  /** Every entry served is exactly what its generation published at that position. */
  assertServedAsPublished(): void {
    for (const { got } of this.results) {
      for (const e of got) {
        const [, no, index] = /\/p(\d+)\/(\d+)$/.exec(e.key)!.map(Number);
        assert.equal(e.generation, this.generationOf[no!], `${e.key} carries its own generation`);
        assert.deepEqual(
          { ...e, generation: 0 },
          { ...this.published[no!]![index!]!, generation: 0, queue: 0 },
        );
      }
    }
  }
}

type Command =
  { kind: 'take'; n: number } | { kind: 'publish'; size: number } | { kind: 'step'; actor: number };

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('take' as const), n: fc.integer({ min: 1, max: 4 }) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('publish' as const), size: fc.integer({ min: 0, max: 10 }) }),
  },
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('step' as const), actor: fc.nat() }) },
);

test('over random interleavings, a publish is followed by its head and every entry of it is served', () => {
  // Fails when publishSteps resets the cursor before the flip, when takeSteps reads the active slot
  // before reserving, or when the clamp is removed (each checked by hand).
  fc.assert(
    fc.property(
      fc.array(command, { maxLength: 60 }),
      fc.integer({ min: 0, max: 3 }),
      fc.integer({ min: 0, max: 10 }),
      fc.array(fc.nat(), { maxLength: 40 }),
      fc.array(fc.nat(), { maxLength: 40 }),
      (commands, freshTakes, finalSize, duringFinal, afterFinal) => {
        const run = new Interleaving(8);
        // Phase 1: publishes (one at a time) and takes, interleaved step by step.
        for (const c of commands) {
          if (c.kind === 'take') run.startTake(c.n);
          else if (c.kind === 'publish') {
            if (run.publisher) run.stepPublisher();
            else run.startPublish(c.size);
          } else run.stepSomeone(c.actor, true);
        }
        run.finishPublisher();
        // Phase 2: the final publish, interleaved with the takes still in flight and new ones.
        for (let i = 0; i < freshTakes; i++) run.startTake(i + 1);
        const finalNo = run.startPublish(finalSize);
        for (const pick of duringFinal) {
          if (!run.publisher) break;
          if (pick % 7 === 0) run.startTake((pick % 3) + 1);
          else run.stepSomeone(pick, true);
        }
        run.finishPublisher();
        const finalAt = run.clock;
        // Phase 3: no more publishes. Stragglers finish, new takes run, then a drain to empty.
        for (const pick of afterFinal) {
          if (pick % 4 === 0) run.startTake((pick % 3) + 1);
          else run.stepSomeone(pick, false);
        }
        run.finishTakers();
        for (let i = 0; i < 100; i++) {
          run.startTake(1);
          run.finishTakers();
          if (run.results.at(-1)!.got.length === 0) break;
        }

        run.assertServedAsPublished();
        const finalGeneration = run.generationOf[finalNo]!;
        const finalCount = Math.min(finalSize, 8);
        // The first take to reserve after the final publish completed starts at its head (or, at worst,
        // serves an older generation) — never past the head.
        const after = run.results.filter((r) => r.reservedAt > finalAt);
        const first = after.sort((a, b) => a.reservedAt - b.reservedAt)[0]!;
        if (finalCount > 0) {
          const head = first.got[0];
          assert.ok(head, 'the first take after the publish got nothing');
          assert.ok(
            head.generation !== finalGeneration || head.key === run.published[finalNo]![0]!.key,
            `first take after the publish started at ${head.key}`,
          );
        }
        // Never skips: every position of the final set was served.
        const served = run.results.flatMap((r) => r.got.filter((e) => e.generation === finalGeneration));
        assert.equal(new Set(served.map((e) => e.key)).size, finalCount);
        // And the cursor sits at the end of the set, not beyond.
        assert.equal(run.claimer.cursorPosition(), finalCount);
      },
    ),
    { numRuns: 400 },
  );
});

test('over random interleavings with whole publishes landing inside takes, every entry is served as published', () => {
  // Fails when the seq re-check in takeSteps is removed: a take then serves a rewritten slot's keys
  // under the generation it read before the rewrite.
  const op = fc.oneof(
    fc.record({ kind: fc.constant('take' as const), n: fc.integer({ min: 1, max: 4 }) }),
    fc.record({ kind: fc.constant('publish' as const), size: fc.integer({ min: 1, max: 8 }) }),
    fc.record({ kind: fc.constant('step' as const), actor: fc.nat() }),
    fc.record({ kind: fc.constant('step' as const), actor: fc.nat() }),
  );
  fc.assert(
    fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
      const run = new Interleaving(8);
      for (const c of ops) {
        if (c.kind === 'take') run.startTake(c.n);
        else if (c.kind === 'publish') {
          run.startPublish(c.size);
          run.finishPublisher();
        } else run.stepSomeone(c.actor, false);
      }
      run.finishTakers();
      run.assertServedAsPublished();
    }),
    { numRuns: 1000 },
  );
});

// --- sections ----------------------------------------------------------------------------------------------

const PRODUCT = nameHash('product');
const BLOG = nameHash('blog');

/** `n` entries of `route`, scored from `top` down, keyed under /<prefix>/. */
function routed(prefix: string, route: string, n: number, top = 10): ReadyEntryInput[] {
  return entries(prefix, n).map((e, i) => ({ ...e, score: top - i / 100, route }));
}

test("a section take hands out one queue's entries best first, its top rows then its extras, and leaves the global cursor alone", () => {
  const [keeper, claimer] = twoViews(8);
  const blog = routed('b', 'blog', 7);
  const product = routed('p', 'product', 1, 5);
  const top = [...blog, ...product]; // the global top: 7 blog rows, then 1 product row
  const extras = routed('px', 'product', 3, 4); // product's next rows, past the top
  const r = keeper.publish(top, NOW, { entries: extras, complete: new Set(['product']) });
  assert.deepEqual(
    { published: r.published, extras: r.extras, sections: r.sections },
    { published: 8, extras: 3, sections: 2 },
  );
  assert.deepEqual(keysOf(claimer.takeSection(PRODUCT, 2)), [product[0]!.key, extras[0]!.key]);
  assert.equal(claimer.cursorPosition(), 0, 'the global cursor did not move');
  assert.deepEqual(claimer.section(PRODUCT), {
    count: 4,
    taken: 2,
    remaining: 2,
    complete: true,
    headScore: extras[1]!.score,
  });
  assert.deepEqual(keysOf(claimer.takeSection(PRODUCT, 10)), keysOf(extras.slice(1) as ReadyEntry[]));
  assert.deepEqual(claimer.takeSection(PRODUCT, 10), [], 'used up');
  assert.equal(claimer.section(PRODUCT)!.headScore, -Infinity);
  assert.equal(claimer.section(BLOG)!.complete, false, 'not named complete by the publisher');
  assert.equal(claimer.section(nameHash('docs')), null, 'a queue with nothing published has no section');
  // The unscoped take reads the global top only, in its order, extras never.
  assert.deepEqual(keysOf(claimer.take(20)), keysOf(top as ReadyEntry[]));
  const e = claimer.takeSection(BLOG, 1)[0]!;
  const { route: _route, ...fields } = blog[0]!;
  assert.deepEqual(e, { ...fields, generation: r.generation, queue: BLOG });
});

test('the next publish resets every section cursor to its head', () => {
  const [keeper, claimer] = twoViews(8);
  keeper.publish(routed('a', 'product', 4), NOW);
  assert.equal(claimer.takeSection(PRODUCT, 3).length, 3);
  const b = routed('b', 'product', 4);
  keeper.publish(b, NOW + 1000);
  assert.deepEqual(keysOf(claimer.takeSection(PRODUCT, 4)), keysOf(b as ReadyEntry[]));
});

test('a section take that read the slot before a publish landed serves the new section from its head', () => {
  // Fails when reserveInSection ignores the cursor's generation tag: the straddler then spends the new
  // set's first positions on the old slot's rows, and the new head is never handed out.
  const [keeper, claimer] = twoViews(8);
  keeper.publish(routed('a', 'product', 6), NOW);
  claimer.takeSection(PRODUCT, 2);
  const straddler = claimer.takeSectionSteps(PRODUCT, 2);
  stepTo(straddler, 'slotRead'); // has read a's slot and section, not yet reserved
  const b = routed('b', 'product', 4);
  const pb = keeper.publish(b, NOW + 1000);
  const got = finish(straddler);
  const later = claimer.takeSection(PRODUCT, 4);
  const served = [...got, ...later].filter((e) => e.generation === pb.generation);
  assert.deepEqual(keysOf(served), keysOf(b as ReadyEntry[]), "every entry of b's section, once, in order");
});

test('a section take whose slot is rewritten while it reads drops what it read and serves the active set', () => {
  const [keeper, claimer] = twoViews(8);
  keeper.publish(routed('a', 'product', 6), NOW);
  const reader = claimer.takeSectionSteps(PRODUCT, 3);
  stepTo(reader, 'reserved'); // reserved positions 0..3 of a's section
  keeper.publish(routed('b', 'product', 6), NOW + 1000);
  const c = routed('c', 'product', 6);
  const pc = keeper.publish(c, NOW + 2000); // rewrites a's slot
  const got = finish(reader);
  assert.deepEqual(keysOf(got), keysOf(c.slice(0, 3) as ReadyEntry[]));
  assert.ok(got.every((e) => e.generation === pc.generation));
});

test('a section take between the flip and the cursor reset resets the cursor itself and is not undone', () => {
  const [keeper, claimer] = twoViews(8);
  keeper.publish(routed('a', 'product', 5), NOW);
  claimer.takeSection(PRODUCT, 4);
  const b = routed('b', 'product', 5);
  const publish = keeper.publishSteps(b, NOW + 1000);
  stepTo(publish, 'released'); // flipped and released, section cursors not yet reset
  const early = claimer.takeSection(PRODUCT, 2);
  finish(publish);
  const rest = claimer.takeSection(PRODUCT, 5);
  assert.deepEqual(keysOf([...early, ...rest]), keysOf(b as ReadyEntry[]), 'each entry once, from the head');
});

test("an extra whose key does not fit ends its queue's extras; other queues' extras go on", () => {
  const keyBytes = MIN_KEY_BYTES_PER_SLOT;
  const [keeper, claimer] = twoViews(8, keyBytes); // the extras' key region is 2,048 bytes too
  const long = `https://ex.test/${'x'.repeat(1500)}`;
  const product = [routed('p', 'product', 1)[0]!, { ...routed('q', 'product', 1)[0]!, key: long }];
  const product2 = { ...product[0]!, key: `${long}/2` }; // fits nowhere after `long`
  const after = routed('pp', 'product', 1, 3)[0]!; // would fit, but comes after a cut in product's order
  const blog = routed('b', 'blog', 2, 2);
  const r = keeper.publish([], NOW, {
    entries: [product[1]!, product2, after, ...blog],
    complete: new Set(),
  });
  assert.equal(r.extras, 3);
  assert.deepEqual(keysOf(claimer.takeSection(PRODUCT, 5)), [long]);
  assert.deepEqual(keysOf(claimer.takeSection(BLOG, 5)), keysOf(blog as ReadyEntry[]));
});

test('a queue cut from the global top by the key region gets no extras and is not complete', () => {
  const [keeper, claimer] = twoViews(8, MIN_KEY_BYTES_PER_SLOT);
  const fits = routed('b', 'blog', 1)[0]!;
  const tooLong = { ...routed('p', 'product', 1)[0]!, key: `https://ex.test/${'y'.repeat(2100)}` };
  const r = keeper.publish([fits, tooLong], NOW, {
    entries: [...routed('px', 'product', 2), ...routed('bx', 'blog', 1, 5)],
    complete: new Set(['product', 'blog']),
  });
  assert.equal(r.published, 1);
  assert.equal(claimer.section(PRODUCT), null, "product's rows after its cut row are not published");
  assert.equal(claimer.section(BLOG)!.count, 2);
  assert.equal(claimer.section(BLOG)!.complete, true);
});

test('the layout is versioned: a buffer holding the previous layout (RDY2) is refused, not reinterpreted', () => {
  const buf = new ArrayBuffer(ReadySet.byteLength(8, MIN_KEY_BYTES_PER_SLOT));
  new Int32Array(buf)[0] = 0x52445932;
  assert.throws(() => new ReadySet(buf, 8, MIN_KEY_BYTES_PER_SLOT), /another structure/);
});

test('over random interleavings of section takes and publishes, each section is served once, as published, from its head', () => {
  // Fails when reserveInSection ignores the generation tag (checked by hand; the seq re-check has the
  // deterministic test above).
  const op = fc.oneof(
    fc.record({ kind: fc.constant('take' as const), n: fc.integer({ min: 1, max: 3 }), q: fc.boolean() }),
    fc.record({ kind: fc.constant('publish' as const), size: fc.integer({ min: 0, max: 8 }) }),
    fc.record({ kind: fc.constant('step' as const), actor: fc.nat() }),
    fc.record({ kind: fc.constant('step' as const), actor: fc.nat() }),
  );
  fc.assert(
    fc.property(fc.array(op, { maxLength: 50 }), fc.array(fc.nat(), { maxLength: 40 }), (ops, during) => {
      const [keeper, claimer] = twoViews(8);
      const published = new Map<number, ReadyEntryInput[]>();
      const served: ReadyEntry[] = [];
      let takers: Generator<string, ReadyEntry[], void>[] = [];
      let no = 0;
      let publisher: { steps: Generator<string, PublishResult, void>; xs: ReadyEntryInput[] } | null = null;
      const startPublish = (size: number) => {
        const xs = entries(`p${no}`, size).map((e, i) => ({ ...e, route: i % 3 === 0 ? 'blog' : 'product' }));
        const extra = entries(`x${no}`, 2).map((e) => ({ ...e, score: 0, route: 'product' }));
        publisher = {
          steps: keeper.publishSteps(xs, NOW + no * 1000, { entries: extra, complete: new Set() }),
          xs: [...xs, ...extra],
        };
        no++;
      };
      const stepOne = (pick: number, withPublisher: boolean) => {
        const actors = takers.length + (withPublisher && publisher ? 1 : 0);
        if (actors === 0) return;
        const i = pick % actors;
        if (i === takers.length) {
          const r = publisher!.steps.next();
          if (r.done) {
            if (!r.value.busy) published.set(r.value.generation, publisher!.xs);
            publisher = null;
          }
          return;
        }
        const r = takers[i]!.next();
        if (r.done) {
          served.push(...r.value);
          takers = takers.filter((_, j) => j !== i);
        }
      };
      for (const c of ops) {
        if (c.kind === 'take') takers.push(claimer.takeSectionSteps(c.q ? PRODUCT : BLOG, c.n));
        else if (c.kind === 'publish') {
          if (!publisher) startPublish(c.size);
        } else stepOne(c.actor, true);
      }
      while (publisher) stepOne(takers.length, true);
      // The final publish, with takes in flight and new ones starting while it runs.
      startPublish(6);
      for (const pick of during) {
        if (!publisher) break;
        if (pick % 5 === 0) takers.push(claimer.takeSectionSteps(pick % 2 ? PRODUCT : BLOG, (pick % 3) + 1));
        else stepOne(pick, true);
      }
      while (publisher) stepOne(takers.length, true);
      const finalGeneration = Math.max(...published.keys());
      while (takers.length > 0) stepOne(0, false);
      for (const q of [PRODUCT, BLOG]) for (let i = 0; i < 20; i++) served.push(...claimer.takeSection(q, 1));

      for (const e of served) {
        const xs = published.get(e.generation);
        assert.ok(xs, `${e.key} from a generation that was published`);
        const source = xs.find((x) => x.key === e.key);
        assert.ok(source, `${e.key} belongs to generation ${e.generation}`);
        assert.equal(e.queue, nameHash(source.route!), `${e.key} served from its own queue's section`);
      }
      // The final set's sections are served whole, each entry exactly once.
      const finalKeys = served.filter((e) => e.generation === finalGeneration).map((e) => e.key);
      assert.equal(new Set(finalKeys).size, finalKeys.length, 'no entry of the final set twice');
      assert.deepEqual(
        [...finalKeys].sort(),
        published
          .get(finalGeneration)!
          .map((x) => x.key)
          .sort(),
      );
    }),
    { numRuns: 1000 },
  );
});

test('peek reads the active top in order without taking: the cursor stays and a take still gets the head', () => {
  const [keeper, worker] = twoViews(8);
  keeper.publish(entries('p', 5), NOW);
  const seen = worker.peek(0, Infinity);
  const k = (i: number) => `https://ex.test/p/${i}`;
  assert.deepEqual(seen && keysOf(seen.entries), [0, 1, 2, 3, 4].map(k));
  assert.deepEqual(keysOf(worker.peek(1, 3)!.entries), [k(1), k(2)]);
  assert.equal(worker.cursorPosition(), 0);
  assert.deepEqual(keysOf(worker.take(2)), [k(0), k(1)]);
  // Taken entries stay in the set: peek still shows the whole published top.
  assert.equal(worker.peek(0, Infinity)!.entries.length, 5);
});
