// The duty scheduler with a fake clock and a recording log: no sleeps, no Harper.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DutyScheduler, every, onWake, type Counts, type Duty } from '../../util/duties/scheduler.js';
import { FakeClock, turns } from '../fakeClock.js';

const T0 = 1_000_000;

function recordingLog() {
  const lines: Array<{ level: string; msg: string; err?: unknown }> = [];
  return {
    lines,
    debug: (msg: unknown) => void lines.push({ level: 'debug', msg: String(msg) }),
    error: (msg: unknown, err?: unknown) => void lines.push({ level: 'error', msg: String(msg), err }),
  };
}

function setup() {
  const clock = new FakeClock(T0);
  const log = recordingLog();
  const scheduler = new DutyScheduler({ now: clock.now, timer: clock, log });
  return { clock, log, scheduler };
}

function counting(name: string, result: Counts = {}) {
  const calls: number[] = [];
  const duty: Duty = {
    name,
    runOnce: (now) => {
      calls.push(now);
      return result;
    },
  };
  return { duty, calls };
}

/** A duty whose runs finish only when the test releases them. */
function held(name: string) {
  const releases: Array<() => void> = [];
  let runs = 0;
  const duty: Duty = {
    name,
    runOnce: () => {
      runs++;
      return new Promise<Counts>((r) => releases.push(() => r({})));
    },
  };
  return { duty, runs: () => runs, release: () => releases.shift()?.() };
}

test('a duty runs at each interval with the clock of its run', async () => {
  const s = setup();
  const d = counting('d');
  s.scheduler.add(
    d.duty,
    every(() => 1000),
  );
  await s.clock.advance(3500);
  assert.deepEqual(d.calls, [T0 + 1000, T0 + 2000, T0 + 3000]);
});

test('the next run is armed only after the current one finished, so two runs never overlap', async () => {
  const s = setup();
  const d = held('slow');
  s.scheduler.add(
    d.duty,
    every(() => 1000),
  );
  await s.clock.advance(1000);
  assert.equal(d.runs(), 1);
  assert.equal(s.clock.armed.length, 0, 'nothing armed while the duty runs');
  await s.clock.advance(5000);
  assert.equal(d.runs(), 1, 'no second run alongside the first');
  d.release();
  await turns();
  assert.deepEqual(s.clock.armed, [{ at: T0 + 7000, ms: 1000 }], 'armed a full interval after it finished');
});

test('a throwing duty is logged by name and the other duties still run, this time and the next', async () => {
  const s = setup();
  const failure = new Error('ledger unreachable');
  const broken: Duty = {
    name: 'stall-sweep',
    runOnce: () => {
      throw failure;
    },
  };
  const after = counting('secret-cleanup');
  const alone = counting('alone');
  s.scheduler.addGroup(
    'maintenance',
    [broken, after.duty],
    every(() => 1000),
  );
  s.scheduler.add(
    alone.duty,
    every(() => 1000),
  );
  await s.clock.advance(2000);
  assert.equal(after.calls.length, 2, 'the duty after the failing one ran both times');
  assert.equal(alone.calls.length, 2);
  assert.deepEqual(s.log.lines, [
    { level: 'error', msg: 'maintenance stall-sweep failed', err: failure },
    { level: 'error', msg: 'maintenance stall-sweep failed', err: failure },
  ]);
});

test('a duty that did nothing says nothing; one that did something is summarised with its non-zero counts', async () => {
  const s = setup();
  s.scheduler.add(
    counting('quiet', { drained: 0, nudged: 0 }).duty,
    every(() => 1000),
  );
  s.scheduler.add(
    counting('empty', {}).duty,
    every(() => 1000),
  );
  await s.clock.advance(3000);
  assert.deepEqual(s.log.lines, []);
  s.scheduler.addGroup(
    'maintenance',
    [counting('stall-sweep', { drained: 0, nudged: 2 }).duty],
    every(() => 5000),
  );
  await s.clock.advance(5000);
  assert.deepEqual(s.log.lines, [{ level: 'debug', msg: 'maintenance stall-sweep nudged=2' }]);
});

test('a changed timers key re-arms a waiting duty with its new interval from now', async () => {
  const s = setup();
  let interval = 600_000;
  const d = counting('verify');
  s.scheduler.add(
    d.duty,
    every(() => interval),
  );
  await s.clock.advance(10_000);
  interval = 1000;
  s.scheduler.configChanged(['queue.keeper.verifyInterval']);
  assert.equal(s.clock.armed.length, 1, 'the old wait was cleared, not doubled');
  await s.clock.advance(1000);
  assert.deepEqual(d.calls, [T0 + 11_000]);
});

test('only keys whose schema effect is timers re-arm: a reclassify or restart key leaves the wait alone', async () => {
  const s = setup();
  let interval = 600_000;
  const d = counting('d');
  s.scheduler.add(
    d.duty,
    every(() => interval),
  );
  interval = 1000;
  s.scheduler.configChanged(['render.routes', 'queue.ready.capacity', 'stall.after']);
  assert.deepEqual(s.clock.armed, [{ at: T0 + 600_000, ms: 600_000 }]);
  s.scheduler.configChanged(['maintenance.tickInterval']);
  assert.deepEqual(s.clock.armed, [{ at: T0 + 1000, ms: 1000 }]);
});

