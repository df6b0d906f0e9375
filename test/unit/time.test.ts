import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  fromSharedSeconds,
  MINUTE_MS,
  minuteOf,
  SHARED_EPOCH_MS,
  sharedSecondsAtOrAfter,
  sharedSecondsAtOrBefore,
  startOfMinute,
} from '../../util/time.js';

const T = Date.UTC(2026, 0, 1, 10, 0, 0); // a whole minute

test('minuteOf counts minutes and startOfMinute gives that minute back in ms', () => {
  assert.equal(minuteOf(T), T / MINUTE_MS);
  assert.equal(minuteOf(T + MINUTE_MS - 1), T / MINUTE_MS);
  assert.equal(minuteOf(T - 1), T / MINUTE_MS - 1);
  assert.equal(startOfMinute(T), T);
  assert.equal(startOfMinute(T + MINUTE_MS - 1), T);
  assert.equal(startOfMinute(T - 1), T - MINUTE_MS);
  assert.equal(startOfMinute(T + 59_999), minuteOf(T + 59_999) * MINUTE_MS);
});

test('a lease end encoded at or after never decodes earlier than asked, and by less than a second later', () => {
  for (const ms of [T, T + 1, T + 999, T + 1000, T + 1001, T - 1]) {
    const back = fromSharedSeconds(sharedSecondsAtOrAfter(ms));
    assert.ok(back >= ms, `${ms} came back early as ${back}`);
    assert.ok(back - ms < 1000);
  }
  assert.equal(fromSharedSeconds(sharedSecondsAtOrAfter(T + 1)), T + 1000);
});

test('an instant encoded at or before never decodes later than it was, and by less than a second earlier', () => {
  for (const ms of [T, T + 1, T + 999, T + 1000, T + 1001, T - 1]) {
    const back = fromSharedSeconds(sharedSecondsAtOrBefore(ms));
    assert.ok(back <= ms, `${ms} came back late as ${back}`);
    assert.ok(ms - back < 1000);
  }
  assert.equal(fromSharedSeconds(sharedSecondsAtOrBefore(T + 999)), T);
});

test('whole seconds round trip exactly both ways, including before the epoch', () => {
  fc.assert(
    fc.property(fc.integer({ min: -2_000_000_000, max: 2_000_000_000 }), (sec) => {
      const ms = fromSharedSeconds(sec);
      assert.equal(sharedSecondsAtOrBefore(ms), sec);
      assert.equal(sharedSecondsAtOrAfter(ms), sec);
    }),
  );
  assert.equal(sharedSecondsAtOrBefore(SHARED_EPOCH_MS), 0);
  assert.equal(sharedSecondsAtOrAfter(SHARED_EPOCH_MS - 1), 0);
  assert.equal(sharedSecondsAtOrBefore(SHARED_EPOCH_MS - 1), -1);
});

test('shared seconds saturate at the Int32 range and keep INT32_MIN free', () => {
  const far = SHARED_EPOCH_MS + 2 ** 40 * 1000;
  assert.equal(sharedSecondsAtOrAfter(far), 0x7fffffff);
  assert.equal(sharedSecondsAtOrBefore(far), 0x7fffffff);
  const long = SHARED_EPOCH_MS - 2 ** 40 * 1000;
  assert.equal(sharedSecondsAtOrBefore(long), -0x7fffffff);
  assert.equal(sharedSecondsAtOrAfter(long), -0x7fffffff);
});

test('a time that is not finite is refused instead of stored as a plausible second', () => {
  for (const bad of [NaN, Infinity, -Infinity]) {
    assert.throws(() => sharedSecondsAtOrBefore(bad), RangeError);
    assert.throws(() => sharedSecondsAtOrAfter(bad), RangeError);
  }
});

test('the epoch is minute-aligned, so a minute-floored due time survives either rounding', () => {
  const due = startOfMinute(T + 12_345);
  assert.equal(fromSharedSeconds(sharedSecondsAtOrBefore(due)), due);
  assert.equal(fromSharedSeconds(sharedSecondsAtOrAfter(due)), due);
});

test('a time past 2038 still fits Int32 seconds from the 2024 epoch', () => {
  const t2040 = Date.UTC(2040, 5, 1, 12, 0, 30);
  assert.ok(t2040 / 1000 > 2 ** 31);
  assert.equal(fromSharedSeconds(sharedSecondsAtOrAfter(t2040)), t2040);
});
