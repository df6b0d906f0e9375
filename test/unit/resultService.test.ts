// The result path (services/results/service.ts, util/results/check.ts) over a real lease table on a plain ArrayBuffer, with a
// fake schedule writer, page store, clock and sleep.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '../../util/config/schema.js';
import { LeaseTable, type GrantOptions } from '../../util/leases/table.js';
import { nameHash } from '../../util/leases/token.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import type { ResultApplied, ResultWrite } from '../../util/schedule/writes.js';
import type { PageWrite } from '../../services/pages/store.js';
import type { Caller } from '../../services/leases/caller.js';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { HttpError } from '../../services/runtime/httpError.js';
import { decodePage } from '../../util/prerender/page.js';
import { scheduleRow } from '../scheduleRow.js';
import {
  checkFleetResult as checkFleetOrProblem,
  splitFrame as splitFrameOrProblem,
} from '../../util/prerender/result.js';
import { PENDING_WAIT_MS, ResultService, retryableOnFault } from '../../services/results/service.js';
import {
  checkFramedResult as checkFramedOrProblem,
  checkResult as checkResultOrProblem,
  type CheckedResult,
} from '../../util/results/check.js';
import { orRefuse } from '../../services/http/problems.js';

// The checks as the routes answer them: a problem thrown as its HTTP answer.
const checkResult = (...a: Parameters<typeof checkResultOrProblem>) => orRefuse(checkResultOrProblem(...a));
const checkFramedResult = (...a: Parameters<typeof checkFramedOrProblem>) =>
  orRefuse(checkFramedOrProblem(...a));
const checkFleetResult = (...a: Parameters<typeof checkFleetOrProblem>) =>
  orRefuse(checkFleetOrProblem(...a));
const splitFrame = (...a: Parameters<typeof splitFrameOrProblem>) => orRefuse(splitFrameOrProblem(...a));

const NOW = Date.UTC(2026, 2, 1, 12, 0, 0);
const NEXT = NOW + 86_400_000;
const KEY = 'https://shop.test/product/1';
const FLEET: Caller = { user: nameHash('fleet-a'), worker: nameHash(''), superUser: false };
const OTHER: Caller = { user: nameHash('fleet-b'), worker: nameHash(''), superUser: false };

const grantOptions = (over: Partial<GrantOptions> = {}): GrantOptions => ({
  leaseMs: 600_000,
  dueMs: NOW - 60_000,
  cadenceMs: 86_400_000,
  fastRetries: 2,
  user: FLEET.user,
  queue: nameHash('product'),
  ...over,
});

function row(key: string): ScheduleRow {
  return scheduleRow(key, NEXT, { lastOutcome: 'rendered', lastRenderedAt: NOW, lastStatusCode: 200 });
}

function world() {
  const cfg = defaultConfig();
  const leases = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(64)), 64);
  const rows = new Set<string>([KEY]);
  const writes: ResultWrite[][] = [];
  const pages: PageWrite[] = [];
  const counts: Array<[string, number, string | null]> = [];
  const outcomes: Array<[string, string, number | null]> = [];
  const warnings: string[] = [];
  const clock = { now: NOW };
  const fake = {
    /** When set, the next schedule write waits on this (a first copy still being applied). */
    hold: null as Promise<void> | null,
    failNext: false,
    keepLease: false,
  };
  const results = new ResultService({
    leases: () => leases,
    applyResults: async (list): Promise<ResultApplied[]> => {
      writes.push([...list]);
      if (fake.hold) await fake.hold;
      if (fake.failNext) {
        fake.failNext = false;
        throw new Error('commit failed');
      }
      return list.map((w) =>
        rows.has(w.key)
          ? {
              found: true,
              row: row(w.key),
              keepLease: fake.keepLease,
              page: w.outcome === 'rendered' ? 'store' : 'keep',
              retired: null,
            }
          : { found: false },
      );
    },
    storePages: async (list) => {
      pages.push(...list);
    },
    deletePages: async () => 0,
    config: () => cfg,
    now: () => clock.now,
    sleep: async (ms) => {
      clock.now += ms;
      await new Promise((r) => setImmediate(r));
    },
    count: (name, n, labels) => counts.push([name, n, labels?.result ?? null]),
    countResult: (queue, outcome, renderMs) => outcomes.push([queue, outcome, renderMs]),
    log: { warn: (...a: unknown[]) => warnings.push(String(a[0])) },
  });
  const grant = (key = KEY, at = NOW, over: Partial<GrantOptions> = {}) => {
    const g = leases.grant(key, at, grantOptions(over));
    if (!g.ok) throw new Error(`no grant: ${JSON.stringify(g)}`);
    return g.token;
  };
  const result = (token: string, over: Partial<CheckedResult> = {}): CheckedResult => ({
    id: KEY,
    leaseToken: token,
    outcome: 'rendered',
    statusCode: 200,
    contentType: 'text/html',
    body: '<html>ok</html>',
    ...over,
  });
  return { results, leases, rows, writes, pages, clock, fake, grant, result, counts, outcomes, warnings };
}

