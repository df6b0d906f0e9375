// The keeper's publish decision (util/keeper/publishPlan.ts) over plain state and a fake clock.
import assert from 'node:assert/strict';
import test from 'node:test';
import fc from 'fast-check';
import {
  EARLY_MIN_MS,
  FORCED_PUBLISH_MS,
  MINUTE_MS,
  MINUTE_SLACK_MS,
  STAGE_LEAD_MS,
  STAGE_USE_MS,
  planPublish,
  type PublishState,
} from '../../util/keeper/publishPlan.js';

const T0 = Date.UTC(2026, 11, 4, 12, 0, 0); // a minute boundary
const live = (over: Partial<PublishState> = {}): PublishState => ({
  serving: true,
  timed: true,
  loadComplete: true,
  interval: 1000,
  lastPublishAt: T0 + 10,
  lastEarlyAt: -Infinity,
  lastCostMs: 2,
  lastTickAt: T0 + 10,
  changed: false,
  soon: false,
  stagedAt: null,
  stageTriedFor: -1,
  ...over,
});

test('the refresh publishes each interval only when something changed, and at least every 10 s', () => {
  assert.equal(planPublish(live(), T0 + 500).action, 'wait');
  assert.equal(planPublish(live(), T0 + 500).next, T0 + 1010, 'looks again at the next refresh');
  const quiet = planPublish(live(), T0 + 1010);
  assert.deepEqual([quiet.action, quiet.tick], ['heartbeat', true]);
  assert.equal(planPublish(live({ changed: true }), T0 + 1010).action, 'publish');
  const old = live({ lastPublishAt: T0 + 10, lastTickAt: T0 + 9_000 });
  assert.equal(planPublish(old, T0 + 10 + FORCED_PUBLISH_MS).action, 'publish', 'forced after 10 s');
});

test('the due instant publishes once the minute has begun, unless a publish already ran at or after the boundary', () => {
  const s = live({ lastPublishAt: T0 + 59_000, lastTickAt: T0 + 59_700 });
  const before = planPublish(s, T0 + MINUTE_MS + 1);
  assert.equal(before.action, 'wait');
  assert.equal(before.next, T0 + MINUTE_MS + MINUTE_SLACK_MS, 'it looks again at the due instant');
  assert.equal(planPublish(s, T0 + MINUTE_MS + MINUTE_SLACK_MS).action, 'publish');
  const atBoundary = live({ lastPublishAt: T0 + MINUTE_MS, lastTickAt: T0 + MINUTE_MS });
  assert.equal(planPublish(atBoundary, T0 + MINUTE_MS + MINUTE_SLACK_MS).action, 'wait');
});

test('the minute publish is staged once per boundary, STAGE_LEAD_MS ahead, and flipped at its instant while fresh', () => {
  const lead = T0 + MINUTE_MS - STAGE_LEAD_MS;
  const s = live({ lastPublishAt: lead - 300, lastTickAt: lead - 300 });
  assert.equal(planPublish(s, lead - 1).next, lead, 'it looks again when the stage is due');
  const stage = planPublish(s, lead);
  assert.deepEqual([stage.action, stage.at], ['stage', T0 + MINUTE_MS + MINUTE_SLACK_MS]);
  assert.equal(planPublish({ ...s, stageTriedFor: T0 + MINUTE_MS }, lead).action, 'wait', 'one try');
  assert.equal(planPublish({ ...s, loadComplete: false }, lead).action, 'wait', 'not while loading');
  const staged = { ...s, stagedAt: T0 + MINUTE_MS + MINUTE_SLACK_MS, stageTriedFor: T0 + MINUTE_MS };
  const ahead = planPublish(staged, lead + 100);
  assert.deepEqual([ahead.action, ahead.next], ['wait', T0 + MINUTE_MS + MINUTE_SLACK_MS]);
  assert.equal(planPublish(staged, T0 + MINUTE_MS + MINUTE_SLACK_MS).action, 'flip');
  const late = planPublish(staged, T0 + MINUTE_MS + MINUTE_SLACK_MS + STAGE_USE_MS);
  assert.deepEqual([late.action, late.dropStage], ['publish', true], 'too late: walked afresh');
});

