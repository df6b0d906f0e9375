// This node's due-summary rows (services/stall/dueSummaries.ts) over a fake table and transaction:
// only changes and refreshes are written, the heartbeat keeps a quiet node visible, and a failed commit
// is written again on the next tick.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { NodeQueueView } from '../../util/cluster/clusterEdges.js';
import { DueSummaryBoard } from '../../services/stall/dueSummaries.js';

const T0 = Date.UTC(2026, 2, 1, 12, 0, 0);
const REFRESH = 60_000;

function world() {
  const rows = new Map<string, Record<string, unknown>>();
  const state = { failNext: false, commits: 0 };
  const board = new DueSummaryBoard({
    table: () => ({
      put: async (id, record) => {
        rows.set(id, record);
      },
      delete: async (id) => rows.delete(id),
      search: () =>
        (async function* () {
          yield* [...rows.values()];
        })(),
    }),
    transaction: async (fn) => {
      const before = new Map(rows);
      try {
        const r = await fn(undefined);
        if (state.failNext) throw new Error('commit failed');
        state.commits++;
        return r;
      } catch (e) {
        rows.clear();
        for (const [k, v] of before) rows.set(k, v);
        state.failNext = false;
        throw e;
      }
    },
  });
  return { board, rows, state };
}

const view = (queue: string, dueMs = T0 - 600_000, requeuedAt: number | null = null): NodeQueueView => ({
  queue,
  hasGateDue: true,
  oldestGateDue: { key: `https://shop.test/${queue}/1`, dueMs, fromSitemap: false },
  requeuedAt,
});

test('a view is written once, and again only when it changes or is due a refresh', async () => {
  const w = world();
  assert.equal(await w.board.publish('a', [view('product')], T0, REFRESH), 2, 'the view and the heartbeat');
  assert.equal(await w.board.publish('a', [view('product')], T0 + 1000, REFRESH), 0);
  assert.equal(w.state.commits, 1, 'nothing to write, no transaction');
  assert.equal(await w.board.publish('a', [view('product', T0)], T0 + 2000, REFRESH), 1, 'changed');
  assert.equal(await w.board.publish('a', [view('product', T0)], T0 + REFRESH, REFRESH), 1, 'the heartbeat');
  assert.equal(
    await w.board.publish('a', [view('product', T0)], T0 + 2000 + REFRESH, REFRESH),
    1,
    'refreshed',
  );
});

test('a queue with no due work any more has its row deleted', async () => {
  const w = world();
  await w.board.publish('a', [view('product'), view('blog')], T0, REFRESH);
  assert.equal(await w.board.publish('a', [view('product')], T0 + 1000, REFRESH), 1);
  assert.deepEqual([...w.rows.values()].map((r) => r.queue).sort(), ['', 'product']);
});

test('a failed commit is written again on the next tick', async () => {
  const w = world();
  w.state.failNext = true;
  await assert.rejects(w.board.publish('a', [view('product')], T0, REFRESH), /commit failed/);
  assert.equal(w.rows.size, 0);
  assert.equal(await w.board.publish('a', [view('product')], T0 + 1000, REFRESH), 2);
  assert.equal(w.rows.size, 2);
});

test("the other nodes' fresh views are read back; a node with only stale rows is missing", async () => {
  const w = world();
  const b = world();
  await w.board.publish('b', [view('product')], T0, REFRESH);
  await b.board.publish('c', [view('blog')], T0 - 10 * REFRESH, REFRESH);
  for (const [k, v] of b.rows) w.rows.set(k, v);
  const peers = await w.board.peers('a', ['a', 'b', 'c'], T0 + 1000, 3 * REFRESH);
  assert.deepEqual(peers.views, [[view('product')]]);
  assert.deepEqual(peers.missing, ['c']);
});

test("a new requeue mark rewrites the queue's row at once, and the other nodes read it back", async () => {
  const w = world();
  await w.board.publish('b', [view('product')], T0, REFRESH);
  assert.equal(await w.board.publish('b', [view('product', undefined, T0 + 500)], T0 + 1000, REFRESH), 1);
  // A mark with no due work left on that node (the requeued row was unverified) is still published.
  const markOnly: NodeQueueView = {
    queue: 'blog',
    hasGateDue: false,
    oldestGateDue: null,
    requeuedAt: T0 + 900,
  };
  assert.equal(
    await w.board.publish('b', [view('product', undefined, T0 + 500), markOnly], T0 + 1500, REFRESH),
    1,
  );
  const peers = await w.board.peers('a', ['a', 'b'], T0 + 2000, 3 * REFRESH);
  assert.deepEqual(peers.views, [[view('product', undefined, T0 + 500), markOnly]]);
});
