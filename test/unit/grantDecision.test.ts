// The grant's decision over what its scan found (util/leases/grantScan.ts decideGrant), pure: no table,
// no shared memory. The scan records below stand for windows a scan could have found.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GrantScan, decideGrant, type GrantOptions } from '../../util/leases/grantScan.js';
import { Report, State } from '../../util/leases/slots.js';
import type { HandoffLease } from '../../util/cluster/handoff.js';
import { minuteOf } from '../../util/time.js';

const NOW = Date.UTC(2026, 0, 1, 10, 0, 0, 500);
const DUE = Date.UTC(2026, 0, 1, 9, 55);
const options: GrantOptions = { leaseMs: 600_000, dueMs: DUE, cadenceMs: 86_400_000, fastRetries: 2 };

/** A scan of an 8-slot window that found nothing yet. */
function scan(): GrantScan {
  const s = new GrantScan();
  s.reset(8);
  return s;
}

/** A scan that found the key's own slot in `state` with `report`, its last grant at `token`. */
function withOwn(
  state: number,
  over: { due?: number; misses?: number; report?: number; token?: number } = {},
) {
  const s = scan();
  Object.assign(s.own, {
    base: 100,
    word: (7 << 3) | state,
    k: 2,
    token: over.token ?? NOW - 700_000,
    due: over.due ?? minuteOf(DUE),
    misses: over.misses ?? 0,
    report: over.report ?? Report.NONE,
  });
  return s;
}

test('a scan that found a refusing slot is refused, and an adopted lease lengthens that slot instead', () => {
  const s = scan();
  s.refusal = { ok: false, reason: 'leased', expiresAt: NOW + 1000 };
  Object.assign(s.blocking, { base: 48, word: (3 << 3) | State.LEASED, expiry: 99, report: Report.NONE });
  assert.deepEqual(decideGrant(s, NOW, options, undefined), { kind: 'refuse', result: s.refusal });
  const adopted: HandoffLease = { hi: 1, lo: 2, until: 200, dueMinute: 0, misses: 3 };
  assert.deepEqual(decideGrant(s, NOW, options, adopted), {
    kind: 'lengthen',
    blocking: s.blocking,
    refusal: s.refusal,
  });
  // A BUSY slot of the key leaves no readable slot to lengthen: the adopted lease is refused too.
  s.blocking.base = -1;
  assert.equal(decideGrant(s, NOW, options, adopted).kind, 'refuse');
});

test('an own lease that expired unreported is re-granted on its slot with one more miss and requeued', () => {
  const found = withOwn(State.EXPIRED, { misses: 1 });
  assert.deepEqual(decideGrant(found, NOW, options, undefined), {
    kind: 'take',
    slot: found.own,
    token: Math.floor(NOW),
    misses: 2,
    requeued: true,
    reach: 0,
  });
  // Another due minute starts the count over.
  const moved = decideGrant(
    withOwn(State.LEASED, { misses: 1, due: minuteOf(DUE) + 5 }),
    NOW,
    options,
    undefined,
  );
  assert.equal(moved.kind === 'take' && moved.misses, 1);
});

test('a release counts a miss only when the row did not move; a result the fast-retry lane kept counts none', () => {
  const same = decideGrant(withOwn(State.RELEASED, { misses: 1 }), NOW, options, undefined);
  assert.equal(same.kind === 'take' && same.misses, 2);
  assert.equal(same.kind === 'take' && same.requeued, false);
  const moved = decideGrant(withOwn(State.RELEASED, { misses: 1, due: 1 }), NOW, options, undefined);
  assert.equal(moved.kind === 'take' && moved.misses, 0);
  for (const report of [Report.ACCEPTED, Report.UNKNOWN_JOB]) {
    const kept = decideGrant(withOwn(State.LEASED, { misses: 1, report }), NOW, options, undefined);
    assert.deepEqual(kept.kind === 'take' && [kept.misses, kept.requeued], [0, false]);
  }
});

test('fastRetries + 2 misses hold the key on its own slot; an ended hold is probed with its misses', () => {
  const plan = decideGrant(withOwn(State.EXPIRED, { misses: 3 }), NOW, options, undefined);
  assert.equal(plan.kind, 'hold');
  assert.equal(plan.kind === 'hold' && plan.misses, 4);
  const probe = decideGrant(withOwn(State.HELD, { misses: 4 }), NOW, options, undefined);
  assert.deepEqual(probe.kind === 'take' && [probe.misses, probe.requeued], [4, false]);
});

test("a key's grants only grow in their token's instant", () => {
  const plan = decideGrant(withOwn(State.RELEASED, { token: NOW + 5 }), NOW, options, undefined);
  assert.equal(plan.kind === 'take' && plan.token, NOW + 6);
});

test('without an own slot: the first empty slot, else the best spare, else full; past the window the reach grows', () => {
  const s = scan();
  assert.deepEqual(decideGrant(s, NOW, options, undefined), {
    kind: 'refuse',
    result: { ok: false, reason: 'full' },
  });
  Object.assign(s.spare, { base: 300, word: 9, k: 3, rank: 0, end: NOW - 1 });
  const spare = decideGrant(s, NOW, options, undefined);
  assert.equal(spare.kind === 'take' && spare.slot, s.spare);
  Object.assign(s.empty, { base: 200, word: 16, k: 5 });
  const empty = decideGrant(s, NOW, options, undefined);
  assert.equal(empty.kind === 'take' && empty.slot, s.empty);
  assert.equal(empty.kind === 'take' && empty.reach, 0, 'inside the window: no raise');
  s.empty.k = 11;
  const further = decideGrant(s, NOW, options, undefined);
  assert.equal(further.kind === 'take' && further.reach, 12, 'raised to cover the slot before the claim');
  const adopted: HandoffLease = { hi: 1, lo: 2, until: 200, dueMinute: 0, misses: 3 };
  const taken = decideGrant(s, NOW, options, adopted);
  assert.equal(taken.kind === 'take' && taken.misses, 3, "an adopted lease keeps the giver's misses");
});
