import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Problem } from '../../util/problem.js';
import {
  checkRowTargets,
  decodeKeyCursor,
  encodeKeyCursor,
  duePage,
  keyWalkPage,
  leasedPage,
  parseRowsQuery,
  prefixRange,
  rowStateOf,
} from '../../util/schedule/rowsQuery.js';
import { GrantHolders } from '../../util/leases/holders.js';

const q = (s: string) => parseRowsQuery(new URLSearchParams(s));

test('the rows query takes state, queue, prefix, limit and cursor, and names the parameter it refuses', () => {
  assert.deepEqual(q(''), { state: 'all', queue: null, prefix: null, limit: 50, cursor: null });
  assert.deepEqual(q('state=leased&queue=product&prefix=https://a.example/p/&limit=500&cursor=abc'), {
    state: 'leased',
    queue: 'product',
    prefix: 'https://a.example/p/',
    limit: 500,
    cursor: 'abc',
  });
  for (const [s, code] of [
    ['state=stuck', 'invalid_query'],
    ['limit=0', 'invalid_limit'],
    ['limit=501', 'invalid_limit'],
    ['limit=1.5', 'invalid_limit'],
    ['queue=', 'invalid_queue'],
    [`prefix=${'x'.repeat(2049)}`, 'invalid_query'],
  ] as const) {
    const p = q(s);
    assert.ok(p instanceof Problem, s);
    assert.equal(p.code, code, s);
  }
});

test('a key cursor round-trips, and anything else is invalid_cursor', () => {
  const key = 'https://a.example/p/ü?x=1|mobile';
  assert.equal(decodeKeyCursor(encodeKeyCursor(key)), key);
  for (const bad of ['!!!', 'QQ=', encodeKeyCursor(key) + '='])
    assert.ok(decodeKeyCursor(bad) instanceof Problem, bad);
});

test('a prefix is a key range: every key that starts with it sorts inside, the next prefix outside', () => {
  const { start, end } = prefixRange('https://a.example/p/');
  const inside = [
    'https://a.example/p/',
    'https://a.example/p/zzz|desktop',
    'https://a.example/p/\u{10ffff}',
  ];
  for (const k of inside) assert.ok(k >= start! && k < end!, k);
  for (const k of ['https://a.example/p', 'https://a.example/q/1', 'https://a.example/p0'])
    assert.ok(!(k >= start! && k < end!), k);
  assert.deepEqual(prefixRange(null), { start: undefined, end: undefined });
});

test('a key walk page stops at limit or at the scan limit, and says where to go on; a spent walk says null', () => {
  const keys = Array.from({ length: 10 }, (_, i) => `k${i}`);
  const even = (k: string) => (Number(k.slice(1)) % 2 === 0 ? k : undefined);
  const full = keyWalkPage(keys, 2, 100, even);
  assert.deepEqual(full.page, ['k0', 'k2']);
  assert.equal(decodeKeyCursor(full.next!), 'k2');
  // The walk gave up at its scan limit (the caller's walk yields at most that many): short page, a next.
  const capped = keyWalkPage(keys.slice(0, 4), 5, 4, even);
  assert.deepEqual(capped.page, ['k0', 'k2']);
  assert.equal(decodeKeyCursor(capped.next!), 'k3');
  const spent = keyWalkPage(keys.slice(5), 5, 100, even);
  assert.deepEqual(spent, { page: ['k6', 'k8'], next: null });
});

test('a row is leased while blocked, else due or scheduled by its next render time', () => {
  assert.equal(rowStateOf(1000, true, 5000), 'leased');
  assert.equal(rowStateOf(5000, false, 5000), 'due');
  assert.equal(rowStateOf(5001, false, 5000), 'scheduled');
});

test("an action's entries are URLs or row keys; a bad entry refuses the whole body, naming its index", () => {
  assert.deepEqual(checkRowTargets({ urls: ['https://a.example/p/1', 'https://a.example/p/1|mobile'] }), [
    { kind: 'url', url: 'https://a.example/p/1' },
    { kind: 'key', key: 'https://a.example/p/1|mobile' },
  ]);
  const bad = checkRowTargets({ urls: ['https://a.example/p/1', 'ftp://x'] });
  assert.ok(bad instanceof Problem);
  assert.match(bad.message, /^urls\[1\]/);
  for (const body of [{ urls: [] }, { urls: 'x' }, null, { urls: Array(1001).fill('https://a.example/') }])
    assert.ok(checkRowTargets(body) instanceof Problem);
});

test("a holder's names are shown only for the token they were noted with, and the oldest note goes first", () => {
  const h = new GrantHolders(2);
  h.note('a', { token: 't1', user: 'fleet-a', workerId: 'w1' });
  assert.deepEqual(h.of('a', 't1'), { token: 't1', user: 'fleet-a', workerId: 'w1' });
  assert.equal(h.of('a', 't2'), null, 'a newer grant of the key is not this holder');
  assert.equal(h.of('a', null), null);
  h.note('b', { token: 't3', user: 'fleet-b', workerId: '' });
  h.note('c', { token: 't4', user: 'fleet-b', workerId: '' });
  assert.equal(h.of('a', 't1'), null);
  assert.equal(h.size, 2);
});

test('leases come soonest end first, then by key, in pages that follow the cursor without overlap', () => {
  const c = [
    { key: 'c', expiresAt: 3000 },
    { key: 'a', expiresAt: 5000 },
    { key: 'b', expiresAt: 3000 },
    { key: 'd', expiresAt: 1000 },
  ];
  const keep = (x: { key: string }) => (x.key === 'a' ? undefined : x.key);
  const first = leasedPage(c, 2, null, keep);
  assert.ok(!(first instanceof Problem));
  assert.deepEqual(first.page, ['d', 'b']);
  const second = leasedPage(c, 2, first.next, keep);
  assert.ok(!(second instanceof Problem));
  assert.deepEqual(second, { page: ['c'], next: null });
  assert.ok(leasedPage(c, 2, 'nonsense', keep) instanceof Problem);
});

test('due rows come best score first, then by key, each once, in pages that follow the cursor', () => {
  const ranked = [
    { key: 'b', score: 5 },
    { key: 'a', score: 5 },
    { key: 'c', score: 9 },
    { key: 'a', score: 5 },
    { key: 'd', score: 1 },
  ];
  const first = duePage(ranked, 2, null, (c) => c.key);
  assert.ok(!(first instanceof Problem));
  assert.deepEqual(first.page, ['c', 'a']);
  const second = duePage(ranked, 5, first.next, (c) => (c.key === 'd' ? undefined : c.key));
  assert.deepEqual(second, { page: ['b'], next: null });
  assert.ok(duePage(ranked, 2, 'x', (c) => c) instanceof Problem);
});
