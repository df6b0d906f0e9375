// Worker 0's maintenance tick on the duty scheduler, with a fake clock and a recording log: no sleeps,
// no Harper. (The scheduler's own rules — no overlap, failures isolated, quiet when nothing happened —
// are in dutyScheduler.test.ts.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyValues, checkPartial, defaultConfig } from '../../util/config/schema.js';
import { DutyScheduler, type Duty } from '../../util/duties/scheduler.js';
import { startMaintenance } from '../../util/duties/maintenance.js';
import { FakeClock } from '../fakeClock.js';

const T0 = 1_000_000;

function setup() {
  const clock = new FakeClock(T0);
  const lines: Array<{ level: string; msg: string; err?: unknown }> = [];
  const log = {
    debug: (msg: unknown) => void lines.push({ level: 'debug', msg: String(msg) }),
    error: (msg: unknown, err?: unknown) => void lines.push({ level: 'error', msg: String(msg), err }),
  };
  const scheduler = new DutyScheduler({ now: clock.now, timer: clock, log });
  let cfg = applyValues(defaultConfig(), checkPartial({ maintenance: { tickInterval: 30_000 } }).values);
  return {
    clock,
    lines,
    scheduler,
    tickInterval: () => cfg.maintenance.tickInterval,
    setTick: (ms: number) => {
      cfg = applyValues(cfg, checkPartial({ maintenance: { tickInterval: ms } }).values);
      scheduler.configChanged(['maintenance.tickInterval']);
    },
  };
}

function counting(name: string, result: Record<string, number> = {}) {
  const calls: number[] = [];
  const duty: Duty = {
    name,
    runOnce: async (now) => {
      calls.push(now);
      return result;
    },
  };
  return { duty, calls };
}

test('every maintenance.tickInterval each duty runs once, in turn, with the clock of that tick', async () => {
  const s = setup();
  const order: string[] = [];
  const a: Duty = { name: 'a', runOnce: async () => (order.push('a'), {}) };
  const b = counting('b');
  startMaintenance(s.scheduler, s.tickInterval, [a, b.duty]);
  assert.deepEqual(s.clock.armed, [{ at: T0 + 30_000, ms: 30_000 }]);
  await s.clock.advance(60_000);
  assert.deepEqual(b.calls, [T0 + 30_000, T0 + 60_000]);
  assert.deepEqual(order, ['a', 'a']);
});

test('a failing duty is logged under maintenance by name and the duties after it still run', async () => {
  const s = setup();
  const failure = new Error('ledger unreachable');
  const broken: Duty = {
    name: 'stall-sweep',
    runOnce: async () => {
      throw failure;
    },
  };
  const after = counting('secret-cleanup', { destroyed: 1 });
  startMaintenance(s.scheduler, s.tickInterval, [broken, after.duty]);
  await s.clock.advance(30_000);
  assert.deepEqual(s.lines, [
    { level: 'error', msg: 'maintenance stall-sweep failed', err: failure },
    { level: 'debug', msg: 'maintenance secret-cleanup destroyed=1' },
  ]);
});

test('a changed maintenance.tickInterval re-arms the waiting tick at once', async () => {
  const s = setup();
  const d = counting('d');
  startMaintenance(s.scheduler, s.tickInterval, [d.duty]);
  await s.clock.advance(10_000);
  s.setTick(5000);
  assert.deepEqual(s.clock.armed, [{ at: T0 + 15_000, ms: 5000 }], 'the old wait cleared, not doubled');
  await s.clock.advance(5000);
  assert.deepEqual(d.calls, [T0 + 15_000]);
});

test('after the handle stops, the tick runs no more', async () => {
  const s = setup();
  const d = counting('d');
  const tick = startMaintenance(s.scheduler, s.tickInterval, [d.duty]);
  await s.clock.advance(30_000);
  await tick.stop();
  await s.clock.advance(300_000);
  assert.equal(d.calls.length, 1);
  assert.equal(s.clock.armed.length, 0);
});
