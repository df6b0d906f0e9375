// The created / requeued edges (util/notify/edges.ts) and their firing by the NotifyService
// (services/notify/wakes.ts), with a fake clock and a fake dispatcher.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '../../util/config/schema.js';
import { EdgeDetector, type EdgeRow, type QueueDueCounts } from '../../util/notify/edges.js';
import { NotifyService } from '../../services/notify/wakes.js';
import type { Wake } from '../../services/notify/dispatcher.js';
import { Ownership } from '../../util/cluster/ownership.js';
import { queueJudgeKey, type NodeQueueView } from '../../util/cluster/clusterEdges.js';

const T0 = Date.UTC(2026, 2, 1, 12, 0, 0);
const COOLDOWN = 30_000;
const oldest = (queue: string): EdgeRow => ({
  key: `https://shop.test/${queue}/1`,
  dueMs: T0 - 60_000,
  fromSitemap: false,
});

function summary(due: Record<string, number>): Map<string, QueueDueCounts> {
  return new Map(
    Object.entries(due).map(([queue, n]) => [
      queue,
      { dueVerified: n, oldestVerifiedDue: n > 0 ? oldest(queue) : null },
    ]),
  );
}

test('the first due summary is a baseline: queues already due raise no created edge', () => {
  const edges = new EdgeDetector(() => COOLDOWN);
  assert.deepEqual(edges.created(summary({ product: 3, blog: 1 })), []);
});

test('a queue going from no due verified rows to some is a created edge, once, naming its oldest row', () => {
  const edges = new EdgeDetector(() => COOLDOWN);
  edges.created(summary({ product: 0, blog: 2 }));
  assert.deepEqual(edges.created(summary({ product: 4, blog: 2 })), [
    { queue: 'product', row: oldest('product') },
  ]);
  assert.deepEqual(edges.created(summary({ product: 5, blog: 2 })), [], 'still due is not a new edge');
  edges.created(summary({ product: 0, blog: 2 }));
  assert.deepEqual(edges.created(summary({ product: 1 })), [{ queue: 'product', row: oldest('product') }]);
});

test('a queue with due rows but no verified oldest row raises no edge (unverified rows never name a wake)', () => {
  const edges = new EdgeDetector(() => COOLDOWN);
  edges.created(new Map());
  const noRow = new Map<string, QueueDueCounts>([['product', { dueVerified: 2, oldestVerifiedDue: null }]]);
  assert.deepEqual(edges.created(noRow), []);
});

test('edges of one queue are paced by the cooldown; other queues have their own', () => {
  let cooldown = COOLDOWN;
  const edges = new EdgeDetector(() => cooldown);
  assert.equal(edges.admit('product', T0), true);
  assert.equal(edges.admit('product', T0 + COOLDOWN - 1), false);
  assert.equal(edges.admit('blog', T0 + 1), true);
  assert.equal(edges.admit('product', T0 + COOLDOWN), true);
  cooldown = 5_000; // read per use: a config change applies to the next edge
  assert.equal(edges.admit('product', T0 + COOLDOWN + 5_000), true);
});

function service(
  opts: {
    key?: { value: Buffer | null };
    leased?: Set<string>;
    owners?: { value: Ownership | undefined };
  } = {},
) {
  const cfg = defaultConfig();
  cfg.notify.edgeCooldown = COOLDOWN;
  const fired: Wake[] = [];
  const warnings: string[] = [];
  const leased = opts.leased ?? new Set<string>();
  const rows = new Map<string, EdgeRow[]>([
    ['product', [oldest('product'), { ...oldest('product'), key: 'https://shop.test/product/2' }]],
  ]);
  const notify = new NotifyService({
    config: () => cfg,
    sealKey: () => (opts.key === undefined ? Buffer.alloc(32, 1) : opts.key.value),
    createDispatcher: () => ({
      fire: async (wake) => {
        fired.push(wake);
        return 1;
      },
      prune: () => 0,
    }),
    keeper: () => ({
      core: {
        oldestDue: (queue, _now, o) => (rows.get(queue) ?? []).find((r) => !o.skip?.(r.key)) ?? null,
      },
    }),
    leases: () => ({ isLeased: (key) => leased.has(key) }),
    ownership: () => opts.owners?.value,
    destroyExpiredSecrets: async () => 0,
    log: { info: () => {}, warn: (m: unknown) => warnings.push(String(m)) },
  });
  return { notify, fired, warnings, cfg };
}

