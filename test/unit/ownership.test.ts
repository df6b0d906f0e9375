// Rendezvous ownership: one owner per key everywhere, an even share, and minimal movement on change.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Ownership } from '../../util/cluster/ownership.js';

const keys = Array.from({ length: 30_000 }, (_, i) => `https://shop.example.com/p/${i}?v=${i % 7}`);

test('a single node owns every row', () => {
  const solo = new Ownership([], 'node-a');
  assert.ok(keys.slice(0, 1000).every((k) => solo.owns(k)));
});

test('every node computes the same owner whatever order it lists the members in, and exactly one node owns each key', () => {
  const a = new Ownership(['node-b', 'node-c'], 'node-a');
  const b = new Ownership(['node-c', 'node-a'], 'node-b');
  const c = new Ownership(['node-a', 'node-b', 'node-a'], 'node-c');
  for (const k of keys.slice(0, 5000)) {
    assert.equal(a.ownerOf(k), b.ownerOf(k));
    assert.equal(b.ownerOf(k), c.ownerOf(k));
    assert.equal([a, b, c].filter((o) => o.owns(k)).length, 1);
  }
});

test('three nodes share 30,000 rows evenly (each within 3 % of a third)', () => {
  const o = new Ownership(['n1', 'n2', 'n3'], 'n1');
  const counts = new Map<string, number>();
  for (const k of keys) counts.set(o.ownerOf(k), (counts.get(o.ownerOf(k)) ?? 0) + 1);
  for (const n of ['n1', 'n2', 'n3']) {
    const c = counts.get(n) ?? 0;
    assert.ok(Math.abs(c - 10_000) < 900, `${n} owns ${c}`);
  }
});

test('when a node leaves only its rows move, and a joining node only takes rows', () => {
  fc.assert(
    fc.property(
      fc.uniqueArray(fc.string({ minLength: 1, maxLength: 12 }), { minLength: 2, maxLength: 6 }),
      (names) => {
        const before = new Ownership(names, names[0]!);
        const gone = names[names.length - 1]!;
        const after = new Ownership(
          names.filter((n) => n !== gone),
          names[0]!,
        );
        for (const k of keys.slice(0, 400)) {
          const was = before.ownerOf(k);
          if (was !== gone) assert.equal(after.ownerOf(k), was, `${k} moved from ${was} though ${gone} left`);
        }
      },
    ),
    { numRuns: 60 },
  );
});
