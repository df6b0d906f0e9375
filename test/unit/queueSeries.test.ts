// The per-queue series: figures from the state document and the lease table, and a `queue` label that
// only ever takes a configured route's name or `unrouted`, whatever queue names the inputs carry.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { LeaseTable } from '../../util/leases/table.js';
import { nameHash } from '../../util/leases/token.js';
import { queueNames, queueSeries, type QueueStateLateness } from '../../util/metrics/queueSeries.js';

const T0 = Date.UTC(2026, 11, 1, 12, 0, 0);
const HOUR = 3_600_000;
const QUEUES = queueNames([{ name: 'product' }, { name: 'blog' }]);

const lateness = (over: Partial<QueueStateLateness> = {}): QueueStateLateness => ({
  byRoute: [
    { route: 'product', due: 5 },
    { route: 'blog', due: 0 },
  ],
  classes: [
    { route: 'product', oldestDueAt: T0 - 3 * HOUR, oldestLatenessCadences: 3 },
    { route: 'product', oldestDueAt: T0 - 5 * HOUR, oldestLatenessCadences: 0.2 },
    { route: 'blog', oldestDueAt: null, oldestLatenessCadences: null },
  ],
  listsTruncated: false,
  ...over,
});

const value = (samples: Array<{ labels: { queue: string }; value: number }>, queue: string) =>
  samples.find((s) => s.labels.queue === queue)?.value;

test('due, oldest due age and lateness per queue come from the document; a queue it does not list is zero', () => {
  const s = queueSeries(QUEUES, lateness(), new Map(), T0);
  assert.deepEqual(QUEUES, ['product', 'blog', 'unrouted']);
  assert.equal(value(s.due, 'product'), 5);
  assert.equal(value(s.oldestDueAgeSeconds, 'product'), (5 * HOUR) / 1000, 'the oldest of its classes');
  assert.equal(value(s.latenessCadences, 'product'), 3, 'the worst of its classes');
  assert.equal(value(s.due, 'blog'), 0);
  assert.equal(value(s.oldestDueAgeSeconds, 'blog'), 0);
  assert.equal(value(s.latenessCadences, 'blog'), 0);
  assert.equal(value(s.due, 'unrouted'), 0);
});

test('leases are counted per queue by the queue hash each lease slot stores', () => {
  const table = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(64)), 64);
  const grant = (key: string, queue: string, leaseMs = 60_000) =>
    assert.equal(
      table.grant(key, T0, { leaseMs, dueMs: T0, cadenceMs: HOUR, fastRetries: 0, queue: nameHash(queue) })
        .ok,
      true,
    );
  grant('https://a.example/p/1', 'product');
  grant('https://a.example/p/2', 'product');
  grant('https://a.example/x', 'unrouted');
  grant('https://a.example/gone', 'a-route-removed-since');
  grant('https://a.example/p/short', 'product', 1000);
  const counts = table.upkeep.leasesByQueue(T0 + 2000);
  assert.equal(counts.get(nameHash('product')), 2, 'the expired lease is not counted');
  const s = queueSeries(QUEUES, null, counts, T0 + 2000);
  assert.deepEqual(
    s.leases.map((x) => [x.labels.queue, x.value]),
    [
      ['product', 2],
      ['blog', 0],
      ['unrouted', 1],
    ],
  );
  assert.deepEqual(s.due, [], 'no due figures while the keeper cannot vouch for them');
  assert.equal(table.occupancy(), 5, 'counting changed nothing in the table');
});

test('with truncated lists a queue the document leaves out gets no figure instead of a made-up zero', () => {
  const s = queueSeries(
    QUEUES,
    lateness({ listsTruncated: true, byRoute: [{ route: 'product', due: 5 }] }),
    new Map(),
    T0,
  );
  assert.deepEqual(
    s.due.map((x) => x.labels.queue),
    ['product'],
  );
  const noClass = queueSeries(QUEUES, lateness({ classes: [] }), new Map(), T0);
  assert.equal(value(noClass.due, 'product'), 5);
  assert.equal(value(noClass.oldestDueAgeSeconds, 'product'), undefined, 'due rows with no listed class');
});

test('whatever queue names the document and the leases carry, the label takes only the configured routes and unrouted', () => {
  fc.assert(
    fc.property(
      fc.array(fc.string({ maxLength: 40 }), { maxLength: 300 }),
      fc.array(fc.integer(), { maxLength: 300 }),
      (names, hashes) => {
        const doc = lateness({
          byRoute: names.map((route, i) => ({ route, due: i })),
          classes: names.map((route) => ({ route, oldestDueAt: T0 - HOUR, oldestLatenessCadences: 1 })),
        });
        const leases = new Map(hashes.map((h) => [h, 1]));
        for (const n of names) leases.set(nameHash(n), 2);
        const s = queueSeries(QUEUES, doc, leases, T0);
        for (const list of [s.due, s.oldestDueAgeSeconds, s.latenessCadences, s.leases]) {
          assert.ok(list.length <= QUEUES.length);
          for (const x of list) assert.ok(QUEUES.includes(x.labels.queue), x.labels.queue);
        }
      },
    ),
  );
});
