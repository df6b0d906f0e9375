import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyValues, checkPartial, defaultConfig } from '../../util/config/schema.js';
import {
  afterFailure,
  afterSuccess,
  classifyUrl,
  discoveredRow,
  failureDelay,
  queueOf,
  revalidatedRow,
  spreadDue,
  upsertTarget,
  type ScheduleRow,
} from '../../util/schedule/rules.js';
import { startOfMinute } from '../../util/time.js';
import { scheduleRow } from '../scheduleRow.js';

const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 29, 12, 30, 17, 123);

function cfgWith(partial: unknown) {
  return applyValues(defaultConfig(), checkPartial(partial).values);
}
const cfg = defaultConfig();

function row(over: Partial<ScheduleRow> = {}): ScheduleRow {
  return scheduleRow('https://example.com/a', startOfMinute(NOW) + HOUR, over);
}

test('startOfMinute drops seconds and milliseconds', () => {
  assert.equal(startOfMinute(Date.UTC(2026, 0, 1, 0, 0, 59, 999)), Date.UTC(2026, 0, 1, 0, 0, 0, 0));
  assert.equal(startOfMinute(NOW) % MIN, 0);
});

test('a new row is spread deterministically over its cadence and floored to the minute', () => {
  const a = upsertTarget(undefined, { url: 'https://example.com/x' }, NOW, cfg);
  const b = upsertTarget(undefined, { url: 'https://example.com/x' }, NOW, cfg);
  assert.equal(a.nextRenderTime, b.nextRenderTime);
  assert.equal(a.nextRenderTime % MIN, 0);
  assert.ok(a.nextRenderTime >= startOfMinute(NOW) && a.nextRenderTime < NOW + DAY);
  assert.equal(a.verified, true);
  assert.equal(a.urgentAt, null);
});

test('many new rows spread over the whole cadence rather than bunching', () => {
  const buckets = new Array(24).fill(0);
  for (let i = 0; i < 24_000; i++) {
    const due = spreadDue(`https://example.com/p/${i}`, NOW, DAY);
    // The last few seconds of the cadence floor into the first minute past it: count them in hour 23.
    buckets[Math.min(23, Math.floor((due - startOfMinute(NOW)) / HOUR))]++;
  }
  for (const n of buckets) assert.ok(n > 700 && n < 1300, `hour bucket ${n} is far from 1000`);
});

test('a given due time is used and floored; at or before now it marks the row urgent', () => {
  const future = upsertTarget(
    undefined,
    { url: 'https://example.com/f', dueAt: NOW + 5 * MIN + 10 },
    NOW,
    cfg,
  );
  assert.equal(future.nextRenderTime, startOfMinute(NOW + 5 * MIN));
  assert.equal(future.urgentAt, null);
  const past = upsertTarget(undefined, { url: 'https://example.com/p', dueAt: NOW - 1 }, NOW, cfg);
  assert.equal(past.nextRenderTime, startOfMinute(NOW - 1));
  assert.equal(past.urgentAt, NOW);
  const exact = upsertTarget(undefined, { url: 'https://example.com/e', dueAt: NOW }, NOW, cfg);
  assert.equal(exact.urgentAt, NOW);
});

test('an existing row keeps its due time when no dueAt is given', () => {
  const existing = row({ nextRenderTime: startOfMinute(NOW) + 3 * HOUR, strikes: 2 });
  const next = upsertTarget(existing, { url: existing.cacheKey, fromSitemap: true }, NOW, cfg);
  assert.equal(next.nextRenderTime, existing.nextRenderTime);
  assert.equal(next.fromSitemap, true);
  assert.equal(next.strikes, 2);
});

test('never demote: filing due-now keeps an earlier due time and its marks', () => {
  const earlier = startOfMinute(NOW) - 2 * HOUR;
  const existing = row({ nextRenderTime: earlier, urgentAt: NOW - 10 * HOUR });
  const next = upsertTarget(existing, { url: existing.cacheKey, dueAt: NOW }, NOW, cfg);
  assert.equal(next.nextRenderTime, earlier);
  assert.equal(next.urgentAt, NOW - 10 * HOUR);
  const unmarked = upsertTarget(
    row({ nextRenderTime: startOfMinute(NOW) + HOUR }),
    { url: existing.cacheKey, dueAt: NOW - MIN },
    NOW,
    cfg,
  );
  assert.equal(unmarked.nextRenderTime, startOfMinute(NOW - MIN));
  assert.equal(unmarked.urgentAt, NOW);
});

