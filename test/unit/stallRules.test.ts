// The stall ledger's rules (docs/wakes.md) on a fake clock: every time is a plain ms value, sweeps are
// function calls, and the ledger is an in-memory Map committed through recheckCharge exactly as the
// Harper-facing sweep commits through a locked read and a conditional write.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { defaultConfig } from '../../util/config/schema.js';
import {
  backoffAfter,
  canReceive,
  hookCovers,
  isDue,
  mergeDueViews,
  nextLedgerRow,
  planSweep,
  recheckCharge,
  type FleetView,
  type HookView,
  type LedgerRow,
  type QueueDueView,
  type StallCharge,
  type StallConfig,
  type StallInputs,
  type StallPlan,
} from '../../util/stall/rules.js';

const SEC = 1000;
const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;
const TICK = 30 * SEC; // maintenance.tickInterval default
const T0 = Date.UTC(2026, 0, 5, 12, 0, 0, 0); // minute-aligned, as every writer stores nextRenderTime
const STALL: StallConfig = defaultConfig().stall;

function fleet(over: Partial<FleetView> = {}): FleetView {
  return { id: 'f1', name: 'renderers', state: 'active', queues: [], ...over };
}

function hook(over: Partial<HookView> = {}): HookView {
  return { id: 'h1', fleetId: 'f1', enabled: true, queues: [], ...over };
}

/** A queue whose oldest due, verified, unleased row is `key`, due at `dueMs`. */
function dueQueue(queue: string, dueMs: number, key = `https://example.com/${queue}/1`): QueueDueView {
  return { queue, oldestGateDue: { key, dueMs, fromSitemap: true }, hasGateDue: true };
}

function row(over: Partial<LedgerRow> = {}): LedgerRow {
  return { fleetId: 'f1', queue: 'blog', nudges: 1, lastNudgedAt: T0, ...over };
}

function inputs(over: Partial<StallInputs> = {}): StallInputs {
  return {
    now: T0 + 3 * MIN,
    queues: [dueQueue('blog', T0)],
    fleets: [fleet()],
    hooks: [hook()],
    ledger: [],
    lastClaimAt: new Map(),
    config: STALL,
    ...over,
  };
}

const pairKey = (p: { fleetId: string; queue: string }) => `${p.fleetId}/${p.queue}`;

/** Everything a sweep reads besides the clock, with the ledger as the shared store. */
interface World {
  queues: QueueDueView[];
  fleets: FleetView[];
  hooks: HookView[];
  lastClaimAt: Map<string, number>;
  config: StallConfig;
  ledger: Map<string, LedgerRow>;
}

function world(over: Partial<World> = {}): World {
  const base = inputs();
  return { ...base, ledger: new Map(), ...over };
}

function plan(w: World, now: number): StallPlan {
  return planSweep({ ...w, now, ledger: [...w.ledger.values()] });
}

/** The sweep's write step: per charge, read the row "under its lock", re-check, then write. */
function commit(w: World, p: StallPlan, now: number): StallCharge[] {
  for (const r of p.drain) w.ledger.delete(pairKey(r));
  const landed: StallCharge[] = [];
  for (const c of p.charges) {
    const current = w.ledger.get(pairKey(c)) ?? null;
    if (!recheckCharge(current, c, now, w.lastClaimAt.get(c.queue), w.config)) continue;
    w.ledger.set(pairKey(c), c.next);
    landed.push(c);
  }
  return landed;
}

function sweep(w: World, now: number): StallCharge[] {
  return commit(w, plan(w, now), now);
}

/** Runs the maintenance tick from `from` to `to` and returns every wake with its time. */
function runTicks(w: World, from: number, to: number): Array<{ at: number; charge: StallCharge }> {
  const wakes: Array<{ at: number; charge: StallCharge }> = [];
  for (let now = from; now <= to; now += TICK)
    for (const charge of sweep(w, now)) wakes.push({ at: now, charge });
  return wakes;
}

