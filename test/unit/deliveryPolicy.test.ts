// Delivery rules with plain values and a fake clock (ms): outcomes, retry pacing, per-hook rate, the queue.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  BoundedQueue,
  classifyResponse,
  DROP_WARN_INTERVAL_MS,
  RateLimiter,
  retryDelayMs,
} from '../../util/deliveryPolicy.js';

test('2xx is success; 408, 429 and 5xx retry; redirects and other 4xx fail', () => {
  for (const s of [200, 201, 202, 204, 299])
    assert.equal(classifyResponse({ status: s }), 'success', String(s));
  for (const s of [408, 429, 500, 502, 503, 504, 599])
    assert.equal(classifyResponse({ status: s }), 'retry', String(s));
  for (const s of [100, 301, 302, 303, 307, 308, 400, 401, 403, 404, 410, 413, 422, 600]) {
    assert.equal(classifyResponse({ status: s }), 'fail', String(s));
  }
});

test('network errors and timeouts retry; a refused address never does', () => {
  assert.equal(classifyResponse({ error: 'network' }), 'retry');
  assert.equal(classifyResponse({ error: 'timeout' }), 'retry');
  assert.equal(classifyResponse({ error: 'refused' }), 'fail');
});

test('retries wait about 1 s, then about 5 s, always within ±20 %', () => {
  fc.assert(
    fc.property(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (r) => {
      const first = retryDelayMs(1, () => r);
      const second = retryDelayMs(2, () => r);
      assert.ok(first >= 800 && first <= 1200, String(first));
      assert.ok(second >= 4000 && second <= 6000, String(second));
      assert.equal(
        retryDelayMs(3, () => r),
        second,
        'later attempts reuse the last step',
      );
    }),
  );
  assert.equal(
    retryDelayMs(1, () => 0),
    800,
  );
  assert.equal(
    retryDelayMs(1, () => 0.5),
    1000,
  );
  assert.equal(
    retryDelayMs(2, () => 0.999999),
    6000,
  );
});

test('a hook may take 120 deliveries at once, then refills two a second', () => {
  const limiter = new RateLimiter(120);
  const t0 = 1_000_000;
  for (let i = 0; i < 120; i++) assert.equal(limiter.tryTake('h1', t0), true, `take ${i}`);
  assert.equal(limiter.tryTake('h1', t0), false);
  assert.equal(limiter.tryTake('h1', t0 + 499), false);
  assert.equal(limiter.tryTake('h1', t0 + 500), true);
  assert.equal(limiter.tryTake('h1', t0 + 500), false);
  // Other hooks are not affected by h1's rate.
  assert.equal(limiter.tryTake('h2', t0), true);
});

test('no window of one minute ever admits more than the rate plus one refill', () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: 2000 }), { minLength: 1, maxLength: 600 }), (gaps) => {
      const limiter = new RateLimiter(120);
      let now = 0;
      const admitted: number[] = [];
      for (const g of gaps) {
        now += g;
        if (limiter.tryTake('h', now)) admitted.push(now);
      }
      // A full bucket (120) plus what refills during the minute (120) bounds any 60 s window.
      for (let i = 0; i < admitted.length; i++) {
        const inWindow = admitted.filter((t) => t >= admitted[i]! && t < admitted[i]! + 60_000).length;
        assert.ok(inWindow <= 240, String(inWindow));
      }
    }),
    { numRuns: 50 },
  );
});

test('an idle hook is pruned once refilled, a forgotten hook starts full, and a new rate caps the bucket', () => {
  const limiter = new RateLimiter(120);
  limiter.tryTake('a', 0);
  limiter.tryTake('b', 0);
  assert.equal(limiter.prune(100), 2);
  assert.equal(limiter.prune(60_000), 0);

  for (let i = 0; i < 120; i++) limiter.tryTake('c', 0);
  limiter.forget('c');
  assert.equal(limiter.tryTake('c', 0), true);

  const slow = new RateLimiter(120);
  slow.setRate(2);
  assert.equal(slow.tryTake('d', 0), true);
  assert.equal(slow.tryTake('d', 0), true);
  assert.equal(slow.tryTake('d', 0), false);
  assert.throws(() => slow.setRate(0), RangeError);
});

test('the queue is FIFO, refuses and counts items beyond its capacity', () => {
  const q = new BoundedQueue<number>(3);
  assert.equal(q.push(1), true);
  assert.equal(q.push(2), true);
  assert.equal(q.push(3), true);
  assert.equal(q.push(4), false);
  assert.equal(q.dropped, 1);
  assert.equal(q.size, 3);
  assert.equal(q.shift(), 1);
  assert.equal(q.push(5), true);
  assert.deepEqual([q.shift(), q.shift(), q.shift(), q.shift()], [2, 3, 5, undefined]);
  assert.equal(q.size, 0);
});

test('the queue behaves like an array capped at its capacity for any sequence of operations', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 8 }),
      fc.array(fc.option(fc.integer(), { nil: undefined })),
      (cap, ops) => {
        const q = new BoundedQueue<number>(cap);
        const model: number[] = [];
        let drops = 0;
        for (const op of ops) {
          if (op === undefined) assert.equal(q.shift(), model.shift());
          else if (model.length < cap) {
            assert.equal(q.push(op), true);
            model.push(op);
          } else {
            assert.equal(q.push(op), false);
            drops++;
          }
          assert.equal(q.size, model.length);
        }
        assert.equal(q.dropped, drops);
      },
    ),
  );
});

test('drops are warned about at most once per 10 s, and only when something dropped', () => {
  const q = new BoundedQueue<string>(1);
  const t0 = 5_000_000;
  assert.equal(q.shouldWarn(t0), false, 'nothing dropped yet');
  q.push('a');
  q.push('b');
  assert.equal(q.shouldWarn(t0), true);
  q.push('c');
  assert.equal(q.shouldWarn(t0 + 1), false);
  assert.equal(q.shouldWarn(t0 + DROP_WARN_INTERVAL_MS - 1), false);
  assert.equal(q.shouldWarn(t0 + DROP_WARN_INTERVAL_MS), true, 'the drop held back is warned about later');
  assert.equal(q.shouldWarn(t0 + 3 * DROP_WARN_INTERVAL_MS), false, 'no new drops, no warning');
  assert.equal(q.dropped, 2);
});

test('a queue capacity must be a positive integer', () => {
  assert.throws(() => new BoundedQueue(0), RangeError);
  assert.throws(() => new BoundedQueue(1.5), RangeError);
});