test('a running duty is not re-armed by a config change; it arms with the new value when it ends', async () => {
  const s = setup();
  let interval = 1000;
  const d = held('d');
  s.scheduler.add(
    d.duty,
    every(() => interval),
  );
  await s.clock.advance(1000);
  interval = 250;
  s.scheduler.configChanged(['queue.keeper.publishInterval']);
  assert.equal(s.clock.armed.length, 0);
  d.release();
  await turns();
  assert.deepEqual(s.clock.armed, [{ at: T0 + 1250, ms: 250 }]);
});

test('a woken duty runs after its wake wait, at most once however often it is woken meanwhile', async () => {
  const s = setup();
  const d = counting('early');
  const h = s.scheduler.add(
    d.duty,
    onWake((now, last) => (last ? Math.max(0, last.at + 50 - now) : 0)),
  );
  assert.equal(s.clock.armed.length, 0, 'not armed until woken');
  h.wake();
  h.wake();
  await s.clock.advance(0);
  assert.deepEqual(d.calls, [T0]);
  await s.clock.advance(10);
  h.wake();
  h.wake();
  assert.deepEqual(s.clock.armed, [{ at: T0 + 50, ms: 40 }], 'the next early run keeps 50 ms from the last');
  await s.clock.advance(100);
  assert.deepEqual(d.calls, [T0, T0 + 50]);
  assert.equal(s.clock.armed.length, 0);
});

test('a duty woken while it runs runs once more after it finished', async () => {
  const s = setup();
  const d = held('d');
  const h = s.scheduler.add(d.duty, onWake());
  h.wake();
  await s.clock.advance(0);
  h.wake();
  assert.equal(d.runs(), 1);
  d.release();
  await turns();
  await s.clock.advance(0);
  assert.equal(d.runs(), 2);
});

test('stop clears every timer, waits for a running duty, and nothing fires afterwards', async () => {
  const s = setup();
  const slow = held('slow');
  const other = counting('other');
  const woken = counting('woken');
  s.scheduler.add(
    slow.duty,
    every(() => 1000),
  );
  s.scheduler.add(
    other.duty,
    every(() => 1500),
  );
  const w = s.scheduler.add(
    woken.duty,
    onWake(() => 5000),
  );
  w.wake();
  await s.clock.advance(1000);
  let stopped = false;
  const stopping = s.scheduler.stop().then(() => (stopped = true));
  await turns();
  assert.equal(stopped, false, 'stop waits for the running duty');
  slow.release();
  await stopping;
  assert.equal(s.clock.armed.length, 0);
  w.wake();
  s.scheduler.configChanged(['queue.keeper.publishInterval']);
  await s.clock.advance(60_000);
  assert.equal(slow.runs(), 1);
  assert.deepEqual(other.calls, []);
  assert.deepEqual(woken.calls, []);
  assert.equal(s.clock.armed.length, 0);
});

test('stopping one duty leaves the others running', async () => {
  const s = setup();
  const a = counting('a');
  const b = counting('b');
  const ha = s.scheduler.add(
    a.duty,
    every(() => 1000),
  );
  s.scheduler.add(
    b.duty,
    every(() => 1000),
  );
  await s.clock.advance(1000);
  await ha.stop();
  await s.clock.advance(2000);
  assert.equal(a.calls.length, 1);
  assert.equal(b.calls.length, 3);
});

test('a cadence that answers null after a success waits for a wake, and retries after a failure', async () => {
  const s = setup();
  let fail = true;
  const runs: number[] = [];
  const resubscribe: Duty = {
    name: 'resubscribe',
    runOnce: (now) => {
      runs.push(now);
      if (fail) throw new Error('refused');
      return { resubscribed: 1 };
    },
  };
  const h = s.scheduler.add(resubscribe, {
    next: (_now, last) => (last && !last.ok ? 5000 : null),
    wake: () => 5000,
  });
  h.wake();
  await s.clock.advance(5000);
  fail = false;
  await s.clock.advance(5000);
  await s.clock.advance(60_000);
  assert.deepEqual(runs, [T0 + 5000, T0 + 10_000], 'one retry after the failure, then idle');
});

test("a tick's duties run each in a turn of their own: the loop turns between two of them", async () => {
  // Without the turn a tick whose duties each finish at once runs them as one hold of their summed time.
  const clock = new FakeClock(T0);
  const order: string[] = [];
  const scheduler = new DutyScheduler({
    now: clock.now,
    timer: clock,
    log: recordingLog(),
    yieldLoop: async () => void order.push('turn'),
  });
  const duty = (name: string): Duty => ({ name, runOnce: () => (order.push(name), {}) });
  scheduler.addGroup(
    'maintenance',
    [duty('stall-sweep'), duty('page-sweep'), duty('secret-cleanup')],
    every(() => 1000),
  );
  await clock.advance(1000);
  assert.deepEqual(order, ['stall-sweep', 'turn', 'page-sweep', 'turn', 'secret-cleanup']);
});