test('a stalled queue with a receiver and no ledger row rings once, naming its oldest gate-passing due row', () => {
  const p = planSweep(inputs());
  assert.deepEqual(p.drain, []);
  assert.equal(p.charges.length, 1);
  const [c] = p.charges;
  assert.equal(c!.fleetId, 'f1');
  assert.equal(c!.queue, 'blog');
  assert.equal(c!.previous, null);
  assert.deepEqual(c!.next, { fleetId: 'f1', queue: 'blog', nudges: 1, lastNudgedAt: T0 + 3 * MIN });
  assert.deepEqual(c!.representative, { key: 'https://example.com/blog/1', dueMs: T0, fromSitemap: true });
});

test('a queue stays quiet until its oldest due row has been due longer than stall.after', () => {
  const at = (now: number) => planSweep(inputs({ now })).charges.length;
  assert.equal(at(T0 + STALL.after - 1), 0);
  assert.equal(at(T0 + STALL.after), 0, 'due exactly stall.after is not longer than it');
  assert.equal(at(T0 + STALL.after + 1), 1);
});

test('age runs from the minute-floored due time, so a row can qualify up to a minute early', () => {
  const dueMs = T0 + 59 * SEC; // an unfloored due time inside the minute that starts at T0
  const now = T0 + STALL.after + 1;
  assert.ok(now - dueMs < STALL.after, 'measured from the raw due time the row is still young');
  assert.equal(planSweep(inputs({ now, queues: [dueQueue('blog', dueMs)] })).charges.length, 1);
  assert.equal(
    planSweep(inputs({ now: T0 + STALL.after, queues: [dueQueue('blog', dueMs)] })).charges.length,
    0,
  );
});

test('a drained queue is silent and its ledger row deleted, so the next stall starts at nudges 1', () => {
  const capped = row({ nudges: STALL.maxNudges, lastNudgedAt: T0 });
  const w = world({ ledger: new Map([[pairKey(capped), capped]]), queues: [] });
  const drained = plan(w, T0 + 10 * MIN);
  assert.deepEqual(drained.drain, [capped]);
  assert.deepEqual(drained.charges, []);
  commit(w, drained, T0 + 10 * MIN);
  assert.equal(w.ledger.size, 0);

  // Work comes due again: the budget is fresh, not still at the cap.
  w.queues = [dueQueue('blog', T0 + 20 * MIN)];
  const [wake] = sweep(w, T0 + 23 * MIN);
  assert.equal(wake?.previous, null);
  assert.equal(wake?.next.nudges, 1);
});

test('a queue whose due gate-passing rows are all leased keeps its ledger row and is not charged', () => {
  const leasedOnly: QueueDueView = { queue: 'blog', oldestGateDue: null, hasGateDue: true };
  const p = planSweep(inputs({ queues: [leasedOnly], ledger: [row({ lastNudgedAt: T0 - DAY })] }));
  assert.deepEqual(p, { drain: [], charges: [] });
});

test('nudges back off 5 m, 20 m, 1 h and 6 h, then the pair goes silent at maxNudges', () => {
  const w = world();
  const wakes = runTicks(w, T0, T0 + 3 * DAY);
  assert.deepEqual(
    wakes.map((x) => x.charge.next.nudges),
    [1, 2, 3, 4, 5],
  );
  assert.equal(wakes[0]!.at, T0 + STALL.after + TICK, 'first tick past stall.after');
  const gaps = wakes.slice(1).map((x, i) => x.at - wakes[i]!.at);
  assert.deepEqual(gaps, [5 * MIN, 20 * MIN, HOUR, 6 * HOUR]);
  assert.deepEqual(w.ledger.get('f1/blog'), row({ nudges: 5, lastNudgedAt: wakes[4]!.at }));
});

