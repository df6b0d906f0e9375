// Cluster-wide created/requeued wakes (util/cluster/clusterEdges.ts): each of three nodes runs the
// decision over the same merged views; a wake rings once for the cluster, from the queue's judge.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ClusterEdges,
  queueJudgeKey,
  type ClusterEdge,
  type NodeQueueView,
} from '../../util/cluster/clusterEdges.js';
import { Ownership } from '../../util/cluster/ownership.js';

const NAMES = ['node-a', 'node-b', 'node-c'];
const COOLDOWN = 60_000;

function cluster() {
  return NAMES.map((self) => ({ owners: new Ownership(NAMES, self), edges: new ClusterEdges() }));
}

function look(
  nodes: ReturnType<typeof cluster>,
  now: number,
  views: NodeQueueView[][],
  complete = true,
): Array<ClusterEdge & { by: string }> {
  return nodes.flatMap((n) =>
    n.edges
      .decide({ now, owners: n.owners, views, complete, cooldownMs: COOLDOWN })
      .map((e) => ({ ...e, by: n.owners.self })),
  );
}

const row = (key: string, dueMs: number) => ({ key, dueMs, fromSitemap: false });
const due = (queue: string, key: string, dueMs: number, requeuedAt: number | null = null): NodeQueueView => ({
  queue,
  hasGateDue: true,
  oldestGateDue: row(key, dueMs),
  requeuedAt,
});
const judge = (queue: string) => new Ownership(NAMES, 'node-a').ownerOf(queueJudgeKey(queue));

test('a queue that comes due on two nodes at once rings created once for the cluster, from its judge, naming the oldest row', () => {
  const nodes = cluster();
  assert.deepEqual(look(nodes, 0, [[], [], []]), [], 'the first look is a baseline');
  const edges = look(nodes, 1000, [[due('q', 'https://x/b', 500)], [], [due('q', 'https://x/a', 400)]]);
  assert.equal(edges.length, 1);
  assert.equal(edges[0]!.by, judge('q'));
  assert.equal(edges[0]!.reason, 'created');
  assert.equal(edges[0]!.job.key, 'https://x/a');
  assert.deepEqual(look(nodes, 2000, [[due('q', 'https://x/b', 500)], [], []]), [], 'still due: no new edge');
});

test('created is paced by the cooldown: drained and due again inside it rings nothing, after it rings once', () => {
  const nodes = cluster();
  look(nodes, 0, [[], [], []]);
  assert.equal(look(nodes, 1000, [[due('q', 'https://x/a', 0)], [], []]).length, 1);
  look(nodes, 2000, [[], [], []]);
  assert.deepEqual(look(nodes, 3000, [[], [due('q', 'https://x/c', 0)], []]), []);
  look(nodes, 4000, [[], [], []]);
  assert.equal(look(nodes, 1000 + COOLDOWN, [[], [due('q', 'https://x/c', 0)], []]).length, 1);
});

test('an incomplete look (a node without a fresh view) neither rings nor moves the baseline', () => {
  const nodes = cluster();
  look(nodes, 0, [[due('q', 'https://x/a', 0)], [], []]);
  // node-a's view is missing for a while: q seems drained, but that is not known.
  assert.deepEqual(look(nodes, 1000, [[], []], false), []);
  assert.deepEqual(look(nodes, 2000, [[due('q', 'https://x/a', 0)], [], []]), [], 'q was never seen drained');
});

test('a requeue seen on one node rings requeued once, from the judge; the same mark never rings again', () => {
  const nodes = cluster();
  look(nodes, 0, [[due('q', 'https://x/a', 0)], [], []]);
  const other = NAMES.find((n) => n !== judge('q'))!;
  const withMark = (at: number) => NAMES.map((n) => (n === other ? [due('q', 'https://x/a', 0, at)] : []));
  const edges = look(nodes, 1000, withMark(900));
  assert.deepEqual(
    edges.map((e) => [e.reason, e.by]),
    [['requeued', judge('q')]],
  );
  assert.deepEqual(look(nodes, 2000, withMark(900)), []);
  assert.deepEqual(look(nodes, 3000, withMark(2500)), [], 'a newer mark inside the cooldown is spent');
  assert.deepEqual(look(nodes, 1000 + COOLDOWN, withMark(2500)), [], 'as a lone node drops it: never late');
  assert.equal(look(nodes, 2000 + COOLDOWN, withMark(1500 + COOLDOWN)).length, 1, 'a new one after it rings');
});

