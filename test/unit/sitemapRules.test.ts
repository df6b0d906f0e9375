// The sitemap walk's pure rules: changefreq as a cadence, lastmod, the host rule, the frontier, the
// removal share, the URL set, and what a listed or leaving URL does to its row
// (util/schedule/sitemapRules.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyValues, checkPartial, defaultConfig } from '../../util/config/schema.js';
import { upsertTarget, type ScheduleRow } from '../../util/schedule/rules.js';
import { listedRow, unlinkedRow } from '../../util/schedule/sitemapRules.js';
import { changefreqCadence, locProblem, parseLastmod } from '../../util/sitemaps/entries.js';
import { nextRefreshAt } from '../../util/sitemaps/refreshPlan.js';
import { UrlSet } from '../../util/sitemaps/urlSet.js';
import { Frontier, removalRefusal } from '../../util/sitemaps/walkPlan.js';
import { startOfMinute } from '../../util/time.js';

import { scheduleRow } from '../scheduleRow.js';

const HOUR = 3_600_000;
const DAY = 86_400_000;
const NOW = Date.UTC(2026, 11, 7, 12, 30, 17, 123);
const cfg = defaultConfig();
const URL_A = 'https://example.com/a';

function row(over: Partial<ScheduleRow> = {}): ScheduleRow {
  return scheduleRow(URL_A, NOW + DAY, {
    fromSitemap: true,
    effectiveInterval: DAY,
    lastOutcome: 'rendered',
    lastRenderedAt: NOW - HOUR,
    lastStatusCode: 200,
    sitemapId: 'sm1',
    sitemapLastmod: null,
    ...over,
  });
}

test('changefreq maps to a cadence floored at sitemaps.minCadence; unknown values give none', () => {
  const floor = 6 * HOUR;
  assert.equal(changefreqCadence('always', floor), 6 * HOUR);
  assert.equal(changefreqCadence('hourly', floor), 6 * HOUR);
  assert.equal(changefreqCadence('hourly', HOUR), HOUR);
  assert.equal(changefreqCadence(' Daily ', floor), DAY);
  assert.equal(changefreqCadence('weekly', floor), 7 * DAY);
  assert.equal(changefreqCadence('monthly', floor), 30 * DAY);
  assert.equal(changefreqCadence('yearly', floor), 365 * DAY);
  assert.equal(changefreqCadence('never', floor), 365 * DAY);
  assert.equal(changefreqCadence('sometimes', floor), undefined);
  assert.equal(changefreqCadence(undefined, floor), undefined);
});

test('lastmod reads every W3C datetime form; anything else is ignored', () => {
  assert.equal(parseLastmod('2026-01-02'), Date.UTC(2026, 0, 2));
  assert.equal(parseLastmod('2026-01'), Date.UTC(2026, 0, 1));
  assert.equal(parseLastmod('2026'), Date.UTC(2026, 0, 1));
  assert.equal(parseLastmod('2026-01-02T03:04:05+01:00'), Date.UTC(2026, 0, 2, 2, 4, 5));
  assert.equal(parseLastmod('2026-01-02T03:04:05.678Z'), Date.UTC(2026, 0, 2, 3, 4, 5, 678));
  assert.equal(parseLastmod('2026-01-02T03:04Z'), Date.UTC(2026, 0, 2, 3, 4));
  assert.equal(parseLastmod('yesterday'), undefined);
  assert.equal(parseLastmod('2026-13-45'), undefined);
});

test('a <loc> is checked as a target is, and must be on the sitemap host (port included) or an allowed host', () => {
  assert.equal(locProblem('https://example.com/a', 'example.com', []), null);
  assert.match(locProblem('https://example.com:8443/a', 'example.com', []) ?? '', /host/);
  assert.match(locProblem('https://evil.example/a', 'example.com', []) ?? '', /host/);
  assert.equal(locProblem('https://cdn.example.com/a', 'example.com', ['cdn.example.com']), null);
  assert.match(locProblem('ftp://example.com/a', 'example.com', []) ?? '', /http/);
  assert.match(locProblem('https://example.com/a b', 'example.com', []) ?? '', /whitespace/);
});