test('a result under its current token is applied once: row, page, release', async () => {
  const w = world();
  const token = w.grant();
  const [a] = await w.results.apply([w.result(token)], FLEET, NOW + 1000);
  assert.deepEqual(a, { id: KEY, accepted: true, nextRenderTime: NEXT });
  assert.equal(w.writes.length, 1);
  assert.deepEqual(
    w.pages.map((p) => [p.key, p.body, p.renderedAt]),
    [[KEY, '<html>ok</html>', NOW + 1000]],
  );
  assert.equal(w.leases.lookup(KEY, NOW + 2000).state, 'grace', 'the report released the lease');
});

test('a result under a stale token (the key was granted again since) is superseded and writes nothing', async () => {
  const w = world();
  const old = w.grant(KEY, NOW, { leaseMs: 1000 });
  w.grant(KEY, NOW + 5000); // the first lease expired unreported; the key went to someone else
  const [a] = await w.results.apply([w.result(old)], FLEET, NOW + 6000);
  assert.equal(a!.accepted, false);
  assert.equal(a!.accepted === false && a!.code, 'superseded');
  assert.equal(a!.accepted === false && a!.status, 409);
  assert.equal(w.writes.length, 0);
  assert.equal(w.pages.length, 0);
});

test("a result from a user who is not the lease's grantee is superseded; a super_user's is applied", async () => {
  const w = world();
  const token = w.grant();
  const [refused] = await w.results.apply([w.result(token)], OTHER, NOW + 1000);
  assert.equal(refused!.accepted === false && refused!.code, 'superseded');
  assert.equal(w.writes.length, 0);
  const [admitted] = await w.results.apply([w.result(token)], { ...OTHER, superUser: true }, NOW + 1000);
  assert.equal(admitted!.accepted, true);
});

test('a duplicate result gets the first answer with duplicate: true and is not applied again', async () => {
  const w = world();
  const token = w.grant();
  const failed = w.result(token, { outcome: 'failed', statusCode: 500, body: null });
  const [first] = await w.results.apply([failed], FLEET, NOW + 1000);
  const [again] = await w.results.apply([failed], FLEET, NOW + 2000);
  assert.deepEqual(again, { ...first, duplicate: true });
  assert.equal(w.writes.length, 1, 'a retried failure counts one strike');
});

test('the same result twice in one batch is applied once; the second copy answers duplicate', async () => {
  const w = world();
  const token = w.grant();
  const answers = await w.results.apply([w.result(token), w.result(token)], FLEET, NOW + 1000);
  assert.deepEqual(answers, [
    { id: KEY, accepted: true, nextRenderTime: NEXT },
    { id: KEY, accepted: true, nextRenderTime: NEXT, duplicate: true },
  ]);
  assert.equal(w.writes.length, 1);
});

test('a result for a row deleted meanwhile is unknown_job and stores no page', async () => {
  const w = world();
  const token = w.grant();
  w.rows.delete(KEY);
  const [a] = await w.results.apply([w.result(token)], FLEET, NOW + 1000);
  assert.equal(a!.accepted === false && a!.code, 'unknown_job');
  assert.equal(a!.accepted === false && a!.status, 404);
  assert.equal(w.pages.length, 0);
});

