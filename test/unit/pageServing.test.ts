// What PageServing (services/serving/service.ts) answers, over fake reads, writes, origin and waiters:
// the decisions of util/serving/ put together — a hit writes nothing, a stale hit marks its row once
// while the mark is in flight, a 304 only for a 2xx page, HEAD without a body, Vary extended by the
// coding, a busy origin a 503 with Retry-After, a miss of a URL without a row filed within the budget,
// render-now only with the token and a row.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyValues, checkPartial, defaultConfig } from '../../util/config/schema.js';
import { MinuteBudget } from '../../util/serving/nodeCounters.js';
import type { ServingRow } from '../../util/serving/freshness.js';
import type { StoredPage } from '../../services/pages/store.js';
import type { OriginResult } from '../../services/serving/origin.js';
import { PageServing, type ServeRequest } from '../../services/serving/service.js';

const NOW = Date.UTC(2026, 11, 7, 12, 0, 0);
const HOUR = 3_600_000;
const URL_A = 'https://example.com/a';
const KEY_A = `${URL_A}|desktop`;

/** A fresh budget over words of its own (the node's shared words in the product). */
function budget(): MinuteBudget {
  const words = new Int32Array(4);
  return new MinuteBudget(() => words, 0);
}

function cfgWith(serving: unknown) {
  return applyValues(
    defaultConfig(),
    checkPartial({ serving: { hosts: ['example.com'], ...(serving as object) } }).values,
  );
}

function page(over: Partial<StoredPage> = {}): StoredPage {
  return {
    statusCode: 200,
    contentType: 'text/html',
    headers: { etag: '"t1"', vary: 'User-Agent', 'cache-control': 'max-age=60' },
    body: '<p>a</p>',
    size: 8,
    gzip: new Blob([Buffer.from('gz')]),
    br: null,
    renderedAt: NOW - 90_000,
    ...over,
  };
}

interface World {
  rows: Map<string, ServingRow>;
  pages: Map<string, StoredPage>;
  marks: string[];
  discovered: string[];
  origin: OriginResult;
  waits: number;
  settleMark?: () => void;
}

function serving(world: World, cfg = cfgWith({})) {
  return new PageServing({
    config: () => cfg,
    now: () => NOW,
    readRow: (k) => world.rows.get(k),
    readPage: (k) => world.pages.get(k),
    markUrgent: (k) => {
      world.marks.push(k);
      return new Promise<void>((resolve) => (world.settleMark = resolve));
    },
    discover: async (urls) => void world.discovered.push(...urls),
    discoverBudget: budget(),
    origin: { fetch: async () => world.origin },
    renderNow: {
      wait: async (_k, _t, _m, start) => {
        world.waits++;
        return (await start()) ? 'ended' : 'timeout';
      },
    },
    log: { error: () => {} },
  });
}

function world(over: Partial<World> = {}): World {
  return {
    rows: new Map([[KEY_A, { nextRenderTime: NOW + HOUR, urgentAt: null }]]),
    pages: new Map([[KEY_A, page()]]),
    marks: [],
    discovered: [],
    origin: { kind: 'failed' },
    waits: 0,
    ...over,
  };
}

const get = (
  url: string,
  headers: Record<string, string> = {},
  method: 'GET' | 'HEAD' = 'GET',
): ServeRequest => ({
  method,
  target: `/p/${url}`,
  header: (n) => headers[n] ?? null,
});

test('a fresh hit answers the page with its headers and writes nothing', async () => {
  const w = world();
  const a = await serving(w).serve(get(URL_A));
  assert.equal(a.status, 200);
  assert.equal(a.result, 'hit');
  assert.equal(String(a.body), '<p>a</p>');
  assert.deepEqual(a.headers, {
    'content-type': 'text/html',
    etag: '"t1"',
    'cache-control': 'max-age=60',
    vary: 'User-Agent, Accept-Encoding',
    age: '90',
    'x-prerender': 'hit',
    'content-length': '8',
  });
  assert.deepEqual(w.marks, []);
  const gz = await serving(w).serve(get(URL_A, { 'accept-encoding': 'gzip' }));
  assert.equal(gz.headers['content-encoding'], 'gzip');
  assert.equal(gz.headers['content-length'], '2');
});

test('HEAD answers the headers and the length without a body', async () => {
  const a = await serving(world()).serve(get(URL_A, {}, 'HEAD'));
  assert.equal(a.status, 200);
  assert.equal(a.body, null);
  assert.equal(a.headers['content-length'], '8');
});

test('a stale hit marks its row urgent once while the mark is in flight, and not when already urgent', async () => {
  const w = world({ rows: new Map([[KEY_A, { nextRenderTime: NOW - HOUR, urgentAt: null }]]) });
  const s = serving(w);
  const answers = await Promise.all([1, 2, 3].map(() => s.serve(get(URL_A))));
  assert.deepEqual(
    answers.map((a) => a.headers['x-prerender']),
    ['stale', 'stale', 'stale'],
  );
  assert.deepEqual(w.marks, [KEY_A], 'one write for three requests');
  w.settleMark!();
  await new Promise((r) => setImmediate(r));
  w.rows.set(KEY_A, { nextRenderTime: NOW - HOUR, urgentAt: NOW - 1000 });
  await s.serve(get(URL_A));
  assert.deepEqual(w.marks, [KEY_A], 'an urgent row is not marked again');
});

