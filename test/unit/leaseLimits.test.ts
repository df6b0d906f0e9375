import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyValues, checkPartial, defaultConfig } from '../../util/config/schema.js';
import { leaseLimits, leaseLimitsProblem } from '../../util/config/leaseLimits.js';

const configOf = (queue: Record<string, unknown>) =>
  applyValues(defaultConfig(), checkPartial({ queue }).values).queue;

test('unset, the longest extension is queue.jobLeaseTime and the longest lease the larger of 1 h and jobLeaseTime', () => {
  assert.deepEqual(leaseLimits(configOf({})), { maxExtensionMs: 600_000, maxLeaseMs: 3_600_000 });
  assert.deepEqual(leaseLimits(configOf({ jobLeaseTime: 20_000 })), {
    maxExtensionMs: 20_000,
    maxLeaseMs: 3_600_000,
  });
  // A lease length over an hour, valid before the key existed, stays valid: the limit follows it.
  const long = configOf({ jobLeaseTime: 2 * 3_600_000 });
  assert.deepEqual(leaseLimits(long), { maxExtensionMs: 7_200_000, maxLeaseMs: 7_200_000 });
  assert.equal(leaseLimitsProblem(long), null);
});

test('set values are used, and either may be set back to null', () => {
  const q = configOf({ jobLeaseTime: 20_000, maxLeaseExtension: 5_000, maxLeaseTime: 300_000 });
  assert.deepEqual(leaseLimits(q), { maxExtensionMs: 5_000, maxLeaseMs: 300_000 });
  assert.deepEqual(leaseLimits(configOf({ maxLeaseExtension: null, maxLeaseTime: null })), {
    maxExtensionMs: 600_000,
    maxLeaseMs: 3_600_000,
  });
});

test('a queue.maxLeaseTime below queue.jobLeaseTime is refused, naming both keys', () => {
  const p = leaseLimitsProblem(configOf({ jobLeaseTime: 600_000, maxLeaseTime: 300_000 }));
  assert.equal(p?.key, 'queue.maxLeaseTime');
  assert.match(p!.message, /queue\.maxLeaseTime .*queue\.jobLeaseTime/);
  assert.equal(leaseLimitsProblem(configOf({ jobLeaseTime: 300_000, maxLeaseTime: 300_000 })), null);
});

test('the limits are numbers of ms in range or null; anything else is refused naming the key', () => {
  for (const bad of ['60000', -1, 1.5, 0, 8 * 86_400_000])
    assert.throws(() => checkPartial({ queue: { maxLeaseTime: bad } }), /queue\.maxLeaseTime/);
  assert.throws(() => checkPartial({ queue: { maxLeaseExtension: 'x' } }), /queue\.maxLeaseExtension/);
});
