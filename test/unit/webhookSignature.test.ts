// Standard Webhooks v1 signing, checked against the published vector and the independent reference verifier.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Webhook } from 'standardwebhooks';
import {
  activeSecrets,
  mintMessageId,
  mintSecret,
  secretKey,
  signatureHeader,
  webhookHeaders,
} from '../../util/notify/webhookSignature.js';

// The example from the Standard Webhooks specification.
const VECTOR = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  msgId: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestampSec: 1614265330,
  body: '{"test": 2432232314}',
  signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
};

const nowSec = () => Math.floor(Date.now() / 1000);

function verify(secret: string, headers: Record<string, string>, body: string): unknown {
  return new Webhook(secret).verify(body, headers);
}

test('the published Standard Webhooks example signs to the published signature', () => {
  const v = VECTOR;
  assert.equal(signatureHeader([v.secret], v.msgId, v.timestampSec, v.body), v.signature);
  // The reference library agrees on the same input (its verify() rejects a 2021 timestamp, so sign()).
  assert.equal(new Webhook(v.secret).sign(v.msgId, new Date(v.timestampSec * 1000), v.body), v.signature);
});

test('a minted secret is whsec_ plus base64 of 32 random bytes, and two are never equal', () => {
  const a = mintSecret();
  const b = mintSecret();
  assert.match(a, /^whsec_[A-Za-z0-9+/]{43}=$/);
  assert.equal(secretKey(a).length, 32);
  assert.notEqual(a, b);
});

test('message ids are unique and safe to put in a header', () => {
  const ids = new Set(Array.from({ length: 100 }, mintMessageId));
  assert.equal(ids.size, 100);
  for (const id of ids) assert.match(id, /^msg_[A-Za-z0-9_-]+$/);
});

test('the reference verifier accepts every delivery we sign, for any body', () => {
  const secret = mintSecret();
  fc.assert(
    fc.property(fc.string({ unit: 'grapheme' }), fc.string({ minLength: 1, maxLength: 40 }), (text, id) => {
      const body = JSON.stringify({ type: 'render.ready', text });
      const msgId = 'msg_' + Buffer.from(id).toString('base64url');
      const headers = webhookHeaders({
        msgId,
        timestampSec: nowSec(),
        body,
        secrets: [secret],
        userAgent: 'qk/1',
      });
      assert.deepEqual(verify(secret, headers, body), JSON.parse(body));
    }),
    { numRuns: 200 },
  );
});

test('a changed body, id or timestamp, or another secret, fails reference verification', () => {
  const secret = mintSecret();
  const body = '{"type":"render.ready","attempt":1}';
  const headers = webhookHeaders({
    msgId: 'msg_1',
    timestampSec: nowSec(),
    body,
    secrets: [secret],
    userAgent: 'x',
  });
  assert.throws(() => verify(secret, headers, body.replace('1', '2')));
  assert.throws(() => verify(secret, { ...headers, 'webhook-id': 'msg_2' }, body));
  const ts = String(Number(headers['webhook-timestamp']) - 1);
  assert.throws(() => verify(secret, { ...headers, 'webhook-timestamp': ts }, body));
  assert.throws(() => verify(mintSecret(), headers, body));
});

test('during a rotation grace both the previous and the new secret verify the same delivery', () => {
  const previous = mintSecret();
  const current = mintSecret();
  const rotatedAt = 1_767_225_600_000;
  const validUntil = rotatedAt + 24 * 3600_000;
  const secrets = activeSecrets({ current, previous, previousValidUntil: validUntil }, rotatedAt + 1000);
  assert.deepEqual(secrets, [current, previous]);

  const body = '{"type":"render.ready"}';
  const headers = webhookHeaders({ msgId: 'msg_r', timestampSec: nowSec(), body, secrets, userAgent: 'x' });
  assert.equal(headers['webhook-signature']!.split(' ').length, 2);
  assert.doesNotThrow(() => verify(previous, headers, body));
  assert.doesNotThrow(() => verify(current, headers, body));
  assert.throws(() => verify(mintSecret(), headers, body));
});

test('after the grace only the new secret signs, so the previous one stops verifying', () => {
  const previous = mintSecret();
  const current = mintSecret();
  const validUntil = 1_767_312_000_000;
  const secrets = activeSecrets({ current, previous, previousValidUntil: validUntil }, validUntil);
  assert.deepEqual(secrets, [current]);
  const body = '{}';
  const headers = webhookHeaders({ msgId: 'msg_g', timestampSec: nowSec(), body, secrets, userAgent: 'x' });
  assert.doesNotThrow(() => verify(current, headers, body));
  assert.throws(() => verify(previous, headers, body));
  assert.deepEqual(activeSecrets({ current }, 0), [current]);
});

test('delivery headers carry content type, user agent, id, timestamp and signature', () => {
  const h = webhookHeaders({
    msgId: VECTOR.msgId,
    timestampSec: VECTOR.timestampSec,
    body: VECTOR.body,
    secrets: [VECTOR.secret],
    userAgent: 'queue-keeper/0.1.0',
  });
  assert.deepEqual(h, {
    'content-type': 'application/json',
    'user-agent': 'queue-keeper/0.1.0',
    'webhook-id': VECTOR.msgId,
    'webhook-timestamp': '1614265330',
    'webhook-signature': VECTOR.signature,
  });
});

test('signing refuses no secrets, a fractional timestamp and a secret that is not base64', () => {
  assert.throws(() => signatureHeader([], 'm', 1, ''), RangeError);
  assert.throws(() => signatureHeader([VECTOR.secret], 'm', 1.5, ''), RangeError);
  assert.throws(() => signatureHeader(['whsec_not base64!'], 'm', 1, ''), TypeError);
});
