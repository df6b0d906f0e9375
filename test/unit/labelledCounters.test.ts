// Labelled counters over one shared buffer: two views (two workers) add to the same series.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LabelledCounters, MAX_SERIES_KEY_BYTES } from '../../util/metrics/labelledCounters.js';

test('increments through two views of one buffer land in one series per key', () => {
  const buf = new SharedArrayBuffer(LabelledCounters.byteLength(8));
  const worker0 = new LabelledCounters(buf);
  const worker1 = new LabelledCounters(buf);
  assert.equal(worker0.add('stall_nudges_total{"queue":"product"}', 1), true);
  assert.equal(worker1.add('stall_nudges_total{"queue":"product"}', 2), true);
  assert.equal(worker1.add('stall_nudges_total{"queue":"blög"}', 5), true);
  assert.deepEqual(worker0.entries(), [
    { key: 'stall_nudges_total{"queue":"product"}', value: 3 },
    { key: 'stall_nudges_total{"queue":"blög"}', value: 5 },
  ]);
});

test('a full table or an oversized key refuses instead of overwriting another series', () => {
  const c = new LabelledCounters(new ArrayBuffer(LabelledCounters.byteLength(2)));
  assert.equal(c.add('a', 1), true);
  assert.equal(c.add('b', 1), true);
  assert.equal(c.add('c', 1), false);
  assert.equal(c.add('a', 1), true);
  assert.equal(c.add('x'.repeat(MAX_SERIES_KEY_BYTES + 1), 1), false);
  assert.deepEqual(c.entries(), [
    { key: 'a', value: 2 },
    { key: 'b', value: 1 },
  ]);
});