test('the last backoff step repeats until the cap', () => {
  const config = { ...STALL, maxNudges: 7 };
  const wakes = runTicks(world({ config }), T0, T0 + 4 * DAY);
  const gaps = wakes.slice(1).map((x, i) => x.at - wakes[i]!.at);
  assert.deepEqual(gaps, [5 * MIN, 20 * MIN, HOUR, 6 * HOUR, 6 * HOUR, 6 * HOUR]);
  assert.equal(backoffAfter(100, config), 6 * HOUR);
  assert.equal(backoffAfter(0, config), 5 * MIN, 'a corrupt count clamps to the first step');
});

test('at the cap without progress a pair stays silent however long it waits', () => {
  const capped = row({ nudges: STALL.maxNudges, lastNudgedAt: T0 });
  assert.deepEqual(isDue(capped, T0 + 365 * DAY, T0 - MIN, STALL), { due: false, progress: false });
  const p = planSweep(inputs({ now: T0 + 30 * DAY, ledger: [capped], lastClaimAt: new Map([['blog', T0]]) }));
  assert.deepEqual(p, { drain: [], charges: [] });
});

test('a claim from the queue since the last nudge resets the pair to nudges 1 and rings at once', () => {
  const capped = row({ nudges: STALL.maxNudges, lastNudgedAt: T0 + 10 * MIN });
  const now = T0 + 10 * MIN + TICK; // far inside any backoff step
  const claimed = new Map([['blog', T0 + 10 * MIN + 1]]);
  const p = planSweep(inputs({ now, ledger: [capped], lastClaimAt: claimed }));
  assert.equal(p.charges.length, 1);
  assert.deepEqual(p.charges[0]!.previous, capped);
  assert.deepEqual(p.charges[0]!.next, row({ nudges: 1, lastNudgedAt: now }));

  // A claim at or before the nudge is not progress: the pair keeps waiting its backoff.
  assert.deepEqual(isDue(capped, now, capped.lastNudgedAt, STALL), { due: false, progress: false });
  assert.deepEqual(isDue(row({ lastNudgedAt: T0 }), T0 + MIN, T0 - 1, STALL), {
    due: false,
    progress: false,
  });
  // After the progress charge the old claim no longer counts: the next wake waits the first step.
  const next = p.charges[0]!.next;
  assert.equal(isDue(next, now + 5 * MIN - 1, claimed.get('blog'), STALL).due, false);
  assert.equal(isDue(next, now + 5 * MIN, claimed.get('blog'), STALL).due, true);
});

test('a revoked fleet gets no charge', () => {
  assert.deepEqual(planSweep(inputs({ fleets: [fleet({ state: 'revoked' })] })).charges, []);
});

test('a fleet without hooks gets no charge', () => {
  const p = planSweep(inputs({ hooks: [hook({ fleetId: 'someone-else' })] }));
  assert.deepEqual(p.charges, []);
});

test('a fleet whose only hook is disabled gets no charge, and one enabled hook among them suffices', () => {
  assert.deepEqual(planSweep(inputs({ hooks: [hook({ enabled: false })] })).charges, []);
  const mixed = [hook({ enabled: false }), hook({ id: 'h2' }), hook({ id: 'h3' })];
  assert.equal(planSweep(inputs({ hooks: mixed })).charges.length, 1, 'one charge per pair, not per hook');
});

test('a hook filtered away from the queue gives its fleet no charge for it', () => {
  const hooks = [hook({ queues: ['news'] })];
  const queues = [dueQueue('blog', T0), dueQueue('news', T0)];
  const p = planSweep(inputs({ hooks, queues }));
  assert.deepEqual(
    p.charges.map((c) => c.queue),
    ['news'],
  );
});

test('a fleet whose scope excludes the queue gets no charge, even from a hook that names the queue', () => {
  const fleets = [fleet({ queues: ['news'] })];
  const hooks = [hook({ queues: ['blog', 'news'] })];
  const queues = [dueQueue('blog', T0), dueQueue('news', T0)];
  assert.deepEqual(
    planSweep(inputs({ fleets, hooks, queues })).charges.map((c) => c.queue),
    ['news'],
  );
  assert.equal(hookCovers(hooks[0]!, fleets[0]!, 'blog'), false);
});