test('while a stage waits for its boundary, a refresh writes only the heartbeat and an early publish takes the slot', () => {
  const stagedAt = T0 + MINUTE_MS + MINUTE_SLACK_MS;
  const s = live({ lastPublishAt: T0 + 59_000, lastTickAt: T0 + 58_700, stagedAt, changed: true });
  assert.deepEqual(
    [planPublish(s, T0 + 59_700).action, planPublish(s, T0 + 59_700).dropStage],
    ['heartbeat', false],
  );
  const early = planPublish({ ...s, soon: true }, T0 + 59_700);
  assert.deepEqual([early.action, early.dropStage], ['publish', true]);
});

test('early publishes keep max(50 ms, 4 × the last cost) after the last early one, capped at the interval', () => {
  const s = live({ soon: true, lastEarlyAt: T0 + 100, lastPublishAt: T0 + 100 });
  assert.equal(planPublish(s, T0 + 100 + EARLY_MIN_MS - 1).action, 'wait');
  assert.equal(planPublish(s, T0 + 100 + EARLY_MIN_MS - 1).next, T0 + 100 + EARLY_MIN_MS);
  assert.equal(planPublish(s, T0 + 100 + EARLY_MIN_MS).action, 'publish');
  const slow = { ...s, lastCostMs: 60 };
  assert.equal(planPublish(slow, T0 + 100 + 239).action, 'wait');
  assert.equal(planPublish(slow, T0 + 100 + 240).action, 'publish');
  const verySlow = { ...s, lastCostMs: 5_000 };
  assert.equal(
    planPublish(verySlow, T0 + 100 + 1000).action,
    'publish',
    'never further apart than the interval',
  );
  assert.equal(
    planPublish({ ...s, lastEarlyAt: -Infinity }, T0 + 101).action,
    'publish',
    'the first at once',
  );
});

test('before the keeper is live only an early publish is planned; a keeper not serving drops its stage', () => {
  const loading = live({ timed: false, changed: true, lastTickAt: -Infinity });
  assert.deepEqual(
    [planPublish(loading, T0 + 30_000).action, planPublish(loading, T0 + 30_000).next],
    ['wait', Infinity],
  );
  assert.equal(planPublish({ ...loading, soon: true }, T0 + 30_000).action, 'publish');
  const lost = planPublish(live({ serving: false, stagedAt: T0 + MINUTE_MS + 5 }), T0 + 2_000);
  assert.deepEqual([lost.action, lost.dropStage, lost.tick], ['heartbeat', true, true]);
});

test('over random states and instants, a plan never waits past what it must do next', () => {
  fc.assert(
    fc.property(
      fc.record({
        lastPublish: fc.integer({ min: 0, max: 120_000 }),
        sinceTick: fc.integer({ min: 0, max: 5_000 }),
        sinceEarly: fc.option(fc.integer({ min: 0, max: 5_000 })),
        cost: fc.integer({ min: 0, max: 400 }),
        changed: fc.boolean(),
        soon: fc.boolean(),
        staged: fc.boolean(),
        tried: fc.boolean(),
        after: fc.integer({ min: 0, max: 3_000 }),
      }),
      (r) => {
        const now = T0 + r.lastPublish + r.after;
        const nextBoundary = (Math.floor(now / MINUTE_MS) + 1) * MINUTE_MS;
        const s = live({
          lastPublishAt: T0 + r.lastPublish,
          lastTickAt: Math.min(now, T0 + r.lastPublish + r.sinceTick),
          lastEarlyAt: r.sinceEarly === null ? -Infinity : now - r.sinceEarly,
          lastCostMs: r.cost,
          changed: r.changed,
          soon: r.soon,
          stagedAt: r.staged ? nextBoundary + MINUTE_SLACK_MS : null,
          stageTriedFor: r.tried || r.staged ? nextBoundary : -1,
        });
        const p = planPublish(s, now);
        if (p.action !== 'wait') return;
        assert.ok(p.next > now, 'a wait ends after now');
        assert.ok(p.next <= s.lastTickAt + s.interval, 'never past the next refresh');
        const dueInstant = Math.floor(now / MINUTE_MS) * MINUTE_MS + MINUTE_SLACK_MS;
        if (now < dueInstant && s.lastPublishAt < dueInstant - MINUTE_SLACK_MS)
          assert.ok(p.next <= dueInstant, 'never past the due instant');
        assert.ok(p.next <= nextBoundary + MINUTE_SLACK_MS, 'never past the next due instant');
      },
    ),
  );
});
