// The metric cells over one shared buffer: histograms and counters observed on several threads add up
// in one series, buckets are cumulative in the exposition, and the layout follows the catalogue.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { METRICS, type MetricDef } from '../../util/metrics/catalogue.js';
import { MetricStore } from '../../util/metrics/store.js';
import { exposition } from '../../util/metrics/prometheus.js';
import { histogramTotals, parseExposition } from '../promLint.js';

const CATALOGUE: Readonly<Record<string, MetricDef>> = METRICS;
const storeUrl = new URL('../../util/metrics/store.js', import.meta.url).href;
const catalogueUrl = new URL('../../util/metrics/catalogue.js', import.meta.url).href;

function store(buf: ArrayBuffer | SharedArrayBuffer = new ArrayBuffer(MetricStore.wordsFor(CATALOGUE) * 8)) {
  return new MetricStore(buf, CATALOGUE);
}

test('an observation lands in the first bucket whose bound is not below it, and the sum keeps its value', () => {
  const s = store();
  for (const v of [0.0004, 0.0005, 0.0006, 0.03, 7, 1e6]) s.observe('request_ms', v, { endpoint: 'claim' });
  const [claim] = s.histogram('request_ms').filter((h) => h.labels?.endpoint === 'claim');
  const bounds = METRICS.request_ms.buckets;
  assert.equal(claim!.counts.length, bounds.length + 1);
  assert.equal(claim!.counts[0], 2, '0.0004 and 0.0005 (le is inclusive)');
  assert.equal(claim!.counts[1], 1, '0.0006');
  assert.equal(claim!.counts[bounds.indexOf(0.05)], 1, '0.03');
  assert.equal(claim!.counts[bounds.length], 2, '7 and 1e6 are above every bound');
  assert.ok(Math.abs(claim!.sum - (0.0004 + 0.0005 + 0.0006 + 0.03 + 7 + 1e6)) < 1e-6);
});

test('a label value outside the closed list, or a value that is not finite, is not counted anywhere', () => {
  const s = store();
  assert.equal(s.observe('request_ms', 0.01, { endpoint: '/render_queue/claim?x=1' }), false);
  assert.equal(s.observe('request_ms', 0.01), false);
  assert.equal(s.observe('request_ms', NaN, { endpoint: 'claim' }), false);
  assert.equal(s.observe('request_ms', Infinity, { endpoint: 'claim' }), false);
  for (const h of s.histogram('request_ms')) {
    assert.equal(
      h.counts.reduce((a, b) => a + b, 0),
      0,
    );
    assert.equal(h.sum, 0);
  }
  assert.deepEqual(
    s.histogram('request_ms').map((h) => h.labels?.endpoint),
    ['claim', 'job_result', 'job_results', 'next'],
  );
});

test('the exposition of a histogram is cumulative, ends at +Inf, and its _count equals the +Inf bucket', () => {
  const s = store();
  for (const v of [0.002, 0.002, 0.04, 9]) s.observe('keeper_publish_ms', v);
  const text = exposition([
    {
      name: 'queue_keeper_keeper_publish_duration_seconds',
      kind: 'histogram',
      help: 'x',
      samples: [],
      histograms: s.histogram('keeper_publish_ms'),
    },
  ]);
  assert.ok(text.endsWith('\n'));
  const families = parseExposition(text);
  const f = families.get('queue_keeper_keeper_publish_duration_seconds')!;
  const le = (b: string) => f.samples.find((x) => x.labels.le === b)?.value;
  assert.equal(le('0.001'), 0);
  assert.equal(le('0.0025'), 2);
  assert.equal(le('0.05'), 3);
  assert.equal(le('1'), 3);
  assert.equal(le('+Inf'), 4);
  const totals = histogramTotals(families, 'queue_keeper_keeper_publish_duration_seconds');
  assert.equal(totals.count, 4);
  assert.ok(Math.abs(totals.sum - 9.044) < 1e-9);
});

test('observations and counts from several threads over one shared buffer add up, none lost', async () => {
  const buf = new SharedArrayBuffer(MetricStore.wordsFor(CATALOGUE) * 8);
  const PER_THREAD = 50_000;
  const THREADS = 3;
  // Each thread maps the same buffer, as every Harper worker maps the process-wide shared buffer. The
  // guard under test is Atomics.add: a plain read-modify-write of the cells loses increments here.
  const code = `
    const { workerData, parentPort } = require('node:worker_threads');
    (async () => {
      const { MetricStore } = await import(workerData.storeUrl);
      const { METRICS } = await import(workerData.catalogueUrl);
      const s = new MetricStore(workerData.buf, METRICS);
      for (let i = 0; i < workerData.n; i++) {
        s.observe('request_ms', 0.003, { endpoint: 'next' });
        s.add('claim_granted', 2);
      }
      parentPort.postMessage('done');
    })();`;
  await Promise.all(
    Array.from({ length: THREADS }, () => {
      const w = new Worker(code, { eval: true, workerData: { buf, storeUrl, catalogueUrl, n: PER_THREAD } });
      return new Promise<void>((resolve, reject) => {
        w.once('message', () => resolve());
        w.once('error', reject);
      }).finally(() => w.terminate());
    }),
  );
  const s = store(buf);
  const next = s.histogram('request_ms').find((h) => h.labels?.endpoint === 'next')!;
  assert.equal(next.counts[METRICS.request_ms.buckets.indexOf(0.005)], THREADS * PER_THREAD);
  assert.ok(Math.abs(next.sum - THREADS * PER_THREAD * 0.003) < 1e-6, `sum ${next.sum}`);
  assert.equal(s.counter('claim_granted'), 2 * THREADS * PER_THREAD);
});

test('a buffer smaller than the catalogue needs is refused rather than overrun', () => {
  assert.throws(() => new MetricStore(new ArrayBuffer(64), CATALOGUE), RangeError);
});
