// The client's pure rules: backoff steps, the breaker's states, the skew estimate, the wire form of a
// renderer's answer, the MQTT status parse, and the waker that never sleeps through a wake.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { backoffDelay } from '../src/backoff.js';
import { CircuitBreaker } from '../src/breaker.js';
import { Waker } from '../src/clock.js';
import { serverSkew } from '../src/fleetClient.js';
import { toWire } from '../src/wireResults.js';
import { statusOf } from '../src/mqttWake.js';
import type { Job } from '../src/types.js';
import { FakeClock } from './fakeClock.js';

const job: Job = {
  id: 'u',
  url: 'u',
  queue: 'q',
  isFromSitemap: true,
  expiresAt: 0,
  leaseToken: 't',
  callbackOrigin: 'http://127.0.0.1:9926',
  deviceType: 'desktop',
};

test('backoff doubles from the base, stops at the cap, and jitters within the upper half', () => {
  const p = { baseMs: 100, capMs: 1_000 };
  assert.deepEqual(
    [0, 1, 2, 3, 4, 50].map((n) => backoffDelay(p, n, () => 1)),
    [100, 200, 400, 800, 1_000, 1_000],
  );
  assert.deepEqual(
    [0, 1, 4].map((n) => backoffDelay(p, n, () => 0)),
    [50, 100, 500],
  );
  for (let i = 0; i < 100; i++) {
    const d = backoffDelay(p, 3, Math.random);
    assert.ok(d >= 400 && d <= 800, String(d));
  }
});

test('the breaker opens at the threshold, half-opens after its time, and a failed probe doubles it up to the max', () => {
  const b = new CircuitBreaker({ failureThreshold: 3, openMs: 1_000, maxOpenMs: 3_000 });
  assert.equal(b.failure(0), false);
  assert.equal(b.failure(0), false);
  assert.equal(b.state(0), 'closed');
  assert.equal(b.failure(10), true);
  assert.equal(b.state(1_009), 'open');
  assert.equal(b.state(1_010), 'half-open');
  assert.equal(b.failure(1_010), true);
  assert.equal(b.retryAt(), 3_010);
  b.failure(3_010);
  assert.equal(b.retryAt(), 6_010, 'capped at maxOpenMs');
  assert.equal(b.success(), true);
  assert.equal(b.state(6_010), 'closed');
  assert.equal(b.failure(6_010), false, 'a success resets the count');
});

test('the skew estimate ignores the Date header rounding and measures a real offset', () => {
  const t = 1_700_000_000_000;
  assert.equal(serverSkew(new Date(t).toUTCString(), t, t + 40), 0);
  assert.equal(serverSkew(new Date(t + 999).toUTCString(), t, t), 0);
  assert.ok(Math.abs(serverSkew(new Date(t + 3_600_000).toUTCString(), t, t) - 3_600_000) <= 1_000);
  assert.equal(serverSkew(undefined, t, t), 0);
  assert.equal(serverSkew('not a date', t, t), 0);
});

test('a malformed render answer is reported failed with the reason, and error rides only with failed', () => {
  const bad = [
    null,
    { outcome: 'done' },
    { outcome: 'rendered', statusCode: 20.5 },
    { outcome: 'rendered', body: 42 },
    { outcome: 'rendered', contentType: 1 },
  ];
  for (const r of bad) {
    const w = toWire(job, r as never, 5);
    assert.equal(w.outcome, 'failed', JSON.stringify(r));
    assert.equal(w.error!.name, 'InvalidRenderResult');
  }
  const ok = toWire(job, { outcome: 'rendered', error: { name: 'x', message: 'y' }, body: 'b' }, 12.4);
  assert.equal(ok.error, undefined);
  assert.deepEqual(ok, {
    id: 'u',
    leaseToken: 't',
    outcome: 'rendered',
    statusCode: null,
    contentType: null,
    body: 'b',
    renderTimeMs: 12,
  });
  const failed = toWire(job, { outcome: 'failed', error: { name: 'E', message: 'm'.repeat(5_000) } }, 1);
  assert.equal(failed.error!.message.length, 1_000);
});

test('the MQTT status is read from the row or from a {value} wrapper, and junk is ignored', () => {
  assert.deepEqual(statusOf(Buffer.from('{"hostname":"n1","status":"queued","updatedTime":1}')), {
    hostname: 'n1',
    status: 'queued',
  });
  assert.deepEqual(statusOf(Buffer.from('{"value":{"status":"paused"}}')), {
    hostname: undefined,
    status: 'paused',
  });
  assert.equal(statusOf(Buffer.from('nope')), null);
  assert.equal(statusOf(Buffer.from('{"status":3}')), null);
});

test('a wake that comes while nobody waits is kept for the next wait', async () => {
  const clock = new FakeClock();
  const w = new Waker(clock);
  w.wake();
  assert.equal(await w.wait(1_000), 'woken');
  const pending = w.wait(1_000);
  clock.advance(1_000);
  assert.equal(await pending, 'timeout');
  const woken = w.wait(Infinity);
  w.wake();
  assert.equal(await woken, 'woken');
  assert.deepEqual(clock.pending(), [], 'a woken wait cancels its timer');
});