test('a failed write gives the report up, so the retry of the same result is applied', async () => {
  const w = world();
  const token = w.grant();
  w.fake.failNext = true;
  await assert.rejects(w.results.apply([w.result(token)], FLEET, NOW + 1000), /commit failed/);
  const [retry] = await w.results.apply([w.result(token)], FLEET, NOW + 2000);
  assert.deepEqual(retry, { id: KEY, accepted: true, nextRenderTime: NEXT });
  assert.equal(w.writes.length, 2);
});

test('the fast-retry lane keeps the lease after the report; an ordinary result releases it', async () => {
  const w = world();
  w.fake.keepLease = true;
  const token = w.grant();
  await w.results.apply([w.result(token, { outcome: 'failed', body: null })], FLEET, NOW + 1000);
  assert.equal(w.leases.lookup(KEY, NOW + 2000).state, 'leased');
  const other = world();
  const t2 = other.grant();
  await other.results.apply([other.result(t2, { outcome: 'failed', body: null })], FLEET, NOW + 1000);
  assert.equal(other.leases.lookup(KEY, NOW + 2000).state, 'grace');
});

test('a retry racing its first copy waits for it and gets its answer as a duplicate', async () => {
  const w = world();
  const token = w.grant();
  let release!: () => void;
  w.fake.hold = new Promise((r) => (release = r));
  const first = w.results.apply([w.result(token)], FLEET, NOW + 1000);
  const retry = w.results.apply([w.result(token)], FLEET, NOW + 1000);
  await new Promise((r) => setImmediate(r));
  release();
  const [a] = await first;
  const [b] = await retry;
  assert.deepEqual(b, { ...a, duplicate: true });
  assert.equal(w.writes.length, 1);
});

test('a retry whose first copy never finishes answers 503 busy after the wait', async () => {
  const w = world();
  const token = w.grant();
  w.fake.hold = new Promise(() => {});
  void w.results.apply([w.result(token)], FLEET, NOW + 1000);
  const start = w.clock.now;
  await assert.rejects(w.results.apply([w.result(token)], FLEET, NOW + 1000), { status: 503, code: 'busy' });
  assert.ok(w.clock.now - start >= PENDING_WAIT_MS);
});

test('a raw-bytes page that is not valid UTF-8 is a 400 naming the first bad byte, never stored with U+FFFD', () => {
  const meta = Buffer.from(JSON.stringify({ id: KEY, leaseToken: 't', outcome: 'rendered' }));
  const latin1 = Buffer.from('<p>caf\u00e9</p>', 'latin1'); // é as the single byte 0xE9
  assert.throws(() => checkFramedResult(Buffer.concat([meta, latin1]), String(meta.length), 1000), {
    status: 400,
    code: 'invalid_body',
    message: /not valid UTF-8 \(first bad byte at offset 6\)/,
  });
  const utf8 = Buffer.from('<p>caf\u00e9 \u{1F600}</p>', 'utf8');
  const ok = checkFramedResult(Buffer.concat([meta, utf8]), String(meta.length), 1000);
  assert.equal(ok.body, '<p>caf\u00e9 \u{1F600}</p>');
});

test('a result body over render.maxBodyBytes is a 413; an error field on a success is a 400', () => {
  assert.throws(
    () => checkResult({ id: KEY, leaseToken: 't', outcome: 'rendered', body: 'x'.repeat(11) }, 10),
    { status: 413, code: 'payload_too_large' },
  );
  assert.throws(
    () => checkResult({ id: KEY, leaseToken: 't', outcome: 'rendered', error: { name: 'E' } }, 10),
    { status: 400, code: 'invalid_body' },
  );
});

test("a result's error must be {name, message} of strings: another type there is a 400, so no strike is counted", () => {
  const failed = (error: unknown) => ({ id: KEY, leaseToken: 't', outcome: 'failed', error });
  for (const error of [{ name: { deep: [1] } }, { message: 5 }, { name: 'E', message: ['m'] }])
    assert.throws(() => checkResult(failed(error), 10), {
      status: 400,
      code: 'invalid_body',
      message: /^error\.(name|message) must be a string/,
    });
  assert.equal(checkResult(failed({ name: 'TimeoutError', message: 'took 30 s' }), 10).outcome, 'failed');
  assert.equal(checkResult(failed({ name: null }), 10).outcome, 'failed');
});