test('the frontier is breadth first, refuses a file seen before, one too deep, and one past the file limit', () => {
  const f = new Frontier('r', { maxDepth: 2, maxFiles: 5 });
  assert.deepEqual(f.next(), { url: 'r', depth: 0 });
  assert.equal(f.offer('a', 1), null);
  assert.equal(f.offer('b', 1), null);
  assert.equal(f.offer('r', 1), 'cycle', 'an index that lists its root');
  assert.equal(f.next()?.url, 'a');
  assert.equal(f.offer('a2', 2), null);
  assert.equal(f.offer('a3', 3), 'depth');
  assert.equal(f.offer('a', 2), 'cycle');
  assert.equal(f.next()?.url, 'b', 'a sibling before a grandchild');
  assert.equal(f.offer('b2', 2), null);
  assert.equal(f.offer('b3', 2), 'root_file_limit');
  assert.equal(f.next()?.url, 'a2');
  assert.equal(f.next()?.url, 'b2');
  assert.equal(f.next(), undefined);
});

test('removal: at most sitemaps.maxRemovalShare of the owned URLs, unless allowLargeRemoval', () => {
  assert.equal(removalRefusal(0, 0, 0.1, false), null);
  assert.equal(removalRefusal(10, 100, 0.1, false), null);
  assert.match(removalRefusal(11, 100, 0.1, false) ?? '', /11 of 100/);
  assert.equal(removalRefusal(11, 100, 0.1, true), null);
  assert.notEqual(removalRefusal(1, 0, 0.1, false), null, 'removing from nothing owned is all of it');
});

test('the URL set remembers a million URLs and never forgets one', () => {
  const s = new UrlSet();
  for (let i = 0; i < 200_000; i++) assert.equal(s.add(`https://example.com/p/${i}`), true);
  assert.equal(s.size, 200_000);
  for (let i = 0; i < 200_000; i += 997) assert.equal(s.has(`https://example.com/p/${i}`), true);
  assert.equal(s.add('https://example.com/p/5'), false);
  assert.equal(s.has('https://example.com/q/5'), false);
});

test('a new URL is filed from the sitemap: fromSitemap, its cadence, its sitemap and lastmod, spread over its cadence', () => {
  const r = listedRow(undefined, { url: URL_A, cadenceMs: 7 * DAY, lastmod: NOW - DAY }, 'sm1', NOW, cfg);
  assert.equal(r.outcome, 'filed');
  assert.equal(r.row?.fromSitemap, true);
  assert.equal(r.row?.verified, true);
  assert.equal(r.row?.effectiveInterval, 7 * DAY);
  assert.equal(r.row?.sitemapId, 'sm1');
  assert.equal(r.row?.sitemapLastmod, NOW - DAY);
  assert.equal(r.row?.changedAt, null, 'a row never rendered is not marked');
  assert.ok(r.row!.nextRenderTime >= startOfMinute(NOW) && r.row!.nextRenderTime < NOW + 7 * DAY);
  const none = listedRow(undefined, { url: URL_A }, 'sm1', NOW, cfg);
  assert.equal(none.row?.effectiveInterval, null, 'no cadence: the default applies at read time');
});

test('a row of this sitemap seen again unchanged is not written', () => {
  const r = listedRow(row(), { url: URL_A, cadenceMs: DAY }, 'sm1', NOW, cfg);
  assert.deepEqual(r, { row: undefined, outcome: 'unchanged' });
  const cadence = listedRow(row(), { url: URL_A, cadenceMs: 7 * DAY }, 'sm1', NOW, cfg);
  assert.equal(cadence.outcome, 'updated');
  assert.equal(cadence.row?.effectiveInterval, 7 * DAY);
});

test('a URL another sitemap listed first is left alone', () => {
  const r = listedRow(
    row({ sitemapId: 'other' }),
    { url: URL_A, cadenceMs: HOUR, lastmod: NOW },
    'sm1',
    NOW,
    cfg,
  );
  assert.deepEqual(r, { row: undefined, outcome: 'otherSitemap' });
});

