// Sealing hook secrets at rest: round trip, and every tamper fails closed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { openSecret, parseSealKey, sealSecret, SealError } from '../../util/notify/secretSeal.js';

const key = randomBytes(32);

test('a sealed secret opens to itself under the same key and context', () => {
  fc.assert(
    fc.property(fc.string({ unit: 'grapheme' }), fc.string(), (secret, context) => {
      assert.equal(openSecret(key, sealSecret(key, secret, context), context), secret);
    }),
  );
});

test('the sealed form is compact, versioned and never contains the secret', () => {
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
  const sealed = sealSecret(key, secret, 'hook-1');
  assert.match(sealed, /^v1\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22}$/);
  assert.ok(!sealed.includes(secret.slice(6)));
});

test('sealing the same secret twice gives different output (fresh nonce)', () => {
  assert.notEqual(sealSecret(key, 's'), sealSecret(key, 's'));
});

test('any flipped bit in nonce, ciphertext or tag fails closed', () => {
  const sealed = sealSecret(key, 'whsec_abcdefghijklmnop', 'hook-1');
  const [v, ...parts] = sealed.split('.');
  for (let part = 0; part < 3; part++) {
    const bytes = Buffer.from(parts[part]!, 'base64url');
    for (let bit = 0; bit < bytes.length * 8; bit += 5) {
      const copy = Buffer.from(bytes);
      copy[bit >> 3] = copy[bit >> 3]! ^ (1 << (bit & 7));
      const tampered = [v, ...parts.map((p, i) => (i === part ? copy.toString('base64url') : p))].join('.');
      assert.throws(() => openSecret(key, tampered, 'hook-1'), SealError);
    }
  }
});

test('a wrong key, a wrong context or a malformed value fails closed', () => {
  const sealed = sealSecret(key, 'whsec_x', 'hook-1');
  assert.throws(() => openSecret(randomBytes(32), sealed, 'hook-1'), SealError);
  assert.throws(() => openSecret(key, sealed, 'hook-2'), SealError);
  const [v, n, c, t] = sealed.split('.') as [string, string, string, string];
  for (const bad of [
    '',
    'v2.' + [n, c, t].join('.'),
    [v, n, c].join('.'),
    [v, n, c, t.slice(0, 10)].join('.'), // a truncated tag must not be accepted as a shorter tag
    [v, n.slice(0, 8), c, t].join('.'),
    [v, n, c + '!', t].join('.'),
  ]) {
    assert.throws(() => openSecret(key, bad, 'hook-1'), SealError, bad);
  }
});

test('the key comes from base64 of exactly 32 bytes; absent means no key, anything else is an error', () => {
  const b64 = key.toString('base64');
  assert.deepEqual(parseSealKey(b64), key);
  assert.deepEqual(parseSealKey(` ${b64}\n`), key);
  assert.equal(parseSealKey(undefined), null);
  assert.equal(parseSealKey('  '), null);
  assert.throws(() => parseSealKey(randomBytes(16).toString('base64')), /32 bytes, got 16/);
  assert.throws(() => parseSealKey(randomBytes(33).toString('base64')), /32 bytes, got 33/);
  assert.throws(() => parseSealKey('not base64 at all!'), /base64/);
  assert.throws(() => parseSealKey(key.toString('hex')), SealError);
});

test('a key of the wrong length is refused when sealing or opening', () => {
  assert.throws(() => sealSecret(randomBytes(16), 'x'), SealError);
  assert.throws(() => openSecret(randomBytes(31), 'v1.a.b.c'), SealError);
});
