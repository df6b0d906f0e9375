// The table follower (services/runtime/tableFollower.ts) with a fake clock and hand-driven
// subscriptions: read, subscribe, apply in order, and after a failure or an end read again and
// subscribe again, once per gap; nothing after stop().
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DutyScheduler } from '../../util/duties/scheduler.js';
import { TableFollower, type TableSubscription } from '../../services/runtime/tableFollower.js';
import { FakeClock, turns } from '../fakeClock.js';

const RETRY_MS = 5000;

/** A subscription the test feeds: push events, then end it or fail it. */
class Feed implements TableSubscription<string> {
  private queue: Array<{ value?: string; end?: true; error?: Error }> = [];
  private wake: (() => void) | null = null;
  ended = false;
  push(value: string): void {
    this.queue.push({ value });
    this.wake?.();
  }
  finish(): void {
    this.queue.push({ end: true });
    this.wake?.();
  }
  fail(error: Error): void {
    this.queue.push({ error });
    this.wake?.();
  }
  end(): void {
    this.ended = true;
    this.finish();
  }
  async *[Symbol.asyncIterator](): AsyncIterator<string> {
    for (;;) {
      const next = this.queue.shift();
      if (!next) {
        await new Promise<void>((r) => (this.wake = r));
        continue;
      }
      if (next.error) throw next.error;
      if (next.end) return;
      yield next.value!;
    }
  }
}

function setup(opts: { reloadFails?: () => boolean } = {}) {
  const clock = new FakeClock(1_000_000);
  const errors: string[] = [];
  const log = { error: (msg: unknown) => void errors.push(String(msg)), debug: () => undefined };
  const scheduler = new DutyScheduler({ now: clock.now, timer: clock, log });
  const applied: string[] = [];
  const feeds: Feed[] = [];
  let reloads = 0;
  const follower = new TableFollower<string>({
    name: 'QueueThing',
    scheduler,
    retryMs: RETRY_MS,
    reload: async () => {
      reloads++;
      if (opts.reloadFails?.()) throw new Error('read failed');
      applied.push(`reload#${reloads}`);
    },
    subscribe: async () => {
      const f = new Feed();
      feeds.push(f);
      return f;
    },
    onEvent: (ev) => void applied.push(ev),
    log,
  });
  return { clock, errors, applied, feeds, follower, reloads: () => reloads };
}

test('a follower reads the table, then subscribes and applies its events in order', async () => {
  const w = setup();
  await w.follower.start();
  await turns();
  assert.equal(w.feeds.length, 1);
  w.feeds[0]!.push('a');
  w.feeds[0]!.push('b');
  await turns();
  assert.deepEqual(w.applied, ['reload#1', 'a', 'b']);
});

test('a subscription that fails is read again and reopened after retryMs, once, with one log line', async () => {
  const w = setup();
  await w.follower.start();
  await turns();
  w.feeds[0]!.fail(new Error('socket closed'));
  await turns();
  assert.equal(w.feeds.length, 1, 'no reopening before the wait');
  assert.deepEqual(w.errors, ['QueueThing subscription failed; retrying in 5 s']);
  await w.clock.advance(RETRY_MS - 1);
  assert.equal(w.feeds.length, 1);
  await w.clock.advance(1);
  assert.equal(w.feeds.length, 2);
  assert.deepEqual(w.applied, ['reload#1', 'reload#2']);
  w.feeds[1]!.push('c');
  await turns();
  assert.deepEqual(w.applied, ['reload#1', 'reload#2', 'c']);
  await w.clock.advance(10 * RETRY_MS);
  assert.equal(w.feeds.length, 2, 'a healthy subscription is not reopened');
});

test('a subscription that ends quietly is reopened too, without an error line', async () => {
  const w = setup();
  await w.follower.start();
  await turns();
  w.feeds[0]!.finish();
  await turns();
  await w.clock.advance(RETRY_MS);
  assert.equal(w.feeds.length, 2);
  assert.deepEqual(w.errors, []);
});

test('a read that fails while reopening still subscribes, so the follower is never left without one', async () => {
  let failReads = false;
  const w = setup({ reloadFails: () => failReads });
  await w.follower.start();
  await turns();
  failReads = true;
  w.feeds[0]!.fail(new Error('socket closed'));
  await turns();
  await w.clock.advance(RETRY_MS);
  assert.equal(w.feeds.length, 2, 'subscribed again although the read failed');
  assert.ok(w.errors.includes('QueueThing read failed'));
  w.feeds[1]!.push('d');
  await turns();
  assert.equal(w.applied.at(-1), 'd');
});

test('after stop() the subscription is ended and nothing reopens it', async () => {
  const w = setup();
  await w.follower.start();
  await turns();
  const first = w.feeds[0]!;
  await w.follower.stop();
  assert.equal(first.ended, true);
  await w.clock.advance(10 * RETRY_MS);
  assert.equal(w.feeds.length, 1);
  assert.equal(w.reloads(), 1);
});
