// The exposition writer, read back through a Prometheus text-format parser.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exposition } from '../../util/prometheus.js';
import { parseScrape } from '../promText.js';

test('families, help, types, labels with quotes and backslashes, and NaN survive a parser round trip', () => {
  const text = exposition([
    {
      name: 'claim_granted',
      kind: 'counter',
      help: 'Leases granted.',
      unit: 'jobs',
      samples: [{ value: 42 }],
    },
    {
      name: 'stall_nudges_total',
      kind: 'counter',
      help: 'Wakes "fired"\nper queue',
      samples: [
        { labels: { queue: 'pro"duct' }, value: 2 },
        { labels: { queue: 'back\\slash' }, value: 1 },
      ],
    },
    { name: 'overdue', kind: 'gauge', help: 'Due rows not in flight.', samples: [{ value: NaN }] },
    { name: 'notify_failed', kind: 'counter', help: 'Failures.', samples: [] },
  ]);
  const parsed = parseScrape(text);
  assert.equal(parsed.get('claim_granted')?.metrics[0]?.value, '42');
  assert.equal(parsed.get('claim_granted')?.help, 'Leases granted. (jobs)');
  assert.deepEqual(
    parsed.get('stall_nudges_total')?.metrics.map((m) => m.labels?.queue),
    ['pro"duct', 'back\\slash'],
  );
  assert.equal(parsed.get('overdue')?.type, 'GAUGE');
  assert.equal(parsed.get('overdue')?.metrics[0]?.value, 'NaN');
  assert.ok(text.includes('# TYPE notify_failed counter'));
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
});
