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
  assert.deepEqual(look(nodes, 3000, withMark(2500)), [], 'a newer mark inside the cooldown waits');
  assert.equal(look(nodes, 1000 + COOLDOWN, withMark(2500)).length, 1, 'and rings once the cooldown passed');
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
