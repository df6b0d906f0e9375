// Leases handed over with their rows (util/cluster/handoff.ts): the beat text, and the ledger a node keeps
// of what it hands over.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  HANDOFF_SCAN_MS,
  HandoffLedger,
  MAX_HANDOFF_LEASES,
  decodeHandoff,
  encodeHandoff,
  type HandoffLease,
} from '../../util/cluster/handoff.js';

const int32 = fc.integer({ min: -0x80000000, max: 0x7fffffff });
const lease = fc.record({ hi: int32, lo: int32, until: int32, dueMinute: int32, misses: int32 });

test('property: the beat text gives back every lease exactly, in order', () => {
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

test('the ledger scans for a while after each change, keeps each lease until its end, and keeps the later end', () => {
  const ledger = new HandoffLedger();
  assert.equal(ledger.scanning(0), false, 'nothing changed yet');
  ledger.changed(1000);
  assert.equal(ledger.scanning(1000 + HANDOFF_SCAN_MS), true);
  assert.equal(ledger.scanning(1001 + HANDOFF_SCAN_MS), false);
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
  ledger.prune(50);
  assert.deepEqual(
    ledger.list().leases.map((l) => l.hi),
    [1],
  );
  ledger.prune(120);
  assert.equal(ledger.size, 0);
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
