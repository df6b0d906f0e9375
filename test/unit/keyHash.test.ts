import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { keyHash, type KeyHash } from '../../util/keyHash.js';

/** FNV-1a 64 the slow, obvious way, to hold the limb arithmetic to. */
function reference(bytes: Uint8Array): bigint {
  let hash = 0xcbf29ce484222325n;
  for (const byte of bytes) hash = ((hash ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return hash;
}

const asBigInt = (hash: KeyHash): bigint => (BigInt(hash.hi >>> 0) << 32n) | BigInt(hash.lo >>> 0);
const utf8 = new TextEncoder();
// Any UTF-16 code unit, so lone surrogates and split pairs turn up as well as whole code points.
const anyUnits = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((u) => String.fromCharCode(u)) });
const anyText = fc.oneof(fc.string({ unit: 'binary' }), anyUnits, fc.webUrl());

test('keyHash matches the published FNV-1a 64 values', () => {
  const hex = (text: string) => asBigInt(keyHash(text)).toString(16).padStart(16, '0');
  assert.equal(hex(''), 'cbf29ce484222325');
  assert.equal(hex('a'), 'af63dc4c8601ec8c');
  assert.equal(hex('foobar'), '85944171f73967e8');
});

test('property: keyHash of a string equals FNV-1a 64 of its UTF-8 bytes, lone surrogates included', () => {
  fc.assert(
    fc.property(anyText, (text) => {
      assert.equal(asBigInt(keyHash(text)), reference(utf8.encode(text)));
    }),
    { numRuns: 2000 },
  );
});

test('the halves are signed 32-bit values, as an Int32Array stores them, and never both zero', () => {
  fc.assert(
    fc.property(anyText, (text) => {
      const { hi, lo } = keyHash(text);
      assert.equal(hi, hi | 0);
      assert.equal(lo, lo | 0);
      assert.ok(hi !== 0 || lo !== 0);
    }),
  );
});

test('a hundred thousand similar URLs hash to distinct values', () => {
  const seen = new Set<bigint>();
  for (let i = 0; i < 100_000; i++)
    seen.add(asBigInt(keyHash(`https://shop.example.com/product/${i}?ref=sitemap`)));
  assert.equal(seen.size, 100_000);
});