test('hook coverage follows the fleet scope and filter; receiving also needs an active fleet and an enabled hook', () => {
  const all = fleet();
  const scoped = fleet({ queues: ['blog'] });
  assert.equal(hookCovers(hook(), all, 'anything'), true, 'empty filter, empty scope: every queue');
  assert.equal(hookCovers(hook(), scoped, 'blog'), true, "empty filter: the fleet's queues");
  assert.equal(hookCovers(hook(), scoped, 'news'), false);
  assert.equal(hookCovers(hook({ queues: ['news'] }), all, 'news'), true);
  assert.equal(hookCovers(hook({ fleetId: 'f2' }), all, 'blog'), false, "another fleet's hook");
  assert.equal(canReceive(hook(), all, 'blog'), true);
  assert.equal(canReceive(hook({ enabled: false }), all, 'blog'), false);
  assert.equal(canReceive(hook(), fleet({ state: 'revoked' }), 'blog'), false);
});

test('a queue whose due rows are all unverified is drained and never charged', () => {
  // Contract: the view carries gate-passing rows only, so all-unverified work arrives as no due rows.
  const unverifiedOnly: QueueDueView = { queue: 'discovered', oldestGateDue: null, hasGateDue: false };
  const stale = row({ queue: 'discovered', nudges: 2, lastNudgedAt: T0 - DAY });
  const p = planSweep(inputs({ now: T0 + DAY, queues: [unverifiedOnly], ledger: [stale] }));
  assert.deepEqual(p.drain, [stale]);
  assert.deepEqual(p.charges, []);
});

test('a wake names only the gate-passing row it was given, never another row of the queue', () => {
  // A newer verified row behind older unverified ones: the builder passes the verified one, and that is
  // the only URL that can reach a body.
  const q: QueueDueView = {
    queue: 'blog',
    oldestGateDue: { key: 'https://example.com/verified', dueMs: T0, fromSitemap: false },
    hasGateDue: true,
  };
  const [c] = planSweep(inputs({ queues: [q] })).charges;
  assert.deepEqual(c?.representative, { key: 'https://example.com/verified', dueMs: T0, fromSitemap: false });
  assert.notEqual(c?.representative, q.oldestGateDue, 'a copy, so a later edit of the view cannot change it');
});

test('the sweep limit keeps the least-nudged pairs, breaking ties by longest wait, oldest due row, then name', () => {
  const now = T0 + DAY;
  const queues = ['q1', 'q2', 'q3', 'q4', 'q5', 'q6'].map((q, i) => dueQueue(q, T0 + i * MIN));
  queues.push(dueQueue('q0', T0 + 9 * MIN));
  const ledger = [
    row({ queue: 'q1', nudges: 3, lastNudgedAt: T0 }),
    row({ queue: 'q2', nudges: 1, lastNudgedAt: T0 + MIN }),
    row({ queue: 'q3', nudges: 1, lastNudgedAt: T0 }),
    row({ queue: 'q4', nudges: 2, lastNudgedAt: T0 }),
    // q5 and q0 have no row: never nudged, so first; q5's due row is the older of the two.
    row({ queue: 'q6', nudges: 4, lastNudgedAt: T0, fleetId: 'f1' }),
  ];
  const config = { ...STALL, sweepLimit: 4 };
  const p = planSweep(inputs({ now, queues, ledger, config }));
  assert.deepEqual(
    p.charges.map((c) => `${c.queue}:${c.next.nudges}`),
    ['q5:1', 'q0:1', 'q3:2', 'q2:2'],
  );

  // Same decision whatever order the inputs arrive in, so racing sweeps pick the same pairs.
  const shuffled = planSweep(
    inputs({ now, queues: [...queues].reverse(), ledger: [...ledger].reverse(), config }),
  );
  assert.deepEqual(shuffled, p);
});

