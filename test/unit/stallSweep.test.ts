// The stall sweep (services/stall/sweep.ts) with a fake keeper, ledger, fleets and notify, and a fake
// clock: the ledger fake applies the same conditional write as services/stall/ledger.ts (recheckCharge).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '../../util/config/schema.js';
import {
  recheckCharge,
  sameLedgerState,
  type FleetView,
  type HookView,
  type LedgerRow,
  type RepresentativeRow,
} from '../../util/stall/rules.js';
import type { ClusterLook, NodeQueueView } from '../../util/cluster/clusterEdges.js';
import { StallSweep, type SweepKeeper, type SweepOwnership } from '../../services/stall/sweep.js';

const MINUTE = 60_000;
const T0 = Date.UTC(2026, 2, 1, 12, 0, 0);
const ROW: RepresentativeRow = {
  key: 'https://shop.test/product/1',
  dueMs: T0 - 10 * MINUTE,
  fromSitemap: false,
};

function world() {
  const cfg = defaultConfig();
  cfg.stall.after = 2 * MINUTE;
  cfg.stall.backoff = [5 * MINUTE, 20 * MINUTE];
  cfg.stall.maxNudges = 3;
  const due = new Map<string, { dueVerified: number; oldest: RepresentativeRow | null }>([
    ['product', { dueVerified: 1, oldest: ROW }],
  ]);
  const leased = new Set<string>();
  const keeper: SweepKeeper = {
    serving: true,
    loadComplete: true,
    phase: 'live',
    partial: false,
    resyncing: false,
    core: {
      dueSummary: () => ({ byQueue: new Map([...due].map(([q, d]) => [q, { dueVerified: d.dueVerified }])) }),
      oldestDue: (queue, _now, o) => {
        const r = due.get(queue)?.oldest ?? null;
        return r && !o.skip?.(r.key) ? r : null;
      },
    },
  };
  const ledger = new Map<string, LedgerRow>();
  const idOf = (p: { fleetId: string; queue: string }) => JSON.stringify([p.fleetId, p.queue]);
  const marks = new Map<string, number>();
  const fleets: FleetView[] = [{ id: 'f1', name: 'fleet one', state: 'active', queues: [] }];
  const hooks: HookView[] = [{ id: 'h1', fleetId: 'f1', enabled: true, queues: [] }];
  const wakes: Array<{ fleetId: string; queue: string; job: RepresentativeRow; now: number }> = [];
  const published: NodeQueueView[][] = [];
  const looks: ClusterLook[] = [];
  const requeues = new Map<string, number>();
  const marksAsked: number[] = [];
  /** Set: another worker 0 charges the pair between this sweep's plan and its charge. */
  const race = { before: null as LedgerRow | null };
  const state = {
    available: true,
    keeper: keeper as SweepKeeper | undefined,
    ownership: undefined as SweepOwnership | undefined,
    peers: { views: [] as NodeQueueView[][], missing: [] as string[] },
  };
  const sweep = new StallSweep({
    keeper: () => state.keeper,
    ownership: () => state.ownership,
    leases: () => ({ isLeased: (key) => leased.has(key) }),
    ledger: {
      read: async () => [...ledger.values()],
      charge: async (charge, now, lastClaimAt, stall) => {
        if (race.before) ledger.set(idOf(charge), race.before);
        race.before = null;
        const current = ledger.get(idOf(charge)) ?? null;
        if (!recheckCharge(current, charge, now, lastClaimAt, stall)) return false;
        ledger.set(idOf(charge), charge.next);
        return true;
      },
      drain: async (rows) => {
        let n = 0;
        for (const seen of rows) {
          const current = ledger.get(idOf(seen)) ?? null;
          if (current === null || !sameLedgerState(current, seen)) continue;
          ledger.delete(idOf(seen));
          n++;
        }
        return n;
      },
      idOf,
    },
    dueBoard: {
      publish: async (_node, views) => {
        published.push([...views]);
        return views.length;
      },
      peers: async () => state.peers,
    },
    claimMarks: async () => new Map(marks),
    fleets: async () => fleets,
    hooks: async () => hooks,
    notifyAvailable: () => state.available,
    fireStalled: (fleetId, queue, job, now) => wakes.push({ fleetId, queue, job, now }),
    requeueMarks: (since) => {
      marksAsked.push(since);
      return new Map([...requeues].filter(([, at]) => at >= since));
    },
    judgeEdges: (look) => {
      looks.push(look);
      return 0;
    },
    config: () => cfg,
    tickInterval: () => cfg.maintenance.tickInterval,
    count: () => {},
    log: { debug: () => {}, info: () => {}, error: () => {} },
  });
  return {
    sweep,
    due,
    leased,
    ledger,
    marks,
    fleets,
    hooks,
    wakes,
    published,
    looks,
    requeues,
    marksAsked,
    state,
    cfg,
    race,
  };
}