test('a 304 only for a 2xx page, with only the validators and caching headers', async () => {
  const w = world();
  const a = await serving(w).serve(get(URL_A, { 'if-none-match': 'W/"t1"' }));
  assert.equal(a.status, 304);
  assert.equal(a.body, null);
  assert.deepEqual(Object.keys(a.headers).sort(), ['age', 'cache-control', 'etag', 'vary', 'x-prerender']);
  w.pages.set(KEY_A, page({ statusCode: 404 }));
  const b = await serving(w).serve(get(URL_A, { 'if-none-match': '"t1"' }));
  assert.equal(b.status, 404, 'a stored 404 page is served as itself, never a 304');
  assert.equal(b.result, 'hit');
});

test('a busy origin is a 503 with Retry-After; a failed one a 502 that says nothing more', async () => {
  const w = world({ rows: new Map(), pages: new Map(), origin: { kind: 'busy' } });
  const busy = await serving(w).serve(get(URL_A));
  assert.equal(busy.status, 503);
  assert.equal(busy.headers['retry-after'], '5');
  assert.equal(JSON.parse(String(busy.body)).code, 'origin_busy');
  w.origin = { kind: 'failed' };
  const failed = await serving(w).serve(get(URL_A));
  assert.equal(failed.status, 502);
  assert.deepEqual(JSON.parse(String(failed.body)), {
    error: 'the page could not be fetched from its origin',
    code: 'origin_failed',
  });
});

test('a miss of a URL without a row is filed as discovered within the budget; a row that exists is not', async () => {
  const w = world({ rows: new Map(), pages: new Map() });
  const s = serving(w, cfgWith({ onMiss: 'notFound', discoverPerMinute: 2 }));
  for (const p of ['/x', '/y', '/z'])
    assert.equal((await s.serve(get(`https://example.com${p}`))).status, 404);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(w.discovered, ['https://example.com/x', 'https://example.com/y']);
  const suppressed = world({
    rows: new Map([[KEY_A, { nextRenderTime: NOW + HOUR, urgentAt: null, state: 'suppressed' }]]),
  });
  const r = await serving(suppressed, cfgWith({ onMiss: 'notFound' })).serve(get(URL_A));
  assert.equal(r.status, 404, 'a suppressed row is a miss');
  assert.deepEqual(suppressed.discovered, [], 'and it is not filed again');
});

test('render-now waits only with the token and a servable row, and answers the landed page', async () => {
  const cfg = cfgWith({ onMiss: 'notFound', renderNow: { enabled: true, token: 'tok-123' } });
  const w = world({ pages: new Map() });
  w.marks = [];
  const s = new PageServing({
    config: () => cfg,
    now: () => NOW,
    readRow: (k) => w.rows.get(k),
    readPage: (k) => w.pages.get(k),
    markUrgent: async (k) => {
      w.marks.push(k);
      w.pages.set(k, page({ renderedAt: NOW }));
    },
    discover: async () => {},
    discoverBudget: budget(),
    origin: { fetch: async () => w.origin },
    renderNow: {
      wait: async (_k, _t, _m, start) => {
        w.waits++;
        return (await start()) ? 'ended' : 'timeout';
      },
    },
    log: { error: () => {} },
  });
  assert.equal((await s.serve(get(URL_A, { 'x-render-now': 'wrong' }))).status, 404);
  assert.equal(w.waits, 0);
  const a = await s.serve(get(URL_A, { 'x-render-now': 'tok-123' }));
  assert.equal(a.status, 200);
  assert.equal(a.result, 'rendered');
  assert.deepEqual(w.marks, [KEY_A]);
  const none = await s.serve(get('https://example.com/no-row', { 'x-render-now': 'tok-123' }));
  assert.equal(none.status, 404);
  assert.equal(w.waits, 1, 'no wait for a URL without a row');
});

test('the origin header is refused with 508 before anything is read', async () => {
  const w = world();
  const s = new PageServing({
    config: () => cfgWith({}),
    now: () => NOW,
    readRow: () => assert.fail('nothing is read'),
    readPage: () => assert.fail('nothing is read'),
    markUrgent: async () => {},
    discover: async () => {},
    discoverBudget: budget(),
    origin: { fetch: async () => assert.fail('nothing is fetched') },
    renderNow: { wait: async () => assert.fail('no wait') },
    log: { error: () => {} },
  });
  const a = await s.serve(get(URL_A, { 'x-queue-keeper-origin': '1' }));
  assert.equal(a.status, 508);
  assert.equal(w.marks.length, 0);
});

test('with no host served every request is the same 404, the loop header and bad URLs included', async () => {
  const cfg = applyValues(defaultConfig(), checkPartial({ serving: { hosts: [] } }).values);
  const s = new PageServing({
    config: () => cfg,
    now: () => NOW,
    readRow: () => assert.fail('nothing is read'),
    readPage: () => assert.fail('nothing is read'),
    markUrgent: async () => {},
    discover: async () => assert.fail('nothing is filed'),
    discoverBudget: budget(),
    origin: { fetch: async () => assert.fail('nothing is fetched') },
    renderNow: { wait: async () => assert.fail('no wait') },
    log: { error: () => {} },
  });
  for (const req of [get(URL_A), get(URL_A, { 'x-queue-keeper-origin': '1' }), get('not a url')]) {
    const a = await s.serve(req);
    assert.equal(a.status, 404);
    assert.equal(a.result, 'not_found');
  }
});
