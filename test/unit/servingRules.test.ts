// The pure rules of serving (util/serving/, docs/serving.md): which URL and host a request names, which
// device it is served, fresh / stale / expired, conditional requests, the stored copy a coding picks, the
// miss policy, the render-now token, and the per-node bounds over shared words.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyValues, checkPartial, defaultConfig } from '../../util/config/schema.js';
import { entityTags, notModified } from '../../util/serving/conditional.js';
import { chooseCoding } from '../../util/serving/encoding.js';
import {
  ageSeconds,
  freshness,
  needsUrgentMark,
  renderEndedWithoutPage,
  servable,
} from '../../util/serving/freshness.js';
import { chooseDevice, deviceTypes, servingKey } from '../../util/serving/keys.js';
import { missAnswer, renderNowVerdict, tokenMatches } from '../../util/serving/miss.js';
import { MinuteBudget, NodeSlots } from '../../util/serving/nodeCounters.js';
import { servedTarget } from '../../util/serving/target.js';
import { computedEtag, strongEtag, worthKeeping } from '../../util/pages/validators.js';

const MIN = 60_000;
const HOUR = 3_600_000;
const NOW = Date.UTC(2026, 11, 7, 12, 30, 17, 123);

test('the URL is everything after /p/ as sent, checked as a filed target is, and only served hosts pass', () => {
  const hosts = ['example.com', '127.0.0.1:8080'];
  assert.deepEqual(servedTarget('/p/https://example.com/a%2Fb?x=1&y=%20', hosts), {
    ok: true,
    url: 'https://example.com/a%2Fb?x=1&y=%20',
  });
  assert.deepEqual(servedTarget('/p/http://127.0.0.1:8080/', hosts), {
    ok: true,
    url: 'http://127.0.0.1:8080/',
  });
  assert.deepEqual(servedTarget('/p/https://other.com/a', hosts), { ok: false, why: 'host' });
  assert.deepEqual(servedTarget('/p/https://example.com:444/a', hosts), { ok: false, why: 'host' });
  assert.deepEqual(servedTarget('/p/https://sub.example.com/a', hosts), { ok: false, why: 'host' });
  // An empty list turns the route off before the URL is even looked at.
  assert.deepEqual(servedTarget('/p/https://example.com/a', []), { ok: false, why: 'off' });
  assert.deepEqual(servedTarget('/p/not a url', []), { ok: false, why: 'off' });
  for (const bad of ['/p/', '/p/ftp://example.com/a', '/p/example.com/a', '/p/https://example.com/"'])
    assert.equal(servedTarget(bad, hosts).ok, false, bad);
  const r = servedTarget('/p/ftp://example.com/a', hosts);
  assert.ok(!r.ok && r.why === 'invalid');
});

test('serving.hosts takes hosts as URL.host writes them, lower-cased', () => {
  for (const good of [['example.com'], ['127.0.0.1:8080'], ['[::1]:9000'], ['xn--bcher-kva.example']])
    assert.deepEqual(checkPartial({ serving: { hosts: good } }).values.get('serving.hosts'), good);
  assert.deepEqual(checkPartial({ serving: { hosts: ['Example.COM'] } }).values.get('serving.hosts'), [
    'example.com',
  ]);
  for (const bad of [['example.com/'], ['https://example.com'], [''], [5], 'x'])
    assert.throws(() => checkPartial({ serving: { hosts: bad } }), /serving\.hosts/, JSON.stringify(bad));
});

test('the device is the header when rendered, else the configured default, else the first device', () => {
  const devices = ['desktop', 'mobile'];
  assert.equal(chooseDevice('mobile', devices, null), 'mobile');
  assert.equal(chooseDevice(' Mobile ', devices, null), 'mobile');
  assert.equal(chooseDevice('tablet', devices, null), 'desktop', 'an unknown device falls back');
  assert.equal(chooseDevice(null, devices, 'mobile'), 'mobile');
  assert.equal(chooseDevice('tablet', devices, 'mobile'), 'mobile');
  assert.equal(
    chooseDevice(undefined, devices, 'watch'),
    'desktop',
    'a default that is not rendered is ignored',
  );
  const cfg = defaultConfig();
  assert.deepEqual(deviceTypes(cfg), ['desktop']);
  assert.equal(servingKey('https://example.com/a', 'desktop'), 'https://example.com/a|desktop');
});

test('fresh before the next render time, stale within the window after it, expired past it', () => {
  const row = { nextRenderTime: NOW, urgentAt: null };
  assert.equal(freshness(row, NOW - 1, 3 * HOUR), 'fresh');
  assert.equal(freshness(row, NOW, 3 * HOUR), 'stale');
  assert.equal(freshness(row, NOW + 3 * HOUR - 1, 3 * HOUR), 'stale');
  assert.equal(freshness(row, NOW + 3 * HOUR, 3 * HOUR), 'expired');
  assert.equal(freshness(row, NOW, 0), 'expired', 'a zero window serves nothing stale');
  assert.equal(needsUrgentMark(row), true);
  assert.equal(needsUrgentMark({ ...row, urgentAt: NOW - MIN }), false, 'once per window');
  assert.equal(ageSeconds(NOW - 61_500, NOW), 61);
  assert.equal(ageSeconds(NOW + 5000, NOW), 0);
  assert.equal(ageSeconds(null, NOW), 0);
});