test('a pair another sweep charged since this plan is not charged or woken again', async () => {
  const w = world();
  w.race.before = { fleetId: 'f1', queue: 'product', nudges: 1, lastNudgedAt: T0 - 1 };
  assert.deepEqual(await w.sweep.runOnce(T0), { drained: 0, nudged: 0 });
  assert.deepEqual(w.wakes, [], "the other sweep's wake is the one wake");
});

test('a stalled pair is charged and woken once, and not again inside its backoff', async () => {
  const w = world();
  assert.deepEqual(await w.sweep.runOnce(T0), { drained: 0, nudged: 1 });
  assert.deepEqual(w.wakes, [{ fleetId: 'f1', queue: 'product', job: ROW, now: T0 }]);
  assert.deepEqual(await w.sweep.runOnce(T0 + 5 * MINUTE - 1), { drained: 0, nudged: 0 });
  assert.equal(w.wakes.length, 1, 'one wake per cooldown');
  assert.deepEqual(await w.sweep.runOnce(T0 + 5 * MINUTE), { drained: 0, nudged: 1 });
  assert.deepEqual(
    [...w.ledger.values()].map((r) => [r.nudges, r.lastNudgedAt]),
    [[2, T0 + 5 * MINUTE]],
  );
});

test('progress (a claim from the queue after the last nudge) resets the pair to its first nudge', async () => {
  const w = world();
  await w.sweep.runOnce(T0);
  await w.sweep.runOnce(T0 + 5 * MINUTE);
  assert.equal([...w.ledger.values()][0]!.nudges, 2);
  w.marks.set('product', T0 + 6 * MINUTE); // a claim, then the queue stalls again
  assert.deepEqual(await w.sweep.runOnce(T0 + 7 * MINUTE), { drained: 0, nudged: 1 });
  assert.deepEqual(
    [...w.ledger.values()].map((r) => [r.nudges, r.lastNudgedAt]),
    [[1, T0 + 7 * MINUTE]],
  );
});

test('a pair goes quiet after stall.maxNudges wakes without progress', async () => {
  const w = world();
  let at = T0;
  for (let i = 0; i < 10; i++, at += 60 * MINUTE) await w.sweep.runOnce(at);
  assert.equal(w.wakes.length, 3);
});

test('a queue whose due work is gone has its ledger row drained, so the next stall starts fresh', async () => {
  const w = world();
  await w.sweep.runOnce(T0);
  w.due.delete('product');
  assert.deepEqual(await w.sweep.runOnce(T0 + MINUTE), { drained: 1, nudged: 0 });
  assert.equal(w.ledger.size, 0);
});

test('a queue whose due rows are all leased is busy, not stalled: no wake, and its row is kept', async () => {
  const w = world();
  await w.sweep.runOnce(T0);
  w.leased.add(ROW.key);
  assert.deepEqual(await w.sweep.runOnce(T0 + 60 * MINUTE), { drained: 0, nudged: 0 });
  assert.equal(w.ledger.size, 1);
});

test('nothing is swept before the keeper has loaded and serves; a partial view charges but never drains', async () => {
  const w = world();
  w.state.keeper = { ...w.state.keeper!, loadComplete: false };
  assert.deepEqual(await w.sweep.runOnce(T0), {});
  w.state.keeper = { ...w.state.keeper, loadComplete: true, partial: true };
  assert.deepEqual(await w.sweep.runOnce(T0), { drained: 0, nudged: 1 });
  w.due.delete('product');
  assert.deepEqual(await w.sweep.runOnce(T0 + MINUTE), { drained: 0, nudged: 0 });
  assert.equal(w.ledger.size, 1, 'a partial view cannot vouch that the queue has no due work');
});