test('a future dueAt moves an unmarked row but never pushes back an urgent due row', () => {
  const plain = upsertTarget(row(), { url: row().cacheKey, dueAt: NOW + 5 * HOUR }, NOW, cfg);
  assert.equal(plain.nextRenderTime, startOfMinute(NOW + 5 * HOUR));
  const urgent = row({ nextRenderTime: startOfMinute(NOW) - MIN, urgentAt: NOW - MIN });
  const kept = upsertTarget(urgent, { url: urgent.cacheKey, dueAt: NOW + 5 * HOUR }, NOW, cfg);
  assert.equal(kept.nextRenderTime, urgent.nextRenderTime);
  assert.equal(kept.urgentAt, urgent.urgentAt);
});

test('changed: true makes the row due now with changedAt set', () => {
  const next = upsertTarget(row(), { url: row().cacheKey, changed: true }, NOW, cfg);
  assert.equal(next.nextRenderTime, startOfMinute(NOW));
  assert.equal(next.changedAt, NOW);
  const fresh = upsertTarget(undefined, { url: 'https://example.com/c', changed: true }, NOW, cfg);
  assert.equal(fresh.nextRenderTime, startOfMinute(NOW));
  assert.equal(fresh.changedAt, NOW);
});

test('discovered rows are unverified and spread like any new row', () => {
  const d = discoveredRow('https://example.com/d', NOW, cfg);
  assert.equal(d.verified, false);
  assert.equal(d.fromSitemap, false);
  assert.equal(d.nextRenderTime, spreadDue('https://example.com/d', NOW, DAY));
});

test('revalidate makes the row due now and urgent without demoting an earlier due time', () => {
  const r = revalidatedRow(row(), NOW);
  assert.equal(r.nextRenderTime, startOfMinute(NOW));
  assert.equal(r.urgentAt, NOW);
  const early = row({ nextRenderTime: startOfMinute(NOW) - DAY, urgentAt: 5 });
  assert.deepEqual(revalidatedRow(early, NOW), early);
});

test('after a success the row is due one cadence after the completion minute, strikes and marks cleared', () => {
  const r = afterSuccess(row({ strikes: 4, urgentAt: 1, changedAt: 2 }), NOW, 'rendered', 200, cfg);
  assert.equal(r.nextRenderTime, startOfMinute(NOW) + DAY);
  assert.equal(r.strikes, 0);
  assert.equal(r.urgentAt, null);
  assert.equal(r.changedAt, null);
  assert.equal(r.lastOutcome, 'rendered');
  assert.equal(r.lastRenderedAt, NOW);
  assert.equal(r.lastStatusCode, 200);
});

test('the first fastRetries failures leave the due time alone and keep the lease', () => {
  const first = afterFailure(row(), NOW, 500, cfg);
  assert.equal(first.keepLease, true);
  assert.equal(first.row.strikes, 1);
  assert.equal(first.row.nextRenderTime, row().nextRenderTime);
  const second = afterFailure(first.row, NOW, 500, cfg);
  assert.equal(second.keepLease, true);
  assert.equal(second.row.strikes, 2);
  const third = afterFailure(second.row, NOW, 500, cfg);
  assert.equal(third.keepLease, false);
  assert.equal(third.row.nextRenderTime, startOfMinute(NOW) + DAY);
});