test("a numeric leaseToken (the contract's examples show one) is a token we never issued: 409 superseded, not a 400", async () => {
  const w = world();
  w.grant();
  const checked = checkResult({ id: KEY, leaseToken: 1767225600123, outcome: 'rendered' }, 10);
  assert.equal(checked.leaseToken, '1767225600123');
  const [a] = await w.results.apply([checked], FLEET, NOW + 1000);
  assert.equal(a!.accepted === false && a!.code, 'superseded');
  assert.equal(w.writes.length, 0);
  for (const bad of [Number.NaN, true, {}, ''])
    assert.throws(() => checkResult({ id: KEY, leaseToken: bad, outcome: 'rendered' }, 10), {
      status: 400,
      code: 'invalid_body',
    });
});

test("a result's redirectedTo, reason and isIndexable reach the result service typed, in JSON and in the raw-bytes framing", () => {
  const w = world();
  const verdict = { redirectedTo: 'https://shop.test/product/1b', reason: 'redirect', isIndexable: false };
  const json = orRefuse(w.results.check({ id: KEY, leaseToken: 't', outcome: 'redirected', ...verdict }));
  assert.deepEqual(
    { redirectedTo: json.redirectedTo, reason: json.reason, isIndexable: json.isIndexable },
    verdict,
  );
  const f = frame({
    id: KEY,
    leaseToken: 't',
    outcome: 'non-indexable',
    reason: 'noindex',
    isIndexable: false,
  });
  const framed = orRefuse(w.results.checkFramed(f.raw, f.size));
  assert.equal(framed.kind, 'token');
  assert.equal(framed.kind === 'token' && framed.result.reason, 'noindex');
  assert.equal(framed.kind === 'token' && framed.result.isIndexable, false);
  const bare = orRefuse(w.results.check({ id: KEY, leaseToken: 't', outcome: 'rendered' }));
  assert.deepEqual([bare.redirectedTo, bare.reason, bare.isIndexable], [null, null, null]);
});

test('a redirectedTo that is not an absolute http(s) URL of at most 1,900 bytes, an unknown reason or a non-boolean isIndexable is a 400 naming the field', () => {
  const w = world();
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ redirectedTo: '/relative' }, /redirectedTo/],
    [{ redirectedTo: 'ftp://shop.test/x' }, /redirectedTo/],
    [{ redirectedTo: `https://shop.test/${'a'.repeat(1900)}` }, /redirectedTo/],
    [{ redirectedTo: 'https://shop.test/\ud800' }, /redirectedTo/],
    [{ redirectedTo: 5 }, /redirectedTo/],
    [{ reason: 'bored' }, /reason/],
    [{ reason: 3 }, /reason/],
    [{ isIndexable: 'no' }, /isIndexable/],
  ];
  for (const [fields, names] of bad)
    assert.throws(
      () => orRefuse(w.results.check({ id: KEY, leaseToken: 't', outcome: 'redirected', ...fields })),
      { status: 400, code: 'invalid_body', message: names },
      JSON.stringify(fields),
    );
  const longest = `https://shop.test/${'a'.repeat(1900 - 'https://shop.test/'.length)}`;
  assert.equal(
    orRefuse(w.results.check({ id: KEY, leaseToken: 't', outcome: 'redirected', redirectedTo: longest }))
      .redirectedTo,
    longest,
  );
});

// ---- the prerender fleet protocol: results without a lease token (docs/prerender-fleet.md)

const W1: Caller = { ...FLEET, worker: nameHash('worker-1') };
const W2: Caller = { ...FLEET, worker: nameHash('worker-2') };
const frame = (meta: Record<string, unknown>, page: Uint8Array = new Uint8Array()) => {
  const m = Buffer.from(JSON.stringify(meta));
  return { raw: Buffer.concat([m, page]), size: String(m.length) };
};
const fleetResult = (meta: Record<string, unknown>, page: Uint8Array = new Uint8Array()) => {
  const f = frame(meta, page);
  const { meta: parsed, page: bytes } = splitFrame(f.raw, f.size);
  return checkFleetResult(parsed, bytes);
};
const gzipped = (text: string, headers: Record<string, string> = {}) =>
  fleetResult(
    { id: KEY, url: KEY, statusCode: 200, headers: { 'content-encoding': 'gzip', ...headers } },
    gzipSync(Buffer.from(text)),
  );

