// Delivery rules with plain values and a fake clock (ms): outcomes, retry pacing, per-hook rate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { classifyResponse, RateLimiter, retryDelayMs } from '../../util/notify/deliveryPolicy.js';

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

test('a hook may take 120 deliveries at once, then none until they leave the minute', () => {
  const limiter = new RateLimiter(120);
  const t0 = 1_000_000;
  for (let i = 0; i < 120; i++) assert.equal(limiter.tryTake('h1', t0), true, `take ${i}`);
  assert.equal(limiter.tryTake('h1', t0), false);
  assert.equal(limiter.tryTake('h1', t0 + 30_000), false, 'a token bucket would have refilled 60 by now');
  assert.equal(limiter.tryTake('h1', t0 + 59_999), false);
  assert.equal(limiter.tryTake('h1', t0 + 60_000), true);
  // Other hooks are not affected by h1's rate.
  assert.equal(limiter.tryTake('h2', t0), true);
});

test('no window of one minute ever admits more than the rate', () => {
  // Fails with a token bucket of the rate's size, which admits up to twice the rate in one minute.
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 130 }),
      fc.array(fc.integer({ min: 0, max: 2000 }), { minLength: 1, maxLength: 600 }),
      (rate, gaps) => {
        const limiter = new RateLimiter(rate);
        let now = 0;
        const admitted: number[] = [];
        for (const g of gaps) {
          now += g;
          if (limiter.tryTake('h', now)) admitted.push(now);
        }
        for (let i = 0; i < admitted.length; i++) {
          const inWindow = admitted.filter((t) => t >= admitted[i]! && t < admitted[i]! + 60_000).length;
          assert.ok(inWindow <= rate, `${inWindow} in a minute at ${rate}/min`);
        }
      },
    ),
    { numRuns: 100 },
  );
});

test('a rate of 2 admits 2, then the third only a minute after the first', () => {
  const limiter = new RateLimiter(2);
  assert.deepEqual(
    [0, 10, 30_200, 59_999, 60_000, 60_010, 60_011].map((t) => limiter.tryTake('h', t)),
    [true, true, false, false, true, true, false],
  );
});

test('an idle hook is pruned once its minute is empty, a forgotten hook starts empty, and a new rate applies at once', () => {
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
