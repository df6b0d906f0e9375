// The maintenance tick with a fake timer, a fake clock and a recording log: no sleeps, no Harper.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MaintenanceTick, type Duty, type TickTimer } from '../../services/keeper/maintenance.js';

class FakeTimer implements TickTimer {
  armed: Array<{ id: number; fn: () => void; ms: number }> = [];
  private nextId = 1;
  set(fn: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.armed.push({ id, fn, ms });
    return id;
  }
  clear(handle: unknown): void {
    this.armed = this.armed.filter((a) => a.id !== handle);
  }
  /** Fires the one armed callback, as the real timer would after its wait. */
  fire(): void {
    assert.equal(this.armed.length, 1, 'exactly one tick is armed');
    const [a] = this.armed.splice(0, 1);
    a!.fn();
  }
}

function recordingLog() {
  const lines: Array<{ level: string; msg: string; err?: unknown }> = [];
  return {
    lines,
    debug: (msg: unknown) => lines.push({ level: 'debug', msg: String(msg) }),
    error: (msg: unknown, err?: unknown) => lines.push({ level: 'error', msg: String(msg), err }),
  };
}

function countingDuty(name: string, result: Record<string, number> = {}) {
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

/** Lets the promise chain of a fired tick run to the end (duties here resolve at once). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

function setup(duties: Duty[], interval = () => 30_000) {
  const timer = new FakeTimer();
  const log = recordingLog();
  let now = 1_000_000;
  const tick = new MaintenanceTick({ duties, interval, clock: () => now, timer, log });
  return { tick, timer, log, advance: (ms: number) => (now += ms), now: () => now };
}

test('every tick runs each duty once with the clock of that tick, and arms the next tick afterwards', async () => {
  const a = countingDuty('a');
  const b = countingDuty('b');
  const s = setup([a.duty, b.duty]);
  s.tick.start();
  assert.equal(s.timer.armed[0]!.ms, 30_000);
  s.timer.fire();
  await settle();
  s.advance(30_000);
  s.timer.fire();
  await settle();
  assert.deepEqual(a.calls, [1_000_000, 1_030_000]);
  assert.deepEqual(b.calls, [1_000_000, 1_030_000]);
  assert.equal(s.timer.armed.length, 1, 'the following tick is armed');
});

test('a throwing duty is logged by name and the duties after it still run, this tick and the next', async () => {
  const failure = new Error('ledger unreachable');
  const broken: Duty = {
    name: 'stall-sweep',
    runOnce: async () => {
      throw failure;
    },
  };
  const after = countingDuty('secret-cleanup');
  const s = setup([broken, after.duty]);
  s.tick.start();
  s.timer.fire();
  await settle();
  assert.deepEqual(s.log.lines, [
    { level: 'error', msg: 'maintenance duty stall-sweep failed', err: failure },
  ]);
  assert.equal(after.calls.length, 1);
  s.timer.fire();
  await settle();
  assert.equal(after.calls.length, 2, 'a failure never stops the tick');
});

test('two ticks never overlap: no tick is armed while a duty runs, and a manual tick meanwhile runs nothing', async () => {
  let release!: () => void;
  let runs = 0;
  const slow: Duty = {
    name: 'slow',
    runOnce: () => {
      runs++;
      return new Promise((r) => (release = () => r({ nudged: 0 })));
    },
  };
  const s = setup([slow]);
  s.tick.start();
  s.timer.fire();
  await settle();
  assert.equal(runs, 1);
  assert.equal(s.timer.armed.length, 0, 'the next tick waits for this one to finish');
  // Without the running guard the manual tick below starts the duty a second time.
  const overlapping = s.tick.tickOnce();
  await settle();
  assert.equal(runs, 1, 'the overlapping tick ran no duty');
  release();
  assert.equal(await overlapping, null, 'an overlapping tick is refused');
  await settle();
  assert.equal(s.timer.armed.length, 1, 'armed again once the duty finished');
});

test('nothing is logged when every duty reports nothing happened', async () => {
  const quiet = countingDuty('stall-sweep', { drained: 0, nudged: 0 });
  const empty = countingDuty('not-serving', {});
  const s = setup([quiet.duty, empty.duty]);
  s.tick.start();
  for (let i = 0; i < 3; i++) {
    s.timer.fire();
    await settle();
  }
  assert.equal(quiet.calls.length, 3);
  assert.deepEqual(s.log.lines, []);
});

test('a duty that did something is summarised at debug with its non-zero counts only', async () => {
  const busy = countingDuty('stall-sweep', { drained: 0, nudged: 2 });
  const s = setup([busy.duty]);
  const results = await s.tick.tickOnce();
  assert.deepEqual(results?.get('stall-sweep'), { drained: 0, nudged: 2 });
  assert.deepEqual(s.log.lines, [{ level: 'debug', msg: 'maintenance stall-sweep nudged=2' }]);
});

test('the interval is read at every arm, and a change re-arms a waiting tick at once', async () => {
  let interval = 30_000;
  const d = countingDuty('d');
  const s = setup([d.duty], () => interval);
  s.tick.start();
  interval = 250;
  s.tick.rearm();
  assert.equal(s.timer.armed.length, 1, 'the old wait was cleared, not doubled');
  assert.equal(s.timer.armed[0]!.ms, 250);
  interval = 1000;
  s.timer.fire();
  await settle();
  assert.equal(s.timer.armed[0]!.ms, 1000);
});

test('after stop nothing is armed, even when a running tick finishes later', async () => {
  let release!: () => void;
  const slow: Duty = {
    name: 'slow',
    runOnce: () => new Promise((r) => (release = () => r({}))),
  };
  const s = setup([slow]);
  s.tick.start();
  s.timer.fire();
  await settle();
  s.tick.stop();
  release();
  await settle();
  assert.equal(s.timer.armed.length, 0);
});