test('with notify unable to send, nothing is charged (the budget is not spent on a wake nobody gets)', async () => {
  const w = world();
  w.state.available = false;
  assert.deepEqual(await w.sweep.runOnce(T0), { drained: 0, nudged: 0 });
  assert.equal(w.ledger.size, 0);
  w.state.available = true;
  assert.deepEqual(await w.sweep.runOnce(T0 + 1), { drained: 0, nudged: 1 });
});

test('a ledger row of a revoked fleet is drained as an orphan', async () => {
  const w = world();
  await w.sweep.runOnce(T0);
  w.fleets[0] = { ...w.fleets[0]!, state: 'revoked' };
  assert.deepEqual(await w.sweep.runOnce(T0 + MINUTE), { drained: 1, nudged: 0 });
});

test("clustered, only the pair's owner node charges it, and a node with no fresh view blocks drains", async () => {
  const w = world();
  const owners = (self: string): SweepOwnership => ({ nodes: ['a', 'b'], self, ownerOf: () => 'b' });
  w.state.ownership = owners('a');
  assert.deepEqual(await w.sweep.runOnce(T0), { drained: 0, nudged: 0 });
  assert.equal(w.published.length, 1, 'this node still published its view');
  w.state.ownership = owners('b');
  assert.deepEqual(await w.sweep.runOnce(T0), { drained: 0, nudged: 1 });
  w.due.delete('product');
  w.state.peers = { views: [], missing: ['a'] };
  assert.deepEqual(await w.sweep.runOnce(T0 + MINUTE), { drained: 0, nudged: 0 });
  assert.equal(w.ledger.size, 1);
  w.state.peers = { views: [], missing: [] };
  assert.deepEqual(await w.sweep.runOnce(T0 + 2 * MINUTE), { drained: 1, nudged: 0 });
});

test('alone, the sweep hands no look to the edge judges and publishes nothing (the keeper decides edges)', async () => {
  const w = world();
  await w.sweep.runOnce(T0);
  assert.deepEqual([w.looks, w.published, w.marksAsked], [[], [], []]);
});

test("clustered, this node's requeue marks ride on its published view, and the judges get every fresh view", async () => {
  const w = world();
  const tick = w.cfg.maintenance.tickInterval;
  w.state.ownership = { nodes: ['a', 'b'], self: 'a', ownerOf: () => 'b' };
  w.requeues.set('product', T0 - 1000);
  w.requeues.set('blog', T0 - 2000); // no due work of blog here: published as a mark alone
  w.requeues.set('old', T0 - 6 * tick - 5001); // older than any judge reads: dropped
  const peer: NodeQueueView = { queue: 'product', hasGateDue: true, oldestGateDue: ROW, requeuedAt: null };
  w.state.peers = { views: [[peer]], missing: [] };
  await w.sweep.runOnce(T0);
  const mine: NodeQueueView[] = [
    { queue: 'product', hasGateDue: true, oldestGateDue: ROW, requeuedAt: T0 - 1000 },
    { queue: 'blog', hasGateDue: false, oldestGateDue: null, requeuedAt: T0 - 2000 },
  ];
  assert.deepEqual(w.published, [mine]);
  assert.deepEqual(w.marksAsked, [T0 - 6 * tick - 5000]);
  assert.equal(w.looks.length, 1);
  assert.deepEqual(w.looks[0]!.views, [mine, [peer]]);
  assert.equal(w.looks[0]!.complete, true);
  assert.equal(w.looks[0]!.now, T0);
  assert.equal(w.looks[0]!.owners.self, 'a');
});

test('a look is incomplete while a node has no fresh view or this keeper cannot vouch for its own', async () => {
  const w = world();
  w.state.ownership = { nodes: ['a', 'b'], self: 'a', ownerOf: () => 'a' };
  w.state.peers = { views: [], missing: ['b'] };
  await w.sweep.runOnce(T0);
  w.state.peers = { views: [], missing: [] };
  w.state.keeper = { ...w.state.keeper!, resyncing: true };
  await w.sweep.runOnce(T0 + 1);
  w.state.keeper = { ...w.state.keeper, resyncing: false, partial: true };
  await w.sweep.runOnce(T0 + 2);
  w.state.keeper = { ...w.state.keeper, partial: false };
  await w.sweep.runOnce(T0 + 3);
  assert.deepEqual(
    w.looks.map((l) => l.complete),
    [false, false, false, true],
  );
});