test('the backoff table for strikes 1-8, sitemap and not, capped at 7 days and floored at the cadence', () => {
  const retry = cfg.render.failureRetry;
  const c = HOUR;
  // k = strikes - 3; sitemap: c * 2^k; non-sitemap: c * 2^k * 4 once k > 0; cap 7 d.
  const expected: Array<[number, number | null, number | null]> = [
    [1, null, null],
    [2, null, null],
    [3, c, c],
    [4, 2 * c, 8 * c],
    [5, 4 * c, 16 * c],
    [6, 8 * c, 32 * c],
    [7, 16 * c, 64 * c],
    [8, 32 * c, 128 * c],
  ];
  for (const [strikes, sitemap, other] of expected) {
    assert.equal(failureDelay(strikes, c, true, retry), sitemap, `sitemap strikes=${strikes}`);
    assert.equal(failureDelay(strikes, c, false, retry), other, `non-sitemap strikes=${strikes}`);
  }
  // Daily cadence: non-sitemap strikes 4 would be 8 days; capped at 7.
  assert.equal(failureDelay(4, DAY, false, retry), 7 * DAY);
  assert.equal(failureDelay(8, DAY, true, retry), 7 * DAY);
  // A cadence above the cap: never more often than a healthy page.
  assert.equal(failureDelay(3, 30 * DAY, true, retry), 30 * DAY);
  assert.equal(failureDelay(8, 30 * DAY, false, retry), 30 * DAY);
});

test('backoff follows the configured factor, penalty and fast-retry count', () => {
  const retry = { fastRetries: 0, backoffFactor: 3, maxBackoff: 100 * DAY, nonSitemapPenalty: 2 };
  assert.equal(failureDelay(1, HOUR, false, retry), HOUR);
  assert.equal(failureDelay(2, HOUR, false, retry), 3 * HOUR * 2);
  assert.equal(failureDelay(3, HOUR, true, retry), 9 * HOUR);
});

test('cadence: the route renderInterval wins, else the row, else the default', () => {
  const c = cfgWith({
    render: {
      routes: [
        { name: 'product', match: 'prefix', path: '/p/', renderInterval: 2 * HOUR },
        { name: 'home', match: 'exact', path: '/' },
      ],
    },
  });
  assert.equal(classifyUrl('https://example.com/p/1', 5 * HOUR, c).cadenceMs, 2 * HOUR);
  assert.equal(classifyUrl('https://example.com/', 5 * HOUR, c).cadenceMs, 5 * HOUR);
  assert.equal(classifyUrl('https://example.com/', null, c).cadenceMs, DAY);
  assert.equal(classifyUrl('https://example.com/other', null, c).cadenceMs, DAY);
});

test('queue of a row: first matching route name, exact or prefix on the pathname, else unrouted', () => {
  const routes = cfgWith({
    render: {
      routes: [
        { name: 'exact-p', match: 'exact', path: '/p' },
        { name: 'prefix-p', match: 'prefix', path: '/p' },
        { name: 'blog', match: 'prefix', path: '/blog/' },
      ],
    },
  }).render.routes;
  assert.equal(queueOf('https://example.com/p', routes), 'exact-p');
  assert.equal(queueOf('https://example.com/p?q=1', routes), 'exact-p');
  assert.equal(queueOf('https://example.com/p/2', routes), 'prefix-p');
  assert.equal(queueOf('https://example.com/blog/x', routes), 'blog');
  assert.equal(queueOf('https://example.com/blog', routes), 'unrouted');
  assert.equal(queueOf('https://example.com/', routes), 'unrouted');
  assert.deepEqual(classifyUrl('https://example.com/blog/x', 2 * HOUR, cfgWith({ render: { routes } })), {
    route: 'blog',
    cadenceMs: 2 * HOUR,
  });
});

test('a failure keeps its error (cut to 500 characters) and the start of the run of strikes; a success clears both', () => {
  const first = afterFailure(row(), NOW, 500, cfg, { name: 'TimeoutError', message: 'x'.repeat(800) }).row;
  assert.equal(first.failingSince, NOW);
  assert.deepEqual(first.lastError, { name: 'TimeoutError', message: 'x'.repeat(500) });
  const second = afterFailure(first, NOW + HOUR, 502, cfg, null).row;
  assert.equal(second.failingSince, NOW, 'the run began at the first strike');
  assert.equal(second.lastError, null, 'the last failure said nothing');
  const healed = afterSuccess(second, NOW + 2 * HOUR, 'rendered', 200, cfg);
  assert.equal(healed.failingSince, null);
  assert.equal(healed.lastError, null);
});