test('suppressed and gone rows are never servable; a row without a state is active', () => {
  const row = { nextRenderTime: NOW + HOUR, urgentAt: null };
  assert.equal(servable(row), true);
  assert.equal(servable({ ...row, state: null }), true);
  assert.equal(servable({ ...row, state: 'active' }), true);
  assert.equal(servable({ ...row, state: 'suppressed' }), false);
  assert.equal(servable({ ...row, state: 'gone' }), false);
  assert.equal(servable({ ...row, state: 'anything-else' }), false);
  assert.equal(servable(undefined), false);
});

test('If-None-Match: weak comparison, lists and *; it decides alone over If-Modified-Since', () => {
  const v = { etag: '"abc"', lastModified: 'Wed, 02 Dec 2026 10:00:00 GMT' };
  const inm = (h: string) => notModified({ ifNoneMatch: h, ifModifiedSince: null }, v);
  assert.equal(inm('"abc"'), true);
  assert.equal(inm('W/"abc"'), true);
  assert.equal(notModified({ ifNoneMatch: '"abc"', ifModifiedSince: null }, { ...v, etag: 'W/"abc"' }), true);
  assert.equal(inm('"x", "abc"'), true);
  assert.equal(inm('"x",W/"abc"'), true);
  assert.equal(inm('"a,b", "abc"'), true);
  assert.equal(inm('*'), true);
  assert.equal(inm('"abcd"'), false);
  assert.equal(inm('"ab"'), false);
  assert.equal(inm('abc'), false, 'an unquoted token is not the tag');
  assert.deepEqual(entityTags('"a,b", W/"c" ,*'), ['"a,b"', 'W/"c"', '*']);
  assert.equal(notModified({ ifNoneMatch: '"abc"', ifModifiedSince: null }, { ...v, etag: null }), false);
  assert.equal(notModified({ ifNoneMatch: '*', ifModifiedSince: null }, { ...v, etag: null }), true);
  const ims = (h: string) => notModified({ ifNoneMatch: null, ifModifiedSince: h }, v);
  assert.equal(ims('Wed, 02 Dec 2026 10:00:00 GMT'), true);
  assert.equal(ims('Thu, 03 Dec 2026 10:00:00 GMT'), true);
  assert.equal(ims('Tue, 01 Dec 2026 10:00:00 GMT'), false);
  assert.equal(ims('not a date'), false);
  assert.equal(
    notModified(
      { ifNoneMatch: null, ifModifiedSince: 'Thu, 03 Dec 2026 10:00:00 GMT' },
      { ...v, lastModified: null },
    ),
    false,
  );
  assert.equal(
    notModified({ ifNoneMatch: '"other"', ifModifiedSince: 'Thu, 03 Dec 2026 10:00:00 GMT' }, v),
    false,
    'If-None-Match wins',
  );
});

test('Accept-Encoding picks brotli, then gzip, then the page as stored; q=0 refuses', () => {
  const both = { br: true, gzip: true };
  assert.equal(chooseCoding('gzip, deflate, br', both), 'br');
  assert.equal(chooseCoding('gzip', both), 'gzip');
  assert.equal(chooseCoding('br;q=0, gzip', both), 'gzip');
  assert.equal(chooseCoding('br;q=0, gzip;q=0', both), 'identity');
  assert.equal(chooseCoding('*', both), 'br');
  assert.equal(chooseCoding('*;q=0, gzip', both), 'gzip');
  assert.equal(chooseCoding('', both), 'identity');
  assert.equal(chooseCoding(null, both), 'identity');
  assert.equal(chooseCoding('br', { br: false, gzip: true }), 'identity', 'no copy, no coding');
  assert.equal(chooseCoding('gzip, br', { br: false, gzip: true }), 'gzip');
});

test('the miss policy: origin, notFound, or an expired page when the policy is stale and one exists', () => {
  assert.equal(missAnswer('origin', true), 'origin');
  assert.equal(missAnswer('origin', false), 'origin');
  assert.equal(missAnswer('notFound', true), 'notFound');
  assert.equal(missAnswer('stale', true), 'expiredPage');
  assert.equal(missAnswer('stale', false), 'notFound');
});