test('a token-less result applies only to the latest grant, and only from the user and worker id it went to (no super_user exception)', async () => {
  const w = world();
  w.grant(KEY, NOW, { worker: W1.worker });
  const r = gzipped('<html>ok</html>');
  assert.equal(await w.results.applyFleet(r, W2), 'superseded', 'same user, another worker id');
  assert.equal(
    await w.results.applyFleet(r, { ...OTHER, worker: W1.worker }),
    'superseded',
    'same worker id, another user',
  );
  assert.equal(
    await w.results.applyFleet(r, { ...OTHER, worker: W1.worker, superUser: true }),
    'superseded',
    'a super_user is no grantee',
  );
  assert.equal(w.writes.length, 0, 'nothing superseded changes a row');
  assert.equal(await w.results.applyFleet(r, W1), 'applied');
  assert.equal(await w.results.applyFleet(r, W1), 'duplicate', 'the same result again changes nothing');
  assert.equal(w.writes.length, 1);
  assert.deepEqual(
    w.counts.filter((c) => c[0] === 'prerender_results').map((c) => c[2]),
    ['superseded', 'superseded', 'superseded', 'applied', 'duplicate'],
  );
});

test("a token-less result of an expired lease that went to another worker since is superseded; the new grantee's applies", async () => {
  const w = world();
  w.grant(KEY, NOW, { leaseMs: 1000, worker: W1.worker });
  w.grant(KEY, NOW + 5000, { worker: W2.worker });
  const r = gzipped('<html>late</html>');
  assert.equal(await w.results.applyFleet(r, W1), 'superseded');
  assert.equal(w.writes.length, 0);
  assert.equal(await w.results.applyFleet(r, W2), 'applied');
});

test('gzip, br and identity pages are decoded and stored with the allow-listed headers only', async () => {
  for (const [encoding, encode] of [
    ['gzip', (b: Buffer) => gzipSync(b)],
    ['br', (b: Buffer) => brotliCompressSync(b)],
    [undefined, (b: Buffer) => b],
  ] as const) {
    const w = world();
    w.grant(KEY, NOW, { worker: W1.worker });
    const page = '<html>héllo 日本語</html>';
    const headers: Record<string, string> = {
      'content-type': 'text/html; charset=utf-8',
      ETag: '"v1"',
      'set-cookie': 'session=secret',
      'x-robots-tag': 'noarchive',
    };
    if (encoding) headers['content-encoding'] = encoding;
    const r = fleetResult(
      { id: KEY, url: KEY, statusCode: 200, headers, outcome: 'rendered' },
      encode(Buffer.from(page)),
    );
    assert.equal(await w.results.applyFleet(r, W1), 'applied', String(encoding));
    assert.equal(w.pages.length, 1);
    assert.equal(w.pages[0]!.body, page);
    assert.equal(w.pages[0]!.contentType, 'text/html; charset=utf-8');
    assert.deepEqual(w.pages[0]!.headers, {
      'content-type': 'text/html; charset=utf-8',
      etag: '"v1"',
      'x-robots-tag': 'noarchive',
    });
  }
});

test('a page that inflates past render.maxBodyBytes is answered too_large and recorded as a failure strike, never inflated whole', async () => {
  const w = world();
  const cfg = defaultConfig();
  w.grant(KEY, NOW, { worker: W1.worker });
  // 64 MiB of one byte is ~64 KiB of gzip and ~100 bytes of br: a bomb either way.
  const bomb = Buffer.alloc(64 << 20, 0x61);
  const r = fleetResult({ id: KEY, headers: { 'content-encoding': 'br' } }, brotliCompressSync(bomb));
  assert.equal(r.outcome, 'rendered', 'content implies rendered');
  assert.ok(r.page.length < 1024);
  const before = process.memoryUsage().arrayBuffers;
  assert.equal(await w.results.applyFleet(r, W1), 'too_large');
  assert.ok(process.memoryUsage().arrayBuffers - before < 32 << 20, 'the bomb was not inflated whole');
  assert.deepEqual(
    w.writes.flat().map((x) => x.outcome),
    ['failed'],
    'a strike, so the row backs off instead of being rendered again every lease',
  );
  assert.equal(w.pages.length, 0);
  assert.equal(w.warnings.length, 1);
  assert.match(w.warnings[0]!, /render\.maxBodyBytes/);
  const exact = await decodePage(
    gzipSync(Buffer.alloc(cfg.render.maxBodyBytes, 0x61)),
    'gzip',
    cfg.render.maxBodyBytes,
  );
  assert.equal(exact.ok, true, 'a page of exactly render.maxBodyBytes is stored');
});