test('created and requeued edges of one queue share its cooldown', () => {
  const s = service();
  s.notify.start();
  s.notify.onDueSummary({ byQueue: summary({}) }, T0);
  s.notify.onDueSummary({ byQueue: summary({ product: 1 }) }, T0 + 1000);
  s.notify.onRequeued('product', T0 + 2000);
  s.notify.onRequeued('product', T0 + 1000 + COOLDOWN);
  assert.deepEqual(
    s.fired.map((w) => [w.reason, w.queue, w.createdAt]),
    [
      ['created', 'product', T0 + 1000],
      ['requeued', 'product', T0 + 1000 + COOLDOWN],
    ],
  );
});

test('a requeued edge names the oldest due row nobody holds; with every row held it fires nothing', () => {
  const leased = new Set(['https://shop.test/product/1']);
  const s = service({ leased });
  s.notify.start();
  s.notify.onRequeued('product', T0);
  assert.deepEqual(
    s.fired.map((w) => w.job.id),
    ['https://shop.test/product/2'],
  );
  leased.add('https://shop.test/product/2');
  s.notify.onRequeued('product', T0 + 2 * COOLDOWN);
  assert.equal(s.fired.length, 1);
});

test('without a sealing key nothing fires and no cooldown is spent; before start nothing fires', () => {
  const before = service();
  before.notify.onRequeued('product', T0);
  assert.equal(before.fired.length, 0);
  assert.equal(before.notify.available(), false);

  const key: { value: Buffer | null } = { value: null };
  const s = service({ key });
  s.notify.start();
  assert.match(s.warnings[0] ?? '', /nothing will be dispatched/);
  s.notify.onRequeued('product', T0);
  assert.equal(s.fired.length, 0);
  // The key is back: the refused edge did not start the queue's cooldown.
  key.value = Buffer.alloc(32, 1);
  s.notify.onRequeued('product', T0 + 1);
  assert.deepEqual(
    s.fired.map((w) => w.createdAt),
    [T0 + 1],
  );
});

test('with hooks switched off (notify.maxHooksPerFleet 0) the service is unavailable and fires no edge', () => {
  const s = service();
  s.cfg.notify.maxHooksPerFleet = 0;
  s.notify.start();
  assert.equal(s.notify.available(), false);
  s.notify.onDueSummary({ byQueue: summary({}) }, T0);
  s.notify.onDueSummary({ byQueue: summary({ product: 1 }) }, T0 + 1);
  assert.equal(s.fired.length, 0);
});

// Clustered (two or more nodes present): the queue's rendezvous judge decides, from the merged views.
const NODES = ['node-a', 'node-b'];
const judgeOf = (queue: string) => new Ownership(NODES, 'node-a').ownerOf(queueJudgeKey(queue));
const JUDGE = judgeOf('product');
const OTHER = NODES.find((n) => n !== JUDGE)!;
const viewOf = (queue: string, requeuedAt: number | null = null): NodeQueueView => ({
  queue,
  hasGateDue: true,
  oldestGateDue: oldest(queue),
  requeuedAt,
});