test("a feeder's row is linked to the first sitemap that lists it, its schedule kept", () => {
  const feeders = upsertTarget(undefined, { url: URL_A, cadenceMs: 2 * DAY }, NOW - DAY, cfg);
  const r = listedRow(feeders, { url: URL_A }, 'sm1', NOW, cfg);
  assert.equal(r.outcome, 'linked');
  assert.equal(r.row?.sitemapId, 'sm1');
  assert.equal(r.row?.fromSitemap, true);
  assert.equal(r.row?.effectiveInterval, 2 * DAY, 'the sitemap names no cadence: the row keeps its own');
  assert.equal(r.row?.nextRenderTime, feeders.nextRenderTime);
  // A feeder re-filing it keeps the link.
  assert.equal(upsertTarget(r.row, { url: URL_A, cadenceMs: DAY }, NOW, cfg).sitemapId, 'sm1');
});

test('a lastmod later than the last render makes the row due now and changed, once per new lastmod', () => {
  const marked = listedRow(row(), { url: URL_A, cadenceMs: DAY, lastmod: NOW - 60_000 }, 'sm1', NOW, cfg);
  assert.equal(marked.outcome, 'changed');
  assert.equal(marked.row?.nextRenderTime, startOfMinute(NOW));
  assert.equal(marked.row?.changedAt, NOW);
  assert.equal(marked.row?.sitemapLastmod, NOW - 60_000);
  // The same lastmod again: nothing, even before the row is rendered.
  const again = listedRow(
    marked.row,
    { url: URL_A, cadenceMs: DAY, lastmod: NOW - 60_000 },
    'sm1',
    NOW + HOUR,
    cfg,
  );
  assert.equal(again.outcome, 'unchanged');
  assert.equal(again.row, undefined);
  // Older than the last render: recorded, not marked.
  const older = listedRow(row(), { url: URL_A, cadenceMs: DAY, lastmod: NOW - 2 * HOUR }, 'sm1', NOW, cfg);
  assert.equal(older.row?.changedAt, null);
  assert.equal(older.row?.sitemapLastmod, NOW - 2 * HOUR);
  assert.equal(older.row?.nextRenderTime, NOW + DAY);
});

test('a future lastmod counts as now, and marks the row only once', () => {
  const future = NOW + 30 * DAY;
  const first = listedRow(row(), { url: URL_A, cadenceMs: DAY, lastmod: future }, 'sm1', NOW, cfg);
  assert.equal(first.outcome, 'changed');
  assert.equal(first.row?.sitemapLastmod, future);
  // Rendered after that, then the same future lastmod again: "now" is past the render, but not new.
  const rendered = { ...first.row!, changedAt: null, lastRenderedAt: NOW + HOUR, nextRenderTime: NOW + DAY };
  const again = listedRow(
    rendered,
    { url: URL_A, cadenceMs: DAY, lastmod: future },
    'sm1',
    NOW + 2 * HOUR,
    cfg,
  );
  assert.equal(again.outcome, 'unchanged');
});

test("a row that left its sitemap is unlinked with its own cadence; another sitemap's row is not touched", () => {
  const r = unlinkedRow(row({ effectiveInterval: 7 * DAY }), 'sm1');
  assert.equal(r?.fromSitemap, false);
  assert.equal(r?.sitemapId, null);
  assert.equal(r?.effectiveInterval, 7 * DAY);
  assert.equal(unlinkedRow(row({ sitemapId: 'other' }), 'sm1'), undefined);
  assert.equal(unlinkedRow(row({ sitemapId: undefined, fromSitemap: true }), 'sm1'), undefined);
});

test('the refresh runs at each cron instant in its time zone', () => {
  const at = nextRefreshAt('0 3 * * *', 'UTC', NOW);
  assert.equal(at, Date.UTC(2026, 11, 8, 3, 0));
  const berlin = nextRefreshAt('0 3 * * *', 'Europe/Berlin', NOW);
  assert.equal(berlin, Date.UTC(2026, 11, 8, 2, 0));
  const cfgEvery = applyValues(
    defaultConfig(),
    checkPartial({ sitemaps: { refresh: '*/5 * * * *' } }).values,
  );
  assert.equal(cfgEvery.sitemaps.refresh, '*/5 * * * *');
  assert.throws(() => checkPartial({ sitemaps: { refresh: 'every day' } }), /sitemaps.refresh/);
  assert.throws(() => checkPartial({ sitemaps: { timezone: 'Mars/Olympus' } }), /sitemaps.timezone/);
});
