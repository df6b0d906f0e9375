import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { KeyArena, NO_HOST } from '../../util/keeper/keyArena.js';

/** Well-formed strings of any script: ASCII, two-, three- and four-byte UTF-8. */
const anyText = fc.oneof(
  fc.string({ unit: 'grapheme-ascii', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.string({ unit: fc.constantFrom('a', 'é', 'Ã', '©', '€', '😀', '|', '/', ':'), maxLength: 12 }),
);
/** Keys with and without a scheme+host to share, a few hosts alike but for one character. */
const anyKey = fc.oneof(
  anyText,
  fc
    .tuple(
      fc.constantFrom(
        'https://a.example',
        'https://b.example',
        'http://a.example',
        'https://a.example:8',
        'x://',
      ),
      anyText,
    )
    .map(([host, rest]) => `${host}/${rest}`),
);

interface Stored {
  at: number;
  length: number;
  host: number;
}

function store(arena: KeyArena, key: string): Stored {
  const length = KeyArena.byteLength(key);
  const host = arena.hostOf(key);
  return { at: arena.store(key, length, host), length, host };
}
const read = (arena: KeyArena, s: Stored) => arena.read(s.at, s.length, s.host);
const equals = (arena: KeyArena, s: Stored, key: string) => arena.equals(s.at, s.length, s.host, key);
const release = (arena: KeyArena, s: Stored) => arena.release(s.at, s.length, s.host);

describe('KeyArena', () => {
  it('keeps any well-formed key as its UTF-8 bytes: reads it back, copies its bytes, and equals exactly the keys equal to it', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(anyKey, anyKey), { minLength: 1, maxLength: 60 }), (pairs) => {
        const arena = new KeyArena();
        for (const [key, probe] of pairs) {
          const stored = store(arena, key);
          const { at, length, host } = stored;
          const utf8 = Buffer.from(key, 'utf8');
          assert.equal(length, utf8.length);
          assert.equal(read(arena, stored), key);
          const into = new Uint8Array(length + 2);
          arena.copy(at, length, host, into, 1);
          assert.deepEqual(Buffer.from(into.subarray(1, 1 + length)), utf8);
          assert.equal(equals(arena, stored, key), true, key);
          assert.equal(equals(arena, stored, probe), probe === key, `${key} vs ${probe}`);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('tells a key apart from a string whose UTF-16 units are its UTF-8 bytes, and from a lone surrogate', () => {
    const arena = new KeyArena();
    for (const prefix of ['https://x.example/', 'no host: ']) {
      const e = store(arena, `${prefix}é`); // é is C3 A9 in UTF-8
      assert.equal(equals(arena, e, `${prefix}\u00c3\u00a9`), false);
      assert.equal(equals(arena, e, `${prefix}é`), true);
      const replacement = store(arena, `${prefix}a\ufffd`);
      assert.equal(equals(arena, replacement, `${prefix}a\ud800`), false);
      assert.equal(equals(arena, replacement, `${prefix}a\ufffd`), true);
    }
  });

  it("stores a URL's scheme+host once for every key that shares it, and tells keys of other hosts apart", () => {
    const arena = new KeyArena();
    const keys: string[] = [];
    for (let i = 0; i < 300; i++) keys.push(`https://shop-${i % 3}.example.com/p/${i}|desktop`);
    const stored = keys.map((k) => store(arena, k));
    assert.equal(arena.hostCount, 3);
    assert.deepEqual(new Set(stored.map((s) => s.host)).size, 3);
    stored.forEach((s, i) => {
      assert.equal(read(arena, s), keys[i]);
      assert.equal(equals(arena, s, keys[i]!), true);
      // The same path under a neighbouring host, and the host alone, are other keys.
      assert.equal(equals(arena, s, keys[i]!.replace(`shop-${i % 3}`, `shop-${(i + 1) % 3}`)), false);
      assert.equal(equals(arena, s, `https://shop-${i % 3}.example.com`), false);
    });
    // Right after a host, keys that merely start with its name are of other hosts (or of none).
    const first = store(arena, 'https://a.example/p');
    for (const key of ['https://a.example.evil/p', 'https://a.example:8/p', 'https://a.example']) {
      const other = store(arena, key);
      assert.notEqual(other.host, first.host, key);
      assert.equal(read(arena, other), key);
      store(arena, 'https://a.example/q'); // the host to try first again
    }
    // Only the rest takes arena space: 300 keys of ≤ 14 bytes past the host fit in 300 × 16 bytes.
    const end = store(arena, 'https://shop-0.example.com/end');
    assert.ok(end.at * 4 <= 300 * 16 + 100, `rest bytes only (${end.at * 4})`);
  });

  it('stores whole the keys with no scheme+host to share: no scheme, a non-ASCII or over-long host', () => {
    const arena = new KeyArena();
    for (const key of [
      'plain-key|desktop',
      'https://bücher.example/p',
      `https://${'h'.repeat(300)}.example/p`,
      'https://x.example',
    ]) {
      const s = store(arena, key);
      assert.equal(s.host, NO_HOST, key);
      assert.equal(read(arena, s), key);
      assert.equal(equals(arena, s, key), true);
    }
    assert.equal(arena.hostCount, 0);
  });

  it('gives freed space to the next key of the same rounded length, and grows only when none is free', () => {
    const arena = new KeyArena();
    const a = store(arena, 'x'.repeat(100));
    const b = store(arena, 'y'.repeat(37));
    release(arena, a);
    release(arena, b);
    assert.equal(arena.freeBytes, 100 + 40);
    // 98 bytes round to the same 25 granules as 100; 40 bytes to 37's 10.
    const c = store(arena, 'z'.repeat(98));
    const d = store(arena, 'w'.repeat(40));
    assert.deepEqual([c.at, d.at], [a.at, b.at]);
    assert.equal(arena.freeBytes, 0);
    assert.equal(read(arena, c), 'z'.repeat(98));
    assert.equal(read(arena, d), 'w'.repeat(40));
    const e = store(arena, 'v'.repeat(12));
    assert.ok(e.at > d.at, 'no free block of its size: a new one');
  });

  it('starts a new page for a key that does not fit the rest of one, and reuses that rest', () => {
    const arena = new KeyArena();
    const big = 60_000;
    const held: Array<Stored & { key: string }> = [];
    for (let i = 0; i < 40; i++) {
      const key = String.fromCharCode(97 + (i % 26)).repeat(big);
      held.push({ ...store(arena, key), key });
    }
    assert.equal(arena.capacityBytes, 3 * (1 << 20)); // 17 keys of 60,000 bytes to a 1 MiB page
    for (const h of held) assert.equal(read(arena, h), h.key);
    const restBytes = arena.freeBytes;
    assert.ok(restBytes > 0, "each full page's rest is free space");
  });

  it('stores whole the keys of hosts past the 65,535 it numbers', () => {
    const arena = new KeyArena();
    const key = (i: number) => `https://h${i}.example/p`;
    const stored = Array.from({ length: 65_540 }, (_, i) => store(arena, key(i)));
    assert.equal(arena.hostCount, 65_535);
    assert.equal(stored[65_534]!.host, 65_535);
    assert.equal(stored[65_535]!.host, NO_HOST);
    for (const i of [0, 65_534, 65_535, 65_539]) {
      assert.equal(read(arena, stored[i]!), key(i));
      assert.equal(equals(arena, stored[i]!, key(i)), true);
    }
    assert.equal(
      store(arena, 'https://h7.example/q').host,
      stored[7]!.host,
      'a numbered host is still found',
    );
  });

  it('refuses a key over the longest it stores', () => {
    assert.throws(() => new KeyArena().store('x'.repeat(70_000), 70_000, NO_HOST), RangeError);
  });
});