test('corrupt gzip, corrupt br and a page that is not UTF-8 are answered undecodable and recorded as failures', async () => {
  const cases: Array<[string, Uint8Array]> = [
    ['gzip', Buffer.from('not gzip at all')],
    ['br', Buffer.from([0xff, 0xff, 0xff, 0xff, 0x00, 0x13])],
    ['gzip', gzipSync(Buffer.from([0x3c, 0xff, 0xfe, 0x3e]))],
  ];
  for (const [encoding, bytes] of cases) {
    const w = world();
    w.grant(KEY, NOW, { worker: W1.worker });
    const r = fleetResult({ id: KEY, outcome: 'rendered', headers: { 'content-encoding': encoding } }, bytes);
    assert.equal(await w.results.applyFleet(r, W1), 'undecodable', encoding);
    assert.deepEqual(
      w.writes.flat().map((x) => x.outcome),
      ['failed'],
    );
    assert.equal(w.pages.length, 0);
  }
});

test("an older fleet's result without outcome is read the fleet's way: content, then redirectedTo, then isIndexable false, else error", () => {
  const page = Buffer.from('<html></html>');
  assert.equal(
    fleetResult({ id: KEY, redirectedTo: 'https://a.test/', isIndexable: false }, page).outcome,
    'rendered',
  );
  assert.equal(
    fleetResult({ id: KEY, redirectedTo: 'https://a.test/', isIndexable: false }).outcome,
    'redirected',
  );
  assert.equal(fleetResult({ id: KEY, isIndexable: false }).outcome, 'non-indexable');
  assert.equal(fleetResult({ id: KEY }).outcome, 'error');
  assert.equal(
    fleetResult({ id: KEY, outcome: 'non-indexable', error: { name: 'E', message: 'loop' } }).outcome,
    'non-indexable',
  );
});

test("an error outcome is a failure strike, whatever error detail rides along; a redirect loop's non-indexable is not", async () => {
  const w = world();
  w.grant(KEY, NOW, { worker: W1.worker });
  const failed = fleetResult({
    id: KEY,
    outcome: 'error',
    error: { name: 'TimeoutError', message: 'nav', phase: 'navigate' },
  });
  assert.equal(await w.results.applyFleet(failed, W1), 'applied');
  const v = world();
  v.grant(KEY, NOW, { worker: W1.worker });
  const loop = fleetResult({
    id: KEY,
    outcome: 'non-indexable',
    error: { name: 'RedirectLoop', message: 'a→b→a' },
  });
  assert.equal(await v.results.applyFleet(loop, W1), 'applied');
  assert.deepEqual(
    [...w.writes.flat(), ...v.writes.flat()].map((x) => x.outcome),
    ['failed', 'non-indexable'],
  );
});

test('a token-less result for a row that is gone answers unknown_job and stores no page', async () => {
  const w = world();
  w.grant(KEY, NOW, { worker: W1.worker });
  w.rows.delete(KEY);
  assert.equal(await w.results.applyFleet(gzipped('<html></html>'), W1), 'unknown_job');
  assert.equal(w.pages.length, 0);
});

