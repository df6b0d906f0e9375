import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { KeyArena } from '../../util/keeper/keyArena.js';

/** Well-formed keys of any script: ASCII, two-, three- and four-byte UTF-8. */
const anyKey = fc.oneof(
  fc.string({ unit: 'grapheme-ascii', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.string({ unit: fc.constantFrom('a', 'é', 'Ã', '©', '€', '😀', '|', '/'), maxLength: 12 }),
);

function store(arena: KeyArena, key: string): { at: number; length: number } {
  const length = KeyArena.byteLength(key);
  return { at: arena.store(key, length), length };
}

describe('KeyArena', () => {
  it('keeps any well-formed key as its UTF-8 bytes: reads it back, copies its bytes, and equals exactly the keys equal to it', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(anyKey, anyKey), { minLength: 1, maxLength: 60 }), (pairs) => {
        const arena = new KeyArena();
        for (const [key, probe] of pairs) {
          const { at, length } = store(arena, key);
          const utf8 = Buffer.from(key, 'utf8');
          assert.equal(length, utf8.length);
          assert.equal(arena.read(at, length), key);
          const into = new Uint8Array(length + 2);
          arena.copy(at, length, into, 1);
          assert.deepEqual(Buffer.from(into.subarray(1, 1 + length)), utf8);
          assert.equal(arena.equals(at, length, key), true, key);
          assert.equal(arena.equals(at, length, probe), probe === key, `${key} vs ${probe}`);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('tells a key apart from a string whose UTF-16 units are its UTF-8 bytes, and from a lone surrogate', () => {
    const arena = new KeyArena();
    const e = store(arena, 'https://x.example/é'); // é is C3 A9 in UTF-8
    assert.equal(arena.equals(e.at, e.length, 'https://x.example/\u00c3\u00a9'), false);
    assert.equal(arena.equals(e.at, e.length, 'https://x.example/é'), true);
    const replacement = store(arena, 'a\ufffd');
    assert.equal(arena.equals(replacement.at, replacement.length, 'a\ud800'), false);
    assert.equal(arena.equals(replacement.at, replacement.length, 'a\ufffd'), true);
  });

  it('gives freed space to the next key of the same rounded length, and grows only when none is free', () => {
    const arena = new KeyArena();
    const a = store(arena, 'x'.repeat(100));
    const b = store(arena, 'y'.repeat(37));
    arena.release(a.at, a.length);
    arena.release(b.at, b.length);
    assert.equal(arena.freeBytes, 100 + 40);
    // 98 bytes round to the same 25 granules as 100; 40 bytes to 37's 10.
    const c = store(arena, 'z'.repeat(98));
    const d = store(arena, 'w'.repeat(40));
    assert.deepEqual([c.at, d.at], [a.at, b.at]);
    assert.equal(arena.freeBytes, 0);
    assert.equal(arena.read(c.at, c.length), 'z'.repeat(98));
    assert.equal(arena.read(d.at, d.length), 'w'.repeat(40));
    const e = store(arena, 'v'.repeat(12));
    assert.ok(e.at > d.at, 'no free block of its size: a new one');
  });

  it('starts a new page for a key that does not fit the rest of one, and reuses that rest', () => {
    const arena = new KeyArena();
    const big = 60_000;
    const held: Array<{ at: number; length: number; key: string }> = [];
    for (let i = 0; i < 40; i++) {
      const key = String.fromCharCode(97 + (i % 26)).repeat(big);
      held.push({ ...store(arena, key), key });
    }
    assert.equal(arena.capacityBytes, 3 * (1 << 20)); // 17 keys of 60,000 bytes to a 1 MiB page
    for (const h of held) assert.equal(arena.read(h.at, h.length), h.key);
    const restBytes = arena.freeBytes;
    assert.ok(restBytes > 0, "each full page's rest is free space");
  });

  it('refuses a key over the longest it stores', () => {
    assert.throws(() => new KeyArena().store('x'.repeat(70_000), 70_000), RangeError);
  });
});
