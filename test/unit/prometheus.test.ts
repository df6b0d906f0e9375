// The exposition writer, read back through a Prometheus text-format parser and the strict reader.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exposition } from '../../util/metrics/prometheus.js';
import { parseScrape } from '../promText.js';
import { histogramTotals, parseExposition } from '../promLint.js';

test('families, help, types, labels with quotes and backslashes, and NaN survive a parser round trip', () => {
  const text = exposition([
    {
      name: 'queue_keeper_claim_granted_total',
      kind: 'counter',
      help: 'Leases granted.',
      unit: 'jobs',
      samples: [{ value: 42 }],
    },
    {
      name: 'queue_keeper_stall_nudges_total',
      kind: 'counter',
      help: 'Wakes "fired"\nper queue',
      samples: [
        { labels: { queue: 'pro"duct' }, value: 2 },
        { labels: { queue: 'back\\slash' }, value: 1 },
      ],
    },
    {
      name: 'queue_keeper_unclaimed_rows',
      kind: 'gauge',
      help: 'Due rows not in flight.',
      samples: [{ value: NaN }],
    },
    { name: 'queue_keeper_notify_failed_total', kind: 'counter', help: 'Failures.', samples: [] },
  ]);
  const parsed = parseScrape(text);
  assert.equal(parsed.get('queue_keeper_claim_granted_total')?.metrics[0]?.value, '42');
  assert.equal(parsed.get('queue_keeper_claim_granted_total')?.help, 'Leases granted. (jobs)');
  assert.deepEqual(
    parsed.get('queue_keeper_stall_nudges_total')?.metrics.map((m) => m.labels?.queue),
    ['pro"duct', 'back\\slash'],
  );
  assert.equal(parsed.get('queue_keeper_unclaimed_rows')?.type, 'GAUGE');
  assert.equal(parsed.get('queue_keeper_unclaimed_rows')?.metrics[0]?.value, 'NaN');
  assert.ok(text.includes('# TYPE queue_keeper_notify_failed_total counter'));
  assert.deepEqual(
    [
      ...parseExposition(text)
        .get('queue_keeper_stall_nudges_total')!
        .samples.map((s) => s.labels.queue),
    ],
    ['pro"duct', 'back\\slash'],
  );
});

test('the exposition ends with a line feed even when its last family has no sample', () => {
  const text = exposition([
    { name: 'queue_keeper_stall_nudges_total', kind: 'counter', help: 'x', samples: [] },
  ]);
  assert.equal(
    text,
    '# HELP queue_keeper_stall_nudges_total x\n# TYPE queue_keeper_stall_nudges_total counter\n',
  );
});

test('a histogram is spelled as cumulative buckets to +Inf, then _sum and _count, per label set', () => {
  const text = exposition([
    {
      name: 'queue_keeper_request_duration_seconds',
      kind: 'histogram',
      help: 'Handler time.',
      unit: 'seconds',
      samples: [],
      histograms: [
        { labels: { endpoint: 'claim' }, bounds: [0.01, 0.1], counts: [3, 1, 2], sum: 7.5 },
        { labels: { endpoint: 'next' }, bounds: [0.01, 0.1], counts: [0, 0, 0], sum: 0 },
      ],
    },
  ]);
  assert.match(text, /^queue_keeper_request_duration_seconds_bucket\{endpoint="claim",le="0\.01"\} 3$/m);
  assert.match(text, /^queue_keeper_request_duration_seconds_bucket\{endpoint="claim",le="0\.1"\} 4$/m);
  assert.match(text, /^queue_keeper_request_duration_seconds_bucket\{endpoint="claim",le="\+Inf"\} 6$/m);
  const families = parseExposition(text);
  assert.deepEqual(
    histogramTotals(families, 'queue_keeper_request_duration_seconds', { endpoint: 'claim' }),
    {
      count: 6,
      sum: 7.5,
    },
  );
  assert.deepEqual(histogramTotals(families, 'queue_keeper_request_duration_seconds', { endpoint: 'next' }), {
    count: 0,
    sum: 0,
  });
});

test('a name Prometheus would refuse is refused here rather than scraped broken', () => {
  assert.throws(() => exposition([{ name: 'bad-name', kind: 'gauge', help: '', samples: [] }]), RangeError);
  assert.throws(
    () =>
      exposition([
        { name: 'ok', kind: 'gauge', help: '', samples: [{ labels: { 'bad-label': 'x' }, value: 1 }] },
      ]),
    RangeError,
  );
  assert.throws(
    () =>
      exposition([
        {
          name: 'h',
          kind: 'histogram',
          help: '',
          samples: [],
          histograms: [{ labels: { le: '1' }, bounds: [1], counts: [0, 0], sum: 0 }],
        },
      ]),
    RangeError,
    'le is the bucket label',
  );
  assert.throws(
    () =>
      exposition([
        {
          name: 'h',
          kind: 'histogram',
          help: '',
          samples: [],
          histograms: [{ bounds: [1], counts: [0], sum: 0 }],
        },
      ]),
    RangeError,
  );
});
