// The wake body's byte budget (≤ 4 KiB): every URL the feeding endpoints accept, with the
// longest queue and fleet names, the largest numbers and the longest reason, fits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { MAX_URL_BYTES, urlProblem } from '../../util/schedule/targetChecks.js';
import {
  MAX_FLEET_NAME_BYTES,
  MAX_QUEUE_NAME_CHARS,
  MAX_WAKE_BODY_BYTES,
  QUEUE_NAME,
  fleetNameProblem,
  wakeBody,
} from '../../util/notify/wakeBody.js';

const worst = (url: string, queue: string, fleet: string, device = '') =>
  Buffer.byteLength(
    wakeBody({
      reason: 'requeued',
      queue,
      fleet,
      job: { id: device ? `${url}|${device}` : url, url, dueAt: 9_999_999_999_999, fromSitemap: false },
      attempt: 10,
      createdAt: 9_999_999_999_999,
    }),
  );

test('the worst-case wake (1,900-byte URL twice, longest names, largest numbers) fits in 4 KiB', () => {
  const url = 'https://a.example/' + 'x'.repeat(MAX_URL_BYTES - 18);
  assert.equal(urlProblem(url), null);
  const queue = 'q'.repeat(MAX_QUEUE_NAME_CHARS);
  const fleet = 'f'.repeat(MAX_FLEET_NAME_BYTES);
  assert.ok(QUEUE_NAME.test(queue));
  assert.equal(fleetNameProblem(fleet), null);
  const bytes = worst(url, queue, fleet);
  assert.ok(bytes <= MAX_WAKE_BODY_BYTES, `${bytes} bytes`);
  // The bound is tight: one more byte of name would not fit, so the limits are not arbitrary (the body
  // builder then cuts the fleet name, as the next test shows).
  assert.equal(worst(url, queue, fleet + 'ff'), MAX_WAKE_BODY_BYTES);
});

test('a key with the longest device name still makes a wake of at most 4 KiB: the fleet name is cut to fit', () => {
  const url = 'https://a.example/' + 'x'.repeat(MAX_URL_BYTES - 18);
  const device = 'd'.repeat(32);
  const fleet = 'f'.repeat(MAX_FLEET_NAME_BYTES - 4) + 'éé';
  assert.equal(fleetNameProblem(fleet), null);
  assert.ok(worst(url, 'q'.repeat(MAX_QUEUE_NAME_CHARS), fleet, device) <= MAX_WAKE_BODY_BYTES);
  const body = JSON.parse(
    wakeBody({
      reason: 'requeued',
      queue: 'q'.repeat(MAX_QUEUE_NAME_CHARS),
      fleet,
      job: { id: `${url}|${device}`, url, dueAt: 1, fromSitemap: false },
      attempt: 1,
      createdAt: 1,
    }),
  );
  assert.ok(
    fleet.startsWith(body.fleet) && body.fleet.length < fleet.length,
    'the fleet name is cut, whole characters',
  );
  assert.equal(body.job.id, `${url}|${device}`, 'the job is whole');
  // A short wake keeps its fleet name.
  assert.equal(
    JSON.parse(
      wakeBody({
        reason: 'created',
        queue: 'q',
        fleet,
        job: { id: 'https://a/|d', url: 'https://a/', dueAt: 1, fromSitemap: false },
        attempt: 1,
        createdAt: 1,
      }),
    ).fleet,
    fleet,
  );
});

test('the characters JSON escapes are refused in URLs and fleet names, so escaping can never grow a wake', () => {
  for (const bad of ['"', '\\', '\u0001', '\u001f', '\u007f', '\u0085', '\u009f'])
    assert.notEqual(urlProblem(`https://a.example/p${bad}q`), null, JSON.stringify(bad));
  for (const bad of ['"', '\\', '\n', '\u0000', '\u0090', '\ud800'])
    assert.notEqual(fleetNameProblem(`fleet${bad}a`), null, JSON.stringify(bad));
  assert.notEqual(fleetNameProblem('x'.repeat(MAX_FLEET_NAME_BYTES + 1)), null);
  assert.notEqual(fleetNameProblem('é'.repeat(MAX_FLEET_NAME_BYTES / 2 + 1)), null, 'bytes, not characters');
  assert.equal(fleetNameProblem('Fleet A — Frankfurt ✓'), null);
});

test('property: any accepted URL with any accepted names makes a wake of at most 4 KiB', () => {
  const urlChars = fc.oneof(
    fc.constantFrom('a', '/', '%', '?', '=', '&', '#', '~', "'", '<', '>', '{', '|'),
    fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }),
    fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
  );
  const url = fc
    .array(urlChars, { minLength: 1, maxLength: 1200 })
    .map((cs) => {
      let u = 'https://a.example/';
      for (const c of cs) {
        if (Buffer.byteLength(u + c) > MAX_URL_BYTES) break;
        u += c;
      }
      return u;
    })
    .filter((u) => urlProblem(u) === null);
  const fleet = fc
    .string({ unit: 'grapheme', minLength: 1, maxLength: MAX_FLEET_NAME_BYTES })
    .filter((n) => fleetNameProblem(n) === null);
  const queue = fc.stringMatching(QUEUE_NAME);
  fc.assert(
    fc.property(url, queue, fleet, (u, q, f) => worst(u, q, f) <= MAX_WAKE_BODY_BYTES),
    { seed: 13, numRuns: 300 },
  );
});