test("a fleet's unknown metadata fields are ignored and counted; a known field of the wrong type is a 400 naming it", async () => {
  const w = world();
  w.grant(KEY, NOW, { worker: W1.worker });
  const r = fleetResult({
    id: KEY,
    outcome: 'redirected',
    redirectedTo: 'https://a.test/',
    variant: 'x',
    timings: {},
  });
  assert.deepEqual(r.ignored, ['variant', 'timings']);
  assert.equal(await w.results.applyFleet(r, W1), 'applied');
  assert.deepEqual(
    w.counts.find((c) => c[0] === 'prerender_ignored_fields'),
    ['prerender_ignored_fields', 2, null],
  );
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ url: KEY }, /^id must be/],
    [{ id: KEY, statusCode: '200' }, /^statusCode/],
    [{ id: KEY, renderTime: -1 }, /^renderTime/],
    [{ id: KEY, isIndexable: 'no' }, /^isIndexable/],
    [{ id: KEY, outcome: 'failed' }, /^outcome must be one of rendered, redirected, non-indexable, error/],
    [{ id: KEY, headers: [] }, /^headers must be an object/],
    [{ id: KEY, headers: { etag: 5 } }, /^headers\.etag must be a string/],
    [{ id: KEY, headers: { 'x-a': 5 } }, /^headers\["x-a"\] must be a string/],
    [
      { id: KEY, headers: { 'content-encoding': 'deflate' } },
      /^headers\["content-encoding"\] must be gzip, br or absent/,
    ],
    [{ id: KEY, error: 'boom' }, /^error must be/],
    [{ id: KEY, error: { phase: 3 } }, /^error\.phase must be a string/],
    [{ id: KEY, redirectedTo: 7 }, /^redirectedTo must be a string/],
  ];
  for (const [meta, message] of bad)
    assert.throws(
      () => fleetResult(meta),
      { status: 400, code: 'invalid_body', message },
      JSON.stringify(meta),
    );
});

test('a malformed frame is a 400: x-metadata-size missing, not a number, past the body, or metadata that is not a JSON object', () => {
  const f = frame({ id: KEY });
  for (const size of [null, '', 'abc', '-1', '1', String(f.raw.length + 1), '1e3'])
    assert.throws(
      () => splitFrame(f.raw, size),
      { status: 400, code: 'invalid_body', message: /^x-metadata-size/ },
      String(size),
    );
  assert.throws(() => splitFrame(Buffer.from('{"id": '), '7'), { status: 400, code: 'invalid_json' });
  // Metadata that is not an object has no leaseToken: it is read as a prerender fleet's, whose shape
  // refuses it; the token protocol's own framing refuses it by its shape too.
  const array = splitFrame(Buffer.from('[1,2]'), '5');
  assert.throws(() => checkFleetResult(array.meta, array.page), {
    status: 400,
    code: 'invalid_body',
    message: 'the metadata must be a JSON object, not an array',
  });
  assert.throws(() => checkFramedResult(Buffer.from('[1,2]'), '5', 1000), {
    status: 400,
    code: 'invalid_body',
    message: /must be a JSON object, not an array/,
  });
  assert.throws(() => splitFrame(Buffer.from([0x7b, 0xff, 0x7d]), '3'), {
    status: 400,
    code: 'invalid_json',
  });
});

test("a worker's late token-less result of an expired lease lands on its own next grant of the key: the fence is the latest grant and its grantee, nothing more", async () => {
  const w = world();
  w.grant(KEY, NOW, { leaseMs: 1000, worker: W1.worker });
  w.grant(KEY, NOW + 5000, { worker: W1.worker });
  w.clock.now = NOW + 8000;
  const late = fleetResult({ id: KEY, outcome: 'error', renderTime: 9000 });
  assert.equal(await w.results.applyFleet(late, W1), 'applied');
  assert.equal(await w.results.applyFleet(late, W1), 'duplicate', 'the lease is reported once');
});

test('a fault of ours while applying a fleet result is a 503 the fleet retries, never a 500; the retry applies', async () => {
  const w = world();
  w.grant(KEY, NOW, { worker: W1.worker });
  w.fake.failNext = true;
  const logged: unknown[] = [];
  const run = () =>
    retryableOnFault(KEY, () => w.results.applyFleet(gzipped('<p>x</p>'), W1), {
      error: (...a) => logged.push(a),
    });
  await assert.rejects(run(), { status: 503, code: 'busy' });
  assert.equal(logged.length, 1);
  assert.equal(await run(), 'applied', 'the report was given up, so the retry applies');
  await assert.rejects(
    retryableOnFault(KEY, () => Promise.reject(new HttpError(403, 'fleet_revoked', 'revoked')), {
      error: () => undefined,
    }),
    { status: 403 },
    'a refusal stands',
  );
});