test('equal pairs of different fleets are ordered by fleet id', () => {
  const fleets = [fleet({ id: 'fb' }), fleet({ id: 'fa' })];
  const hooks = [hook({ fleetId: 'fb' }), hook({ id: 'h2', fleetId: 'fa' })];
  const p = planSweep(inputs({ fleets, hooks, config: { ...STALL, sweepLimit: 1 } }));
  assert.deepEqual(
    p.charges.map((c) => c.fleetId),
    ['fa'],
  );
});

test('recheckCharge refuses a row that changed since the plan, even when the changed row is due', () => {
  const seen = row({ nudges: 1, lastNudgedAt: T0 });
  const changed = row({ nudges: 2, lastNudgedAt: T0 + MIN });
  const now = T0 + DAY;
  assert.equal(isDue(changed, now, undefined, STALL).due, true);
  assert.equal(recheckCharge(changed, { previous: seen }, now, undefined, STALL), false);
  assert.equal(recheckCharge(changed, { previous: null }, now, undefined, STALL), false, 'created meanwhile');
  assert.equal(recheckCharge(null, { previous: seen }, now, undefined, STALL), false, 'drained meanwhile');
  assert.equal(recheckCharge(seen, { previous: { ...seen } }, now, undefined, STALL), true);
  assert.equal(recheckCharge(null, { previous: null }, now, undefined, STALL), true);
});

test('recheckCharge refuses an unchanged row once the due predicate no longer holds', () => {
  const seen = row({ nudges: 2, lastNudgedAt: T0 });
  const now = T0 + HOUR;
  assert.equal(recheckCharge(seen, { previous: seen }, now, undefined, STALL), true);
  // maxNudges lowered between plan and write.
  assert.equal(recheckCharge(seen, { previous: seen }, now, undefined, { ...STALL, maxNudges: 2 }), false);
});

test('one wake when two sweeps race', () => {
  // Guard: recheckCharge in commit(). Replacing its call with `true` makes both sweeps land and this
  // test fail (checked once by hand) — the plan alone cannot see a charge made after its snapshot.
  // The row-identity half of the re-check has its own failing-without-it test above.
  for (const existing of [null, row({ nudges: 2, lastNudgedAt: T0 })]) {
    const w = world({ ledger: existing ? new Map([[pairKey(existing), existing]]) : new Map() });
    const now = T0 + 2 * HOUR;
    const a = plan(w, now);
    const b = plan(w, now + 7); // another worker or node, a few ms later, same ledger snapshot
    assert.equal(a.charges.length, 1);
    assert.equal(b.charges.length, 1);
    const landedA = commit(w, a, now);
    const landedB = commit(w, b, now + 7);
    assert.equal(landedA.length + landedB.length, 1, 'exactly one charge, so exactly one wake');
    assert.deepEqual(w.ledger.get('f1/blog'), landedA[0]!.next);
  }
});

test('any number of sweeps planned from one snapshot charge each pair at most once', () => {
  fc.assert(
    fc.property(
      fc.array(fc.constantFrom('q1', 'q2', 'q3'), { maxLength: 3 }),
      fc.array(
        fc.record({ queue: fc.constantFrom('q1', 'q2', 'q3'), nudges: fc.integer({ min: 1, max: 6 }) }),
        {
          maxLength: 3,
        },
      ),
      fc.integer({ min: 2, max: 5 }),
      fc.integer({ min: 0, max: 2 * DAY }),
      (dueQueues, rows, sweeps, elapsed) => {
        const queues = [...new Set(dueQueues)].map((q) => dueQueue(q, T0));
        const ledger = new Map(
          rows.map((r) => [pairKey(row(r)), row({ ...r, lastNudgedAt: T0 + 5 * MIN })] as const),
        );
        const w = world({ queues, ledger, config: { ...STALL, sweepLimit: 2 } });
        const now = T0 + elapsed;
        const plans = Array.from({ length: sweeps }, () => plan(w, now));
        const landed = plans.flatMap((p) => commit(w, p, now)).map(pairKey);
        assert.equal(new Set(landed).size, landed.length, 'no pair charged twice');
        assert.ok(landed.length <= 2 * sweeps);
        assert.deepEqual(landed.sort(), plans[0]!.charges.map(pairKey).sort(), 'the first commit wins');
      },
    ),
  );
});

