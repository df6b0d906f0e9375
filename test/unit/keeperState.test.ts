import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { type Classify, KeeperCore, type ScheduleRow } from '../../util/keeper/core.js';
import { latenessBin, STATE_LIST_CAP } from '../../util/keeper/stateCounts.js';
import { markOf, type ScoreOptions } from '../../util/keeper/score.js';
import { MINUTE_MS, minuteOf } from '../../util/time.js';
import { heldRow } from '../fakeSchedule.js';

const HOUR = 60 * MINUTE_MS;
const DAY = 24 * HOUR;
const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);
const M0 = minuteOf(NOW);
const OPTIONS: ScoreOptions = { sitemapBoost: 2, urgentHeadStart: 1, changedHeadStart: 1 };

const classify: Classify = (url, own) => {
  const path = new URL(url).pathname;
  if (path.startsWith('/blog/')) return { route: 'blog', cadenceMs: HOUR };
  if (path.startsWith('/news/')) return { route: 'news', cadenceMs: own ?? DAY };
  return { route: 'unrouted', cadenceMs: own ?? DAY };
};

const keeper = (): KeeperCore => new KeeperCore({ classify, score: OPTIONS });

const row = heldRow;

describe('queue state counts', () => {
  it('counts held rows by verdict state, due or not, and a state change moves the row between the counts', () => {
    const core = keeper();
    core.apply('https://x.example/p/1', row('https://x.example/p/1', NOW - HOUR), NOW);
    core.apply(
      'https://x.example/p/2',
      row('https://x.example/p/2', NOW + DAY, { state: 'suppressed' }),
      NOW,
    );
    core.apply('https://x.example/p/3', row('https://x.example/p/3', NOW + DAY, { state: 'gone' }), NOW);
    core.apply('https://x.example/p/4', row('https://x.example/p/4', NOW - HOUR, { state: 'gone' }), NOW);
    assert.deepEqual(core.state(NOW).now.rowsByState, { active: 1, suppressed: 1, gone: 2 });
    // A verdict that only changes the state (same minute) is no match for the held row: it moves.
    const back = row('https://x.example/p/3', NOW + DAY, { state: 'active' });
    assert.equal(core.matches('https://x.example/p/3', back), false);
    assert.equal(core.apply('https://x.example/p/3', back, NOW), true);
    assert.deepEqual(core.state(NOW).now.rowsByState, { active: 2, suppressed: 1, gone: 1 });
    assert.equal(
      core.state(NOW).now.due,
      2,
      'a due gone row is still due: its recheck is claimed like any row',
    );
  });

  it('counts every figure of a hand-built table', () => {
    const core = keeper();
    const rows: ScheduleRow[] = [
      row('https://x.example/blog/a', NOW - 10 * MINUTE_MS), // 0.175 h late → bin 0
      row('https://x.example/blog/b', NOW - 30 * MINUTE_MS, { fromSitemap: true }), // bin 1
      row('https://x.example/blog/c', NOW - 90 * MINUTE_MS, { urgentAt: NOW }), // bin 2
      row('https://x.example/blog/d', NOW - 3 * HOUR, { fromSitemap: true, changedAt: NOW }), // bin 3
      row('https://x.example/blog/e', NOW - 5 * HOUR, { verified: false }), // bin 4
      row('https://x.example/news/f', NOW - 12 * HOUR, { fromSitemap: true }), // 0.5 day → bin 1
      row('https://x.example/p/g', NOW + 20_000, { effectiveInterval: 2 * HOUR }), // this minute → bin 0
      row('https://x.example/p/h', NOW + MINUTE_MS), // 30 s ahead
      row('https://x.example/p/i', NOW + 20 * MINUTE_MS), // 19.5 min ahead
      row('https://x.example/p/j', NOW + HOUR), // 59.5 min ahead
      row('https://x.example/p/k', NOW + HOUR + MINUTE_MS), // 60.5 min ahead → hour 1
      row('https://x.example/p/l', NOW + DAY), // 23 h 59.5 min ahead → hour 23
      row('https://x.example/p/m', NOW + DAY + HOUR), // beyond 24 h
      row('https://x.example/news/n', NOW + 15 * MINUTE_MS), // 14.5 min ahead
    ];
    for (const r of rows) core.apply(r.cacheKey, r, NOW);
    const now = NOW + 30_000;
    const state = core.state(now);

    assert.deepEqual(state.now, {
      due: 7,
      dueSitemap: 3,
      dueDiscovered: 4,
      dueUrgent: 2,
      rowsByState: { active: 14, suppressed: 0, gone: 0 },
    });
    const byHour = new Array<number>(24).fill(0);
    byHour[0] = 4;
    byHour[1] = 1;
    byHour[23] = 1;
    assert.deepEqual(state.coming, { next15m: 2, next60m: 4, byHour, next24h: 6 });
    assert.deepEqual(state.lateness.edges, [0.25, 1, 2, 4]);
    assert.deepEqual(state.lateness.sitemap, [0, 2, 0, 1, 0]);
    assert.deepEqual(state.lateness.discovered, [2, 0, 1, 0, 1]);
    assert.deepEqual(state.lateness.byRoute, [
      { route: 'blog', due: 5, sitemap: [0, 1, 0, 1, 0], discovered: [1, 0, 1, 0, 1] },
      { route: 'news', due: 1, sitemap: [0, 1, 0, 0, 0], discovered: [0, 0, 0, 0, 0] },
      { route: 'unrouted', due: 1, sitemap: [0, 0, 0, 0, 0], discovered: [1, 0, 0, 0, 0] },
    ]);
    const lateBy = (dueAt: number, cadence: number): number => (now - dueAt) / cadence;
    assert.deepEqual(state.lateness.classes, [
      {
        route: 'blog',
        cadenceMs: HOUR,
        fromSitemap: false,
        rows: 3,
        due: 3,
        oldestDueAt: NOW - 5 * HOUR,
        oldestLatenessCadences: lateBy(NOW - 5 * HOUR, HOUR),
      },
      {
        route: 'blog',
        cadenceMs: HOUR,
        fromSitemap: true,
        rows: 2,
        due: 2,
        oldestDueAt: NOW - 3 * HOUR,
        oldestLatenessCadences: lateBy(NOW - 3 * HOUR, HOUR),
      },
      {
        route: 'news',
        cadenceMs: DAY,
        fromSitemap: true,
        rows: 1,
        due: 1,
        oldestDueAt: NOW - 12 * HOUR,
        oldestLatenessCadences: lateBy(NOW - 12 * HOUR, DAY),
      },
      {
        route: 'unrouted',
        cadenceMs: 2 * HOUR,
        fromSitemap: false,
        rows: 1,
        due: 1,
        oldestDueAt: NOW,
        oldestLatenessCadences: lateBy(NOW, 2 * HOUR),
      },
      {
        route: 'unrouted',
        cadenceMs: DAY,
        fromSitemap: false,
        rows: 6,
        due: 0,
        oldestDueAt: null,
        oldestLatenessCadences: null,
      },
      {
        route: 'news',
        cadenceMs: DAY,
        fromSitemap: false,
        rows: 1,
        due: 0,
        oldestDueAt: null,
        oldestLatenessCadences: null,
      },
    ]);
    assert.equal(state.lateness.listsTruncated, false);
    assert.equal(state.flow.length, 60);
    assert.equal(state.flow.at(-1)?.minute, M0);
    assert.equal(state.flow.at(-1)?.added, 14);
  });

  it('bins lateness at the edges [0.25, 1, 2, 4] with the lower edge inclusive', () => {
    assert.deepEqual(
      [0, 0.2499, 0.25, 0.999, 1, 1.99, 2, 3.99, 4, 1e9].map(latenessBin),
      [0, 0, 1, 1, 2, 2, 3, 3, 4, 4],
    );
  });

  it(`caps the route and class lists at ${STATE_LIST_CAP} and says so`, () => {
    const perPath: Classify = (url) => ({ route: new URL(url).pathname, cadenceMs: HOUR });
    const core = new KeeperCore({ classify: perPath, score: OPTIONS });
    for (let i = 0; i <= STATE_LIST_CAP; i++)
      core.apply(`https://x.example/r${i}`, row(`https://x.example/r${i}`, NOW - i * MINUTE_MS), NOW);
    const { lateness } = core.state(NOW);
    assert.equal(lateness.byRoute.length, STATE_LIST_CAP);
    assert.equal(lateness.classes.length, STATE_LIST_CAP);
    assert.equal(lateness.listsTruncated, true);
    // Worst first: the most overdue route leads, the freshest one is the one cut.
    assert.equal(lateness.classes[0]?.route, `/r${STATE_LIST_CAP}`);
    assert.ok(!lateness.classes.some((c) => c.route === '/r0'));
  });

  it('equals a row-by-row count of the same rows (property)', () => {
    const rowArb = fc.record({
      cacheKey: fc
        .constantFrom('blog/', 'news/', 'p/')
        .chain((p) => fc.nat(2000).map((n) => `https://x.example/${p}${n}`)),
      nextRenderTime: fc.integer({ min: -3 * DAY, max: 2 * DAY }).map((d) => NOW + d),
      fromSitemap: fc.boolean(),
      effectiveInterval: fc.constantFrom(null, MINUTE_MS, HOUR, 3 * DAY, 0),
      verified: fc.boolean(),
      urgentAt: fc.option(fc.constant(1), { freq: 5 }),
      changedAt: fc.option(fc.constant(2), { freq: 5 }),
    });
    fc.assert(
      fc.property(
        fc.array(rowArb, { maxLength: 1500, size: 'max' }),
        fc.integer({ min: -DAY, max: DAY }),
        (rows, shift) => {
          const core = keeper();
          const model = new Map<string, ScheduleRow>();
          for (const r of rows) {
            core.apply(r.cacheKey, r, NOW);
            model.set(r.cacheKey, r);
          }
          const now = NOW + shift;
          const state = core.state(now);
          const expectNow = {
            due: 0,
            dueSitemap: 0,
            dueDiscovered: 0,
            dueUrgent: 0,
            rowsByState: { active: model.size, suppressed: 0, gone: 0 },
          };
          const coming = { next15m: 0, next60m: 0, byHour: new Array<number>(24).fill(0), next24h: 0 };
          const sitemap = [0, 0, 0, 0, 0];
          const discovered = [0, 0, 0, 0, 0];
          const routeDue = new Map<string, number>();
          for (const r of model.values()) {
            const dueMs = minuteOf(r.nextRenderTime) * MINUTE_MS;
            const { route, cadenceMs } = classify(r.cacheKey, r.effectiveInterval);
            if (dueMs <= now) {
              expectNow.due++;
              if (r.fromSitemap) expectNow.dueSitemap++;
              else expectNow.dueDiscovered++;
              if (markOf(r.urgentAt, r.changedAt) !== 'none') expectNow.dueUrgent++;
              const late = cadenceMs > 0 ? (now - dueMs) / cadenceMs : now - dueMs;
              (r.fromSitemap ? sitemap : discovered)[latenessBin(late)]!++;
              routeDue.set(route, (routeDue.get(route) ?? 0) + 1);
            } else {
              const ahead = dueMs - now;
              if (ahead < 15 * MINUTE_MS) coming.next15m++;
              if (ahead < HOUR) coming.next60m++;
              if (ahead < DAY) {
                coming.byHour[Math.floor(ahead / HOUR)]!++;
                coming.next24h++;
              }
            }
          }
          assert.deepEqual(state.now, expectNow);
          assert.deepEqual(state.coming, coming);
          assert.deepEqual(state.lateness.sitemap, sitemap);
          assert.deepEqual(state.lateness.discovered, discovered);
          for (const entry of state.lateness.byRoute) assert.equal(entry.due, routeDue.get(entry.route) ?? 0);
          assert.equal(
            state.lateness.classes.reduce((sum, c) => sum + c.rows, 0),
            model.size,
          );
          const worst = state.lateness.classes.map((c) => c.oldestLatenessCadences ?? -1);
          assert.deepEqual(
            worst,
            [...worst].sort((a, b) => b - a),
          );
          assert.equal(core.dueSummary(now).due, expectNow.due);
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('flow counters', () => {
  const flowAt = (core: KeeperCore, now: number, minute: number) =>
    core.state(now).flow.find((f) => f.minute === minute);

  it('counts added, rescheduled, triggered, removed and cameDue in the minute they happen', () => {
    const core = keeper();
    const a = 'https://x.example/p/a';
    const b = 'https://x.example/p/b';
    const c = 'https://x.example/p/c';
    core.apply(a, row(a, NOW + 2 * MINUTE_MS), NOW);
    core.apply(b, row(b, NOW + 2 * MINUTE_MS), NOW);
    core.apply(c, row(c, NOW + 5 * MINUTE_MS), NOW);
    assert.equal(core.tick(NOW), 0);

    const t1 = NOW + MINUTE_MS;
    core.apply(a, row(a, NOW + 2 * MINUTE_MS), t1); // no change: counts nothing
    core.apply(a, row(a, NOW + 10 * MINUTE_MS), t1); // later → rescheduled
    core.apply(c, row(c, NOW + 5 * MINUTE_MS, { urgentAt: t1 }), t1); // gained a mark → triggered
    core.apply(c, row(c, NOW + 5 * MINUTE_MS, { urgentAt: t1, changedAt: t1 }), t1); // urgent already: no count

    assert.equal(core.tick(NOW + 2 * MINUTE_MS), 1); // b came due; a moved away before its minute

    const t3 = NOW + 3 * MINUTE_MS;
    const d = 'https://x.example/p/d';
    core.apply(b, null, t3); // removed
    core.apply(b, null, t3); // nothing held: no count
    core.apply(d, row(d, NOW + 30 * MINUTE_MS), t3); // added
    core.apply(d, row(d, NOW + 20 * MINUTE_MS), t3); // earlier but not due: neither
    core.apply(d, row(d, NOW - MINUTE_MS), t3); // earlier and now due → triggered
    core.apply(d, row(d, NOW - 2 * MINUTE_MS), t3); // already due, earlier again: neither
    core.apply(d, row(d, t3 + HOUR), t3); // later → rescheduled

    assert.equal(core.tick(NOW + 5 * MINUTE_MS), 1); // c
    assert.equal(core.tick(NOW + 15 * MINUTE_MS), 1); // a

    const now = NOW + 15 * MINUTE_MS;
    const blank = { cameDue: 0, added: 0, triggered: 0, rescheduled: 0, removed: 0 };
    assert.deepEqual(flowAt(core, now, M0), { ...blank, minute: M0, added: 3 });
    assert.deepEqual(flowAt(core, now, M0 + 1), { ...blank, minute: M0 + 1, rescheduled: 1, triggered: 1 });
    assert.deepEqual(flowAt(core, now, M0 + 2), { ...blank, minute: M0 + 2, cameDue: 1 });
    assert.deepEqual(flowAt(core, now, M0 + 3), {
      ...blank,
      minute: M0 + 3,
      added: 1,
      removed: 1,
      triggered: 1,
      rescheduled: 1,
    });
    assert.deepEqual(flowAt(core, now, M0 + 4), { ...blank, minute: M0 + 4 });
    assert.deepEqual(flowAt(core, now, M0 + 5), { ...blank, minute: M0 + 5, cameDue: 1 });
    assert.deepEqual(flowAt(core, now, M0 + 15), { ...blank, minute: M0 + 15, cameDue: 1 });
  });

  it('reports the last hour oldest first and forgets what is older', () => {
    const core = keeper();
    core.apply('https://x.example/p/a', row('https://x.example/p/a', NOW + DAY), NOW);
    const flow = core.state(NOW + 10 * MINUTE_MS).flow;
    assert.deepEqual(
      flow.map((f) => f.minute),
      Array.from({ length: 60 }, (_, i) => M0 + 10 - 59 + i),
    );
    assert.equal(flow.find((f) => f.minute === M0)?.added, 1);
    const later = core.state(NOW + 70 * MINUTE_MS).flow;
    assert.equal(later[0]?.minute, M0 + 11);
    assert.ok(later.every((f) => f.added === 0));
    // A write stamped in an already-recycled minute is dropped rather than counted in the wrong one.
    core.apply('https://x.example/p/b', row('https://x.example/p/b', NOW + DAY), NOW + 5 * MINUTE_MS);
    core.apply('https://x.example/p/c', row('https://x.example/p/c', NOW + DAY), NOW + 65 * MINUTE_MS);
    core.apply('https://x.example/p/d', row('https://x.example/p/d', NOW + DAY), NOW + 5 * MINUTE_MS);
    assert.equal(core.state(NOW + 65 * MINUTE_MS).flow.at(-1)?.added, 1);
  });

  it('counts a row that comes due once, even when the clock steps back and forward again over it', () => {
    const core = keeper();
    core.apply('https://x.example/p/a', row('https://x.example/p/a', NOW + 2 * MINUTE_MS), NOW);
    assert.equal(core.tick(NOW + 3 * MINUTE_MS), 1);
    assert.equal(core.dueSummary(NOW).due, 0);
    assert.equal(core.tick(NOW + 3 * MINUTE_MS), 0);
    assert.equal(core.dueSummary(NOW + 3 * MINUTE_MS).due, 1);
    assert.equal(core.state(NOW + 3 * MINUTE_MS).flow.at(-1)?.cameDue, 1);
  });
});