test('a stored header longer than 8 KiB, or one no HTTP field can carry (CR, LF, NUL, above U+00FF), is dropped; the rest are kept', () => {
  const r = fleetResult({
    id: KEY,
    headers: {
      link: '<https://a.test/>; rel="canonical"',
      etag: 'x'.repeat(8193),
      vary: 'accept\r\nset-cookie: session=attacker',
      'x-robots-tag': 'noindex \u0100',
      'cache-control': 'max-age=60',
    },
  });
  assert.deepEqual(r.headers, { link: '<https://a.test/>; rel="canonical"', 'cache-control': 'max-age=60' });
});

test('each result applied to its row is counted once by queue and outcome, with its render time, on either protocol', async () => {
  const w = world();
  w.rows.add('https://shop.test/gone');
  const t1 = w.grant();
  const [first] = await w.results.apply(
    [w.result(t1, { outcome: 'failed', body: null, renderTimeMs: 1500 })],
    FLEET,
    NOW + 1000,
  );
  assert.equal(first!.accepted, true);
  await w.results.apply([w.result(t1, { outcome: 'failed', body: null, renderTimeMs: 1500 })], FLEET);
  // Superseded (not the grantee) and a row deleted meanwhile: neither is counted.
  const t2 = w.grant(KEY, NOW + 700_000);
  await w.results.apply([w.result(t2)], OTHER);
  const gone = w.grant('https://shop.test/gone', NOW);
  w.rows.delete('https://shop.test/gone');
  await w.results.apply([w.result(gone, { id: 'https://shop.test/gone' })], FLEET);
  assert.deepEqual(w.outcomes, [['unrouted', 'failed', 1500]], 'the duplicate is not counted again');

  const t3 = w.grant(KEY, NOW + 1_400_000, { worker: W1.worker });
  assert.equal(t3.length > 0, true);
  const fleet = fleetResult({
    id: KEY,
    url: KEY,
    statusCode: 301,
    redirectedTo: 'https://shop.test/p/2',
    renderTime: 2250,
  });
  assert.equal(fleet.outcome, 'redirected');
  assert.equal(await w.results.applyFleet(fleet, W1), 'applied');
  assert.deepEqual(w.outcomes[1], ['unrouted', 'redirected', 2250]);
});

test('an extension with a token is clamped to queue.maxLeaseExtension and capped at the grant plus queue.maxLeaseTime', () => {
  const w = world();
  const token = w.grant(KEY, NOW, { leaseMs: 600_000 });
  w.clock.now = NOW + 300_000;
  // byMs far past the default extension (jobLeaseTime, 10 min): clamped to it.
  assert.deepEqual(w.results.extend(KEY, token, 86_400_000, FLEET), { ok: true, expiresAt: NOW + 900_000 });
  // Near the hour the cap (max(1 h, jobLeaseTime) from the grant) holds.
  let last = 0;
  for (let at = NOW + 800_000; at < NOW + 3_600_000; at += 500_000) {
    w.clock.now = at;
    const r = w.results.extend(KEY, token, 600_000, FLEET);
    assert.equal(r.ok, true);
    last = r.ok ? r.expiresAt : 0;
  }
  assert.equal(last, NOW + 3_600_000);
  assert.equal(w.results.extend(KEY, token, 600_000, OTHER).ok, false);
  assert.deepEqual(w.results.extend(KEY, token, 600_000, OTHER), {
    ok: false,
    code: 'superseded',
    error: 'the lease is not the latest grant for this job, or not yours',
  });
});

test("an extension without a token is the prerender protocol's: only the latest grant's user and worker id", () => {
  const w = world();
  w.grant(KEY, NOW, { leaseMs: 60_000, worker: W1.worker });
  w.clock.now = NOW + 30_000;
  assert.equal(w.results.extend(KEY, undefined, 60_000, W2).ok, false);
  assert.equal(
    w.results.extend(KEY, undefined, 60_000, { ...OTHER, worker: W1.worker, superUser: true }).ok,
    false,
  );
  assert.deepEqual(w.results.extend(KEY, undefined, 60_000, W1), { ok: true, expiresAt: NOW + 90_000 });
  // Past its end the lease is not revived.
  w.clock.now = NOW + 90_000;
  assert.equal(w.results.extend(KEY, undefined, 60_000, W1).ok === false, true);
  assert.deepEqual((w.results.extend(KEY, undefined, 60_000, W1) as { code: string }).code, 'lease_ended');
});