test('a requeue with no unleased due row anywhere to name is spent, so it never rings later as a stale wake', () => {
  const nodes = cluster();
  look(nodes, 0, [[due('q', 'https://x/a', 0)], [], []]);
  const busy: NodeQueueView = { queue: 'q', hasGateDue: true, oldestGateDue: null, requeuedAt: 500 };
  assert.deepEqual(look(nodes, 1000, [[busy], [], []]), []);
  assert.deepEqual(look(nodes, 2000, [[due('q', 'https://x/a', 0, 500)], [], []]), []);
});

test('a queue the judge had no view of at its last look still rings its first requeue (it was judged, not new)', () => {
  // Rows filed, claimed and expired between two looks: q appears for the first time with a mark.
  const nodes = cluster();
  look(nodes, 0, [[], [], []]);
  const edges = look(nodes, 1000, [[due('q', 'https://x/a', 0, 900)], [], []]);
  assert.deepEqual(
    edges.map((e) => [e.reason, e.by]),
    [['requeued', judge('q')]],
  );
});

test("the judge answers its own node's expiry at once; the mark it publishes later never rings again", () => {
  const nodes = cluster();
  look(nodes, 0, [[], [], []]);
  const job = row('https://x/a', 0);
  const answers = nodes.map((n) =>
    n.edges.localRequeue({ now: 500, owners: n.owners, queue: 'q', job, cooldownMs: COOLDOWN }),
  );
  assert.deepEqual(
    answers.map((a, i) => (a ? [a.reason, NAMES[i]] : null)).filter(Boolean),
    [['requeued', judge('q')]],
    'only the judge answers; the others leave it to the board',
  );
  const selfIndex = NAMES.indexOf(judge('q'));
  const views = NAMES.map((_, i) => (i === selfIndex ? [due('q', 'https://x/a', 0, 500)] : []));
  assert.deepEqual(look(nodes, 1000, views), []);
  assert.equal(
    nodes[selfIndex]!.edges.localRequeue({
      now: 600,
      owners: nodes[selfIndex]!.owners,
      queue: 'q',
      job: null,
      cooldownMs: COOLDOWN,
    }),
    null,
    'no row to name, no wake',
  );
});

test('a look that cannot send moves the baselines and spends the marks but fires nothing and starts no cooldown', () => {
  const edges = new ClusterEdges();
  const owners = new Ownership(['node-a', 'node-b'], judge('q'));
  const at = (now: number, views: NodeQueueView[][], send: boolean) =>
    edges.decide({ now, owners, views, complete: true, cooldownMs: COOLDOWN, send });
  at(0, [[], []], true);
  assert.deepEqual(at(1000, [[due('q', 'https://x/a', 0, 900)], []], false), []);
  assert.deepEqual(at(2000, [[due('q', 'https://x/a', 0, 900)], []], true), [], 'already due, mark spent');
  at(3000, [[], []], true);
  assert.deepEqual(
    at(4000, [[due('q', 'https://x/a', 0)], []], true).map((e) => e.reason),
    ['created'],
    'no cooldown was started by the look that could not send',
  );
});

test("a node that becomes a queue's judge takes the requeue marks it finds as a baseline", () => {
  const edges = new ClusterEdges();
  const solo = new Ownership([], 'node-z');
  const views = [[due('q', 'https://x/a', 0, 5000)]];
  assert.deepEqual(
    edges.decide({ now: 6000, owners: solo, views, complete: true, cooldownMs: COOLDOWN }),
    [],
  );
});

test('a judge that moved to this node takes the marks it finds as a baseline, and rings the next one', () => {
  const edges = new ClusterEdges();
  const q = 'q';
  // q's judge leaves; the node that judges it over the two left is this one.
  const left = NAMES.filter((n) => n !== judge(q));
  const mover = new Ownership(left, left[0]!).ownerOf(queueJudgeKey(q));
  const before = new Ownership(NAMES, mover);
  const after = new Ownership(left, mover);
  assert.notEqual(before.ownerOf(queueJudgeKey(q)), mover);
  const at = (now: number, owners: Ownership, mark: number) =>
    edges.decide({
      now,
      owners,
      views: [[due(q, 'https://x/a', 0, mark)]],
      complete: true,
      cooldownMs: COOLDOWN,
    });
  assert.deepEqual(at(0, before, 100), []);
  assert.deepEqual(at(1000, after, 900), [], 'the mark predates this node judging q');
  assert.deepEqual(
    at(2000, after, 1900).map((e) => e.reason),
    ['requeued'],
  );
});