test('a plan never exceeds the sweep limit and only charges due pairs of stalled queues', () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ q: fc.constantFrom('a', 'b', 'c', 'd'), age: fc.integer({ min: 0, max: HOUR }) })),
      fc.array(fc.record({ q: fc.constantFrom('a', 'b', 'c', 'd'), nudges: fc.integer({ min: 1, max: 6 }) })),
      fc.integer({ min: 1, max: 4 }),
      (views, rows, sweepLimit) => {
        const now = T0 + HOUR;
        const queues = [...new Map(views.map((v) => [v.q, dueQueue(v.q, now - v.age)])).values()];
        const ledger = rows.map((r) => row({ queue: r.q, nudges: r.nudges, lastNudgedAt: T0 }));
        const config = { ...STALL, sweepLimit };
        const p = planSweep(inputs({ now, queues, ledger, config }));
        assert.ok(p.charges.length <= sweepLimit);
        for (const c of p.charges) {
          const view = queues.find((q) => q.queue === c.queue)!;
          assert.ok(now - Math.floor(view.oldestGateDue!.dueMs / MIN) * MIN > STALL.after);
          assert.ok(isDue(c.previous, now, undefined, config).due);
          assert.deepEqual(c.next, nextLedgerRow(c, c.previous, now, false));
        }
        for (let i = 1; i < p.charges.length; i++)
          assert.ok(p.charges[i - 1]!.next.nudges <= p.charges[i]!.next.nudges, 'least-nudged first');
      },
    ),
  );
});

test('views merged across nodes: due if any node has due work, the oldest row across nodes represents it', () => {
  const row = (key: string, dueMs: number) => ({ key, dueMs, fromSitemap: false });
  const merged = mergeDueViews([
    [
      { queue: 'a', hasGateDue: true, oldestGateDue: row('https://x/2', 2000) },
      { queue: 'b', hasGateDue: true, oldestGateDue: null },
    ],
    [
      { queue: 'a', hasGateDue: true, oldestGateDue: row('https://x/1', 1000) },
      { queue: 'b', hasGateDue: false, oldestGateDue: null },
      { queue: 'c', hasGateDue: true, oldestGateDue: row('https://x/9', 9000) },
    ],
  ]);
  const byQueue = new Map(merged.map((v) => [v.queue, v]));
  assert.equal(byQueue.get('a')?.oldestGateDue?.key, 'https://x/1');
  assert.equal(byQueue.get('b')?.hasGateDue, true);
  assert.equal(byQueue.get('b')?.oldestGateDue, null);
  assert.equal(byQueue.get('c')?.oldestGateDue?.key, 'https://x/9');
});

test('a sweep charges only the pairs it may charge (the pair owner in a cluster), before the sweep limit', () => {
  const cfg = { ...defaultConfig().stall, sweepLimit: 1 };
  const now = 10 * 60_000 * 60;
  const plan = planSweep({
    now,
    queues: ['q1', 'q2'].map((queue) => ({
      queue,
      hasGateDue: true,
      oldestGateDue: { key: `https://x/${queue}`, dueMs: now - 10 * 60_000, fromSitemap: true },
    })),
    fleets: [{ id: 'f', name: 'f', state: 'active', queues: [] }],
    hooks: [{ id: 'h', fleetId: 'f', enabled: true, queues: [] }],
    ledger: [],
    lastClaimAt: new Map(),
    config: cfg,
    mayCharge: (pair) => pair.queue === 'q2',
  });
  assert.deepEqual(
    plan.charges.map((c) => c.queue),
    ['q2'],
  );
});
