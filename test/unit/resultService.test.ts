// The result path (services/leases/results.ts) over a real lease table on a plain ArrayBuffer, with a
// fake schedule writer, page store, clock and sleep.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '../../util/config/schema.js';
import { LeaseTable, type GrantOptions } from '../../util/leases/table.js';
import { nameHash } from '../../util/leases/token.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import type { ResultApplied, ResultWrite } from '../../util/schedule/writes.js';
import type { PageWrite } from '../../services/pages/store.js';
import type { Caller } from '../../services/leases/claims.js';
import {
  PENDING_WAIT_MS,
  ResultService,
  checkFramedResult,
  checkResult,
  type CheckedResult,
} from '../../services/leases/results.js';

const NOW = Date.UTC(2026, 2, 1, 12, 0, 0);
const NEXT = NOW + 86_400_000;
const KEY = 'https://shop.test/product/1';
const FLEET: Caller = { user: nameHash('fleet-a'), superUser: false };
const OTHER: Caller = { user: nameHash('fleet-b'), superUser: false };

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
  return {
    cacheKey: key,
    nextRenderTime: NEXT,
    fromSitemap: false,
    effectiveInterval: null,
    verified: true,
    urgentAt: null,
    changedAt: null,
    strikes: 0,
    lastOutcome: 'rendered',
    lastRenderedAt: NOW,
    lastStatusCode: 200,
  };
}

function world() {
  const cfg = defaultConfig();
  const leases = new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(64)), 64);
  const rows = new Set<string>([KEY]);
  const writes: ResultWrite[][] = [];
  const pages: PageWrite[] = [];
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
        rows.has(w.url) ? { found: true, row: row(w.url), keepLease: fake.keepLease } : { found: false },
      );
    },
    storePages: async (list) => {
      pages.push(...list);
    },
    config: () => cfg,
    now: () => clock.now,
    sleep: async (ms) => {
      clock.now += ms;
      await new Promise((r) => setImmediate(r));
    },
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
  return { results, leases, rows, writes, pages, clock, fake, grant, result };
}

test('a result under its current token is applied once: row, page, release', async () => {
  const w = world();
  const token = w.grant();
  const [a] = await w.results.apply([w.result(token)], FLEET, NOW + 1000);
  assert.deepEqual(a, { id: KEY, accepted: true, nextRenderTime: NEXT });
  assert.equal(w.writes.length, 1);
  assert.deepEqual(
    w.pages.map((p) => [p.url, p.body, p.renderedAt]),
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
