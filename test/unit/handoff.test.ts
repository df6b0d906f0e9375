// Leases handed over with their rows (util/cluster/handoff.ts): the beat text, and the ledger a node keeps
// of what it hands over.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  HANDOFF_SCAN_MS,
  HandoffLedger,
  SCANS_AFTER_CHANGE_MS,
  MAX_HANDOFF_LEASES,
  decodeHandoff,
  encodeHandoff,
  type HandoffLease,
} from '../../util/cluster/handoff.js';

const int32 = fc.integer({ min: -0x80000000, max: 0x7fffffff });
const lease = fc.record(
  {
    hi: int32,
    lo: int32,
    until: int32,
    dueMinute: int32,
    misses: fc.integer({ min: 0, max: 0x3fffffff }),
    released: fc.constant(true),
    held: fc.constant(true),
  },
  { requiredKeys: ['hi', 'lo', 'until', 'dueMinute', 'misses'] },
);

test('property: the beat text gives back every lease exactly, in order, released, held or neither', () => {
  fc.assert(
    fc.property(fc.array(lease, { maxLength: 40 }), (leases) => {
      assert.deepEqual(
        decodeHandoff(encodeHandoff(leases)),
        leases.map((l) => ({ ...l })),
      );
    }),
  );
});

test('beat text that is not a whole list reads as no leases', () => {
  for (const bad of [
    undefined,
    null,
    42,
    '',
    'not base64 at all!',
    Buffer.alloc(7).toString('base64'),
    ['x'],
  ])
    assert.deepEqual(decodeHandoff(bad), [], JSON.stringify(bad));
});

const at = (hi: number, until: number): HandoffLease => ({ hi, lo: hi * 3, until, dueMinute: 1, misses: 0 });

test('the ledger scans at the change, after the settle and once more, none past the window', () => {
  const ledger = new HandoffLedger();
  assert.equal(ledger.scanDue(0), false, 'nothing changed yet');
  const t0 = 1000;
  ledger.changed(t0);
  const [first, settle, late] = SCANS_AFTER_CHANGE_MS as [number, number, number];
  assert.equal(ledger.scanDue(t0 + first), true);
  ledger.note([], t0 + first);
  assert.equal(ledger.scanDue(t0 + 1000), false, 'the first scan ran');
  assert.equal(ledger.scanDue(t0 + settle), true);
  // A scan that started before a change counts for nothing after it.
  ledger.changed(t0 + settle + 10);
  ledger.note([], t0 + settle);
  assert.equal(ledger.scanDue(t0 + settle + 10), true, 'the new change scans again');
  ledger.note([], t0 + settle + 10);
  ledger.note([], t0 + settle + 10 + late);
  assert.equal(ledger.scanDue(t0 + settle + 10 + late + 1000), false, 'all three ran');
  ledger.changed(0);
  assert.equal(ledger.scanDue(1 + HANDOFF_SCAN_MS), false, 'past the window');
  assert.equal(ledger.inWindow(HANDOFF_SCAN_MS), true);
});

test('the ledger keeps each lease until its end, keeps the later end, and marks a lease released once seen so', () => {
  const ledger = new HandoffLedger();
  ledger.changed(0);
  assert.equal(ledger.note([at(1, 100), at(2, 50)]), 2);
  assert.equal(ledger.note([at(1, 120)]), 0, 'seen again: not new');
  assert.deepEqual(
    ledger.list().leases.map((l) => [l.hi, l.until]),
    [
      [1, 120],
      [2, 50],
    ],
  );
  // Gone from a later scan (its result came) yet still listed: sticky until its end.
  assert.equal(ledger.note([]), 0);
  const before = ledger.list();
  assert.equal(ledger.list(), before, 'the same list while nothing changed');
  ledger.note([{ ...at(1, 60), released: true }]);
  assert.notEqual(ledger.list(), before);
  assert.deepEqual(
    ledger.list().leases[1],
    { ...at(1, 120), released: true },
    'released, the later end kept',
  );
  assert.deepEqual(
    [...ledger.unreleased()].map((l) => l.hi),
    [2],
  );
  ledger.release(2, 6);
  assert.deepEqual([...ledger.unreleased()], []);
  assert.equal(
    ledger.list().leases.find((l) => l.hi === 2)?.misses,
    0,
    'a release clears the misses, as the scan lists one',
  );
  ledger.prune(50);
  assert.deepEqual(
    ledger.list().leases.map((l) => l.hi),
    [1],
  );
  ledger.prune(120);
  assert.equal(ledger.size, 0);
  assert.deepEqual(ledger.list().leases, []);
});

test('a ledger larger than one beat carries lists the most it may and counts the rest, said once a change', () => {
  const ledger = new HandoffLedger();
  ledger.changed(0);
  ledger.note(Array.from({ length: MAX_HANDOFF_LEASES + 3 }, (_, i) => at(i + 1, 1000)));
  const { leases, left } = ledger.list();
  assert.equal(leases.length, MAX_HANDOFF_LEASES);
  assert.equal(left, 3);
  assert.equal(ledger.sayOverflow(), true);
  assert.equal(ledger.sayOverflow(), false);
  ledger.changed(10);
  assert.equal(ledger.sayOverflow(), true);
});

test('a ledger that does not fit one beat lists its live leases before its released ones', () => {
  const ledger = new HandoffLedger();
  ledger.note(Array.from({ length: 10 }, (_, i) => ({ ...at(i + 1, 1000), released: true })));
  ledger.note(Array.from({ length: MAX_HANDOFF_LEASES }, (_, i) => at(i + 100, 1000)));
  const { leases, left } = ledger.list();
  assert.equal(leases.length, MAX_HANDOFF_LEASES);
  assert.equal(left, 10);
  assert.equal(
    leases.some((l) => l.released),
    false,
    'every live lease went out',
  );
});

test('a key seen again takes what the later scan says of it (a new live lease after a release, a hold), with the later end', () => {
  const ledger = new HandoffLedger();
  ledger.note([{ ...at(1, 100), misses: 2 }]);
  ledger.release(1, 3);
  assert.deepEqual(ledger.list().leases[0], { ...at(1, 100), misses: 0, released: true });
  // The row came back and went away again: a new live lease on it.
  ledger.note([{ ...at(1, 80), misses: 1 }]);
  assert.deepEqual(ledger.list().leases[0], { ...at(1, 100), misses: 1 });
  ledger.note([{ ...at(1, 300), misses: 3, held: true }]);
  assert.deepEqual(ledger.list().leases[0], { ...at(1, 300), misses: 3, held: true });
  const before = ledger.list();
  ledger.note([{ ...at(1, 300), misses: 3, held: true }]);
  assert.equal(ledger.list(), before, 'the same entry changes nothing');
});