test('clustered, the keeper due summary fires no created edge on any node; alone again it fires as before', () => {
  const owners = { value: new Ownership(NODES, OTHER) as Ownership | undefined };
  const s = service({ owners });
  s.notify.start();
  s.notify.onDueSummary({ byQueue: summary({}) }, T0);
  s.notify.onDueSummary({ byQueue: summary({ product: 1 }) }, T0 + 1000);
  owners.value = new Ownership(NODES, JUDGE);
  s.notify.onDueSummary({ byQueue: summary({}) }, T0 + 2000);
  s.notify.onDueSummary({ byQueue: summary({ product: 1 }) }, T0 + 3000);
  assert.equal(s.fired.length, 0, 'clustered, nothing fires from the summary');
  owners.value = new Ownership([], JUDGE); // the peer left
  s.notify.onDueSummary({ byQueue: summary({ product: 1 }) }, T0 + 4000);
  assert.equal(s.fired.length, 0, 'the baseline moved while clustered: still due is no edge');
  s.notify.onDueSummary({ byQueue: summary({}) }, T0 + 5000);
  s.notify.onDueSummary({ byQueue: summary({ product: 1 }) }, T0 + 6000);
  assert.deepEqual(
    s.fired.map((w) => [w.reason, w.createdAt]),
    [['created', T0 + 6000]],
  );
});

test("clustered, the queue's judge fires created once from the merged views; the other node fires nothing", () => {
  const nodes = NODES.map((self) => {
    const s = service({ owners: { value: new Ownership(NODES, self) } });
    s.notify.start();
    return s;
  });
  // Each node looks at the same views with its own membership (its own `self`).
  const lookAs = (now: number, views: NodeQueueView[][]) =>
    nodes.map((s, i) =>
      s.notify.judgeCluster({ now, owners: new Ownership(NODES, NODES[i]!), views, complete: true }),
    );
  lookAs(T0, [[], []]);
  assert.deepEqual(
    lookAs(T0 + 1000, [[viewOf('product')], [viewOf('product')]]),
    NODES.map((n) => (n === JUDGE ? 1 : 0)),
  );
  lookAs(T0 + 2000, [[viewOf('product')], []]);
  const fired = nodes.flatMap((s) => s.fired);
  assert.deepEqual(
    fired.map((w) => [w.reason, w.queue, w.job.id, w.createdAt]),
    [['created', 'product', oldest('product').key, T0 + 1000]],
  );
});

test("clustered, an expiry on the queue's judge wakes at once; on another node it only leaves a mark for the judge", () => {
  const judge = service({ owners: { value: new Ownership(NODES, JUDGE) } });
  const other = service({ owners: { value: new Ownership(NODES, OTHER) } });
  judge.notify.start();
  other.notify.start();
  other.notify.onRequeued('product', T0);
  assert.deepEqual(other.fired, []);
  assert.deepEqual([...other.notify.requeueMarks(T0 - 1)], [['product', T0]]);
  judge.notify.onRequeued('product', T0 + 100);
  assert.deepEqual(
    judge.fired.map((w) => [w.reason, w.job.id, w.createdAt]),
    [['requeued', oldest('product').key, T0 + 100]],
  );
  // The judge's next look sees both marks (its own, already answered; the other's, inside the cooldown).
  judge.notify.judgeCluster({
    now: T0 + 500,
    owners: new Ownership(NODES, JUDGE),
    views: [[viewOf('product', T0 + 100)], [viewOf('product', T0)]],
    complete: true,
  });
  assert.equal(judge.fired.length, 1, 'one requeued wake for the cluster');
  assert.deepEqual([...judge.notify.requeueMarks(T0 + 101)], [], 'marks older than `since` are forgotten');
});

test('clustered, a judge that cannot send spends no cooldown: the next requeue after the key is back rings', () => {
  const key: { value: Buffer | null } = { value: null };
  const s = service({ key, owners: { value: new Ownership(NODES, JUDGE) } });
  s.notify.start();
  s.notify.onRequeued('product', T0);
  assert.equal(s.fired.length, 0);
  key.value = Buffer.alloc(32, 1);
  s.notify.onRequeued('product', T0 + 1);
  assert.deepEqual(
    s.fired.map((w) => [w.reason, w.createdAt]),
    [['requeued', T0 + 1]],
  );
});
