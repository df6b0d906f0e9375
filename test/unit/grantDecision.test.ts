// The grant's decision over what its scan found (util/leases/grantScan.ts decideGrant), pure: no table,
// no shared memory. The scan records below stand for windows a scan could have found.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GrantPlan, GrantScan, decideGrant, type GrantOptions } from '../../util/leases/grantScan.js';
import { Report, State } from '../../util/leases/slots.js';
import type { HandoffLease } from '../../util/cluster/handoff.js';
import { minuteOf } from '../../util/time.js';

const NOW = Date.UTC(2026, 0, 1, 10, 0, 0, 500);
const DUE = Date.UTC(2026, 0, 1, 9, 55);
const options: GrantOptions = { leaseMs: 600_000, dueMs: DUE, cadenceMs: 86_400_000, fastRetries: 2 };
const adopted: HandoffLease = { hi: 1, lo: 2, until: 200, dueMinute: 0, misses: 3 };

/** A scan of an 8-slot window that found nothing yet. */
function scan(): GrantScan {
  const s = new GrantScan();
  s.reset(8);
  return s;
}

/** A scan that found the key's own slot in `state`, its last grant at `token`. */
function withOwn(
  state: number,
  over: { due?: number; misses?: number; report?: number; token?: number } = {},
): GrantScan {
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

/** The plan decideGrant makes over `s`, as a plain record of the fields its kind uses. */
function decide(s: GrantScan, lease?: HandoffLease): Record<string, unknown> {
  const plan = new GrantPlan();
  decideGrant(s, NOW, options, lease, plan);
  const { kind, result, slot, token, misses, requeued, reach } = plan;
  if (kind === 'refuse' || kind === 'lengthen') return { kind, result };
  if (kind === 'hold') return { kind, slot, misses };
  return { kind, slot, token, misses, requeued, reach };
}

test('a scan that found a refusing slot is refused, and an adopted lease lengthens that slot instead', () => {
  const s = scan();
  s.refusal = { ok: false, reason: 'leased', expiresAt: NOW + 1000 };
  Object.assign(s.blocking, { base: 48, word: (3 << 3) | State.LEASED, expiry: 99, report: Report.NONE });
  assert.deepEqual(decide(s), { kind: 'refuse', result: s.refusal });
  assert.deepEqual(decide(s, adopted), { kind: 'lengthen', result: s.refusal });
  // A BUSY slot of the key leaves no readable slot to lengthen: the adopted lease is refused too.
  s.blocking.base = -1;
  assert.deepEqual(decide(s, adopted), { kind: 'refuse', result: s.refusal });
});

test('an own lease that expired unreported is re-granted on its slot with one more miss and requeued', () => {
  const found = withOwn(State.EXPIRED, { misses: 1 });
  assert.deepEqual(decide(found), {
    kind: 'take',
    slot: found.own,
    token: Math.floor(NOW),
    misses: 2,
    requeued: true,
    reach: 0,
  });
  // Another due minute starts the count over.
  assert.equal(decide(withOwn(State.LEASED, { misses: 1, due: minuteOf(DUE) + 5 })).misses, 1);
});

test('a release counts a miss only when the row did not move; a result the fast-retry lane kept counts none', () => {
  const same = decide(withOwn(State.RELEASED, { misses: 1 }));
  assert.deepEqual([same.kind, same.misses, same.requeued], ['take', 2, false]);
  assert.equal(decide(withOwn(State.RELEASED, { misses: 1, due: 1 })).misses, 0);
  for (const report of [Report.ACCEPTED, Report.UNKNOWN_JOB]) {
    const kept = decide(withOwn(State.LEASED, { misses: 1, report }));
    assert.deepEqual([kept.kind, kept.misses, kept.requeued], ['take', 0, false]);
  }
});

test('fastRetries + 2 misses hold the key on its own slot; an ended hold is probed with its misses', () => {
  const found = withOwn(State.EXPIRED, { misses: 3 });
  assert.deepEqual(decide(found), { kind: 'hold', slot: found.own, misses: 4 });
  const probe = decide(withOwn(State.HELD, { misses: 4 }));
  assert.deepEqual([probe.kind, probe.misses, probe.requeued], ['take', 4, false]);
  assert.equal(decide(withOwn(State.HELD, { misses: 4, due: 1 })).misses, 0, 'the row moved meanwhile');
});

test("a key's grants only grow in their token's instant; an adopted lease keeps the giver's misses", () => {
  assert.equal(decide(withOwn(State.RELEASED, { token: NOW + 5 })).token, NOW + 6);
  const own = decide(withOwn(State.EXPIRED, { misses: 1 }), adopted);
  assert.deepEqual([own.kind, own.misses, own.requeued], ['take', 3, false]);
});

test('without an own slot: the first empty slot, else the best spare, else full; past the window the reach grows', () => {
  const s = scan();
  assert.deepEqual(decide(s), { kind: 'refuse', result: { ok: false, reason: 'full' } });
  Object.assign(s.spare, { base: 300, word: 9, k: 3, rank: 0, end: NOW - 1 });
  assert.equal(decide(s).slot, s.spare);
  Object.assign(s.empty, { base: 200, word: 16, k: 5 });
  assert.deepEqual(decide(s), {
    kind: 'take',
    slot: s.empty,
    token: Math.floor(NOW),
    misses: 0,
    requeued: false,
    reach: 0,
  });
  s.empty.k = 11;
  assert.equal(decide(s).reach, 12, 'raised to cover the slot before the claim');
  assert.equal(decide(s, adopted).misses, 3);
});
