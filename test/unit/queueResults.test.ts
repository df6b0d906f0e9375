// The per-queue results and render times (util/metrics/queueResults.ts): counted per queue and outcome
// across views of one buffer (as workers share it), read back only for the queues asked for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RENDER_BUCKETS } from '../../util/metrics/catalogue.js';
import { QueueResults } from '../../util/metrics/queueResults.js';

const BOUNDS = [1, 5, 30];

test('results count per queue and outcome, and render times fall in their buckets, across views of one buffer', () => {
  const buf = new ArrayBuffer(QueueResults.byteLength(8, BOUNDS));
  const worker0 = new QueueResults(buf, BOUNDS);
  const worker1 = new QueueResults(buf, BOUNDS);
  assert.equal(worker0.record('product', 'rendered', 800), true);
  assert.equal(worker1.record('product', 'rendered', 4000), true);
  assert.equal(worker1.record('product', 'failed', null), true);
  assert.equal(worker0.record('blog', 'redirected', 90_000), true);
  const r = worker0.read(['product', 'blog', 'unrouted']);
  const count = (queue: string, outcome: string) =>
    r.results.find((s) => s.labels.queue === queue && s.labels.outcome === outcome)?.value;
  assert.equal(count('product', 'rendered'), 2);
  assert.equal(count('product', 'failed'), 1);
  assert.equal(count('product', 'redirected'), 0, 'every outcome of an asked queue is a series');
  assert.equal(count('blog', 'redirected'), 1);
  assert.equal(count('unrouted', 'rendered'), 0, 'a queue never recorded reads as zeros');
  assert.equal(r.results.length, 3 * 4);
  const product = r.renderSeconds.find((h) => h.labels?.queue === 'product')!;
  assert.deepEqual(product.counts, [1, 1, 0, 0], 'a failure without a render time is not observed');
  assert.equal(product.sum, 4.8);
  assert.deepEqual(r.renderSeconds.find((h) => h.labels?.queue === 'blog')!.counts, [0, 0, 0, 1]);
});

test('a queue not asked for is never read back, and a full table counts no new queue', () => {
  const results = new QueueResults(new ArrayBuffer(QueueResults.byteLength(2, BOUNDS)), BOUNDS);
  assert.equal(results.record('a', 'rendered', 10), true);
  assert.equal(results.record('b', 'rendered', 10), true);
  assert.equal(results.record('c', 'rendered', 10), false, 'no room for a third queue');
  assert.equal(results.record('a', 'failed', 10), true, 'a queue already counted goes on');
  assert.deepEqual(
    results.read(['a']).results.map((s) => s.labels.queue),
    ['a', 'a', 'a', 'a'],
  );
});

test('a render time that is not a finite number of ms or more is left out of the histogram, the outcome counted', () => {
  const results = new QueueResults(
    new ArrayBuffer(QueueResults.byteLength(4, RENDER_BUCKETS)),
    RENDER_BUCKETS,
  );
  for (const ms of [NaN, -1, Infinity]) assert.equal(results.record('q', 'rendered', ms), true);
  const r = results.read(['q']);
  assert.equal(r.results.find((s) => s.labels.outcome === 'rendered')!.value, 3);
  assert.equal(
    r.renderSeconds[0]!.counts.reduce((a, b) => a + b, 0),
    0,
  );
});
