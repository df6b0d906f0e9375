// The built-in Standard Webhooks receiver: a valid delivery wakes the claim loop before its backoff
// ends; a bad signature, a stale timestamp and a replayed id wake nothing; during a rotation either
// signature verifies.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { WebhookVerifier } from '../src/webhookReceiver.js';
import { FakeClock, until } from './fakeClock.js';
import { rig } from './setup.js';

const secret = () => 'whsec_' + randomBytes(32).toString('base64');
const OLD = secret();
const NEW = secret();

function delivery(secrets: string[], opts: { id?: string; tsSec?: number; body?: string } = {}) {
  const id = opts.id ?? 'msg_' + randomBytes(8).toString('hex');
  const tsSec = opts.tsSec ?? Math.floor(Date.now() / 1000);
  const body =
    opts.body ??
    JSON.stringify({ type: 'render.ready', reason: 'stalled', queue: 'product', fleet: 'f', attempt: 1 });
  // Signed the way queue-keeper signs: one `v1,` signature per active secret, space separated.
  const signature = secrets.map((s) => new Webhook(s).sign(id, new Date(tsSec * 1000), body)).join(' ');
  return {
    body,
    headers: { 'webhook-id': id, 'webhook-timestamp': String(tsSec), 'webhook-signature': signature },
  };
}

async function idleFleet(secrets: string[]) {
  const r = await rig(async () => ({ outcome: 'rendered' as const }), {
    idleBackoff: { baseMs: 30_000, capMs: 30_000 },
    webhook: { port: 0, host: '127.0.0.1', path: '/wake', secrets },
  });
  // The verifier checks timestamps on the fake clock; start it at the real time the deliveries carry.
  r.clock.t = Date.now();
  await r.fleet.start();
  await r.clock.timer((x) => x.delay === 30_000);
  const addr = r.fleet.webhookAddress!;
  const post = (d: ReturnType<typeof delivery>, path = '/wake') =>
    fetch(`http://127.0.0.1:${addr.port}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...d.headers },
      body: d.body,
    });
  return { r, post };
}

test('a validly signed delivery wakes the loop, which claims before its idle backoff ends', async (t) => {
  const { r, post } = await idleFleet([NEW]);
  t.after(r.close);
  assert.equal(r.server.seen.length, 1);
  const res = await post(delivery([NEW]));
  assert.equal(res.status, 200);
  await until('the woken claim', () => r.server.seen.length === 2);
  assert.equal(r.server.seen[1]!.at, r.server.seen[0]!.at, 'no time passed: the 30 s backoff was cut short');
  assert.equal(r.fleet.counters.webhookWakes, 1);
});

test('a bad signature, a stale timestamp, a wrong path and missing headers are refused and wake nothing', async (t) => {
  const { r, post } = await idleFleet([NEW]);
  t.after(r.close);
  const forged = delivery([secret()]);
  assert.equal((await post(forged)).status, 401);
  const tampered = delivery([NEW]);
  assert.equal((await post({ ...tampered, body: tampered.body.replace('product', 'other') })).status, 401);
  const stale = delivery([NEW], { tsSec: Math.floor(Date.now() / 1000) - 301 });
  assert.equal((await post(stale)).status, 400);
  const future = delivery([NEW], { tsSec: Math.floor(Date.now() / 1000) + 301 });
  assert.equal((await post(future)).status, 400);
  assert.equal((await post(delivery([NEW]), '/other')).status, 404);
  const bare = delivery([NEW]);
  assert.equal(
    (await post({ body: bare.body, headers: { ...bare.headers, 'webhook-signature': '' } })).status,
    400,
  );
  assert.equal(r.fleet.counters.webhookRejected, 5);
  assert.equal(r.fleet.counters.webhookWakes, 0);
  assert.equal(r.server.seen.length, 1, 'no claim was woken');
});

test('a replayed webhook-id is acknowledged but wakes only once', async (t) => {
  const { r, post } = await idleFleet([NEW]);
  t.after(r.close);
  const d = delivery([NEW]);
  assert.equal((await post(d)).status, 200);
  await until('the woken claim', () => r.server.seen.length === 2);
  await r.clock.timer((x) => x.delay === 30_000);
  const again = await post(d);
  // 2xx, so queue-keeper's retry after a lost answer does not count against the hook's health.
  assert.equal(again.status, 200);
  assert.deepEqual(await again.json(), { accepted: false, reason: 'replay' });
  assert.equal(r.fleet.counters.webhookWakes, 1);
  assert.equal(r.fleet.counters.webhookRejected, 1);
  assert.equal(r.server.seen.length, 2);
});

test('during a rotation a delivery signed with both secrets verifies for a receiver holding either one', async (t) => {
  const rotated = delivery([NEW, OLD]);
  for (const held of [[OLD], [NEW], [NEW, OLD]]) {
    const { r, post } = await idleFleet(held);
    t.after(r.close);
    assert.equal((await post(rotated)).status, 200, `holding ${held.length} secret(s)`);
    await until('the woken claim', () => r.server.seen.length === 2);
  }
  // A receiver holding both (old listed first) still verifies once the grace is over and only the new
  // secret signs.
  const both = await idleFleet([OLD, NEW]);
  t.after(both.r.close);
  assert.equal((await both.post(delivery([NEW]))).status, 200);
  // And a receiver that already moved to the new secret refuses what only the old one signed.
  const { r, post } = await idleFleet([NEW]);
  t.after(r.close);
  assert.equal((await post(delivery([OLD]))).status, 401);
});

test('the verifier forgets an id once its timestamp can no longer pass, and refuses it until then', () => {
  const clock = new FakeClock(Date.now());
  const v = new WebhookVerifier(NEW, 300, clock);
  const d = delivery([NEW], { tsSec: Math.floor(clock.now() / 1000) });
  assert.equal(v.verify(d.headers, d.body).ok, true);
  clock.advance(299_000);
  const replay = v.verify(d.headers, d.body);
  assert.equal(replay.ok === false && replay.reason, 'replay');
  clock.advance(2_000);
  const late = v.verify(d.headers, d.body);
  assert.equal(late.ok === false && late.reason, 'stale', 'beyond the window the timestamp refuses it');
});

test('the verifier refuses a tolerance the library would overrule, and no secrets', () => {
  const clock = new FakeClock(Date.now());
  assert.throws(() => new WebhookVerifier(NEW, 301, clock), RangeError);
  assert.throws(() => new WebhookVerifier([], 60, clock), TypeError);
});