test('render-now needs it enabled, the exact token (an empty token disables it) and a row', () => {
  const token = 'sesame-0123456789';
  assert.equal(tokenMatches(token, token), true);
  for (const sent of ['', 'sesame', `${token}x`, token.toUpperCase(), null, undefined])
    assert.equal(tokenMatches(sent, token), false, String(sent));
  assert.equal(tokenMatches('', ''), false, 'an empty token matches nothing');
  assert.equal(tokenMatches('x', ''), false);
  const base = { enabled: true, token, sent: token, hasRow: true };
  assert.equal(renderNowVerdict(base), 'render');
  assert.equal(renderNowVerdict({ ...base, enabled: false }), 'no');
  assert.equal(renderNowVerdict({ ...base, sent: 'wrong' }), 'no');
  assert.equal(renderNowVerdict({ ...base, token: '', sent: '' }), 'no');
  assert.equal(renderNowVerdict({ ...base, hasRow: false }), 'noRow');
  assert.equal(renderNowVerdict({ ...base, hasRow: false, sent: 'wrong' }), 'no');
});

test('node slots hold at most max at once and give each back on release', () => {
  const words = new Int32Array(new SharedArrayBuffer(16));
  const a = new NodeSlots(() => words, 0);
  const b = new NodeSlots(() => words, 0);
  assert.equal(a.take(2), true);
  assert.equal(b.take(2), true, 'the slots are the node’s, whichever worker takes');
  assert.equal(a.take(2), false);
  assert.equal(a.inUse(), 2, 'a refused take leaves the count as it was');
  b.release();
  assert.equal(a.take(2), true);
  assert.equal(a.take(0), false);
  assert.equal(words[1], 0, 'another slot word is untouched');
});

test('the minute budget admits limit takes a minute across the node and starts again each minute', () => {
  const words = new Int32Array(new SharedArrayBuffer(16));
  const a = new MinuteBudget(() => words, 2);
  const b = new MinuteBudget(() => words, 2);
  const minute = Math.floor(NOW / MIN) * MIN;
  assert.deepEqual(
    [a.take(3, minute + 1), b.take(3, minute + 2), a.take(3, minute + 3), b.take(3, minute + 4)],
    [true, true, true, false],
  );
  assert.equal(a.take(3, minute + MIN), true, 'a new minute');
  assert.equal(a.take(0, minute + MIN), false, '0 admits nothing');
});

test('a page without an ETag of its own gets a strong one from its bytes; compressed copies must save an eighth', () => {
  const bytes = Buffer.from('<p>x</p>');
  assert.equal(strongEtag(bytes), strongEtag(Buffer.from('<p>x</p>')), 'the same bytes, the same tag');
  assert.notEqual(strongEtag(bytes), strongEtag(Buffer.from('<p>y</p>')));
  assert.match(strongEtag(bytes), /^"[A-Za-z0-9_-]{22}"$/);
  assert.equal(computedEtag(null, bytes), strongEtag(bytes));
  assert.equal(computedEtag({ 'content-type': 'text/html' }, bytes), strongEtag(bytes));
  assert.equal(computedEtag({ etag: '"origin"' }, bytes), null, "the origin's tag is kept");
  assert.equal(worthKeeping(800, 700), true);
  assert.equal(worthKeeping(800, 701), false);
});

test('the serving keys: onMiss takes its choices, the token is header-safe, defaultDevice may be null', () => {
  const cfg = applyValues(
    defaultConfig(),
    checkPartial({ serving: { onMiss: 'stale', defaultDevice: 'mobile' } }).values,
  );
  assert.equal(cfg.serving.onMiss, 'stale');
  assert.equal(cfg.serving.defaultDevice, 'mobile');
  assert.equal(defaultConfig().serving.defaultDevice, null);
  assert.equal(checkPartial({ serving: { defaultDevice: null } }).values.get('serving.defaultDevice'), null);
  assert.throws(() => checkPartial({ serving: { onMiss: 'cache' } }), /origin, notFound, stale/);
  assert.throws(
    () => checkPartial({ serving: { renderNow: { token: 'a b' } } }),
    /serving\.renderNow\.token/,
  );
  assert.throws(
    () => checkPartial({ render: { deviceTypes: null } }),
    /render\.deviceTypes/,
    'null only where the default is',
  );
  assert.equal(defaultConfig().serving.hosts.length, 0, 'the route is off by default');
});

test('a render-now wait ends on a row rescheduled by a result without a page, not on its own mark', () => {
  assert.equal(renderEndedWithoutPage({ nextRenderTime: NOW + HOUR, lastOutcome: 'failed' }, NOW), true);
  assert.equal(renderEndedWithoutPage({ nextRenderTime: NOW + HOUR, lastOutcome: 'redirected' }, NOW), true);
  assert.equal(
    renderEndedWithoutPage({ nextRenderTime: NOW + HOUR, lastOutcome: 'rendered' }, NOW),
    false,
    'a rendered result ends the wait with its page write, which follows the row write',
  );
  assert.equal(
    renderEndedWithoutPage({ nextRenderTime: NOW - MIN, lastOutcome: null }, NOW),
    false,
    'the mark',
  );
  assert.equal(renderEndedWithoutPage({ nextRenderTime: NOW, lastOutcome: 'failed' }, NOW), false);
  assert.equal(renderEndedWithoutPage({ nextRenderTime: undefined, lastOutcome: 'failed' }, NOW), false);
});
