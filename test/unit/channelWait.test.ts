// The channel's wait (util/channel/wait.ts) against a ready set faked as its header and sections: a
// socket is claimed for again when a publish left something for its scope, when its own empty claim
// took entries and some are left, or when its safety claim is due, and at no other tick.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CHANNEL_SAFETY_MS, ChannelWaits, type WaitingSocket } from '../../util/channel/wait.js';

/** The parts of the ready set the wait reads, set by hand: a publish is a new generation. */
class FakeSet {
  generation = 1;
  remaining = 0;
  sections = new Map<number, number>();
  snapshots = 0;

  publish(remaining: number, sections: Record<number, number> = {}): void {
    this.generation++;
    this.remaining = remaining;
    this.sections = new Map(Object.entries(sections).map(([q, n]) => [Number(q), n]));
  }

  snapshot() {
    this.snapshots++;
    return { generation: this.generation, remaining: this.remaining };
  }

  section(queue: number) {
    const n = this.sections.get(queue);
    return n === undefined ? null : { remaining: n };
  }
}

class Socket implements WaitingSocket {
  closed = false;
  credits = 2;
  pumps = 0;
  schedulePump(): void {
    this.pumps++;
  }
}

function setup() {
  const set = new FakeSet();
  const waits = new ChannelWaits(() => set);
  return { set, waits };
}

/** Runs the wait's tick every 5 ms from `from` (exclusive) to `to` (inclusive). */
function tick(waits: ChannelWaits, from: number, to: number): void {
  for (let now = from + 5; now <= to; now += 5) waits.runOnce(now);
}

test('publishes of an empty set wake no waiting socket; the safety claim comes once per interval', () => {
  const { set, waits } = setup();
  const sockets = [new Socket(), new Socket(), new Socket()];
  for (const s of sockets) waits.add(s, { generation: set.generation, scope: null, took: true }, 0);
  // Ten publishes (every 200 ms), none of which holds anything.
  for (let now = 0; now < CHANNEL_SAFETY_MS - 5; now += 200) {
    set.publish(0);
    tick(waits, now, Math.min(now + 200, CHANNEL_SAFETY_MS - 5));
  }
  assert.deepEqual(
    sockets.map((s) => s.pumps),
    [0, 0, 0],
  );
  tick(waits, CHANNEL_SAFETY_MS - 5, CHANNEL_SAFETY_MS);
  assert.deepEqual(
    sockets.map((s) => s.pumps),
    [1, 1, 1],
  );
  assert.equal(waits.size, 0, 'a woken socket waits again only after its next empty claim');
});

test('a publish that leaves entries wakes the unscoped sockets at the next tick', () => {
  const { set, waits } = setup();
  const s = new Socket();
  waits.add(s, { generation: set.generation, scope: null, took: false }, 0);
  tick(waits, 0, 100);
  assert.equal(s.pumps, 0);
  set.publish(3);
  waits.runOnce(105);
  assert.equal(s.pumps, 1);
});

test('a publish that landed while the empty claim ran still wakes the socket', () => {
  const { set, waits } = setup();
  const s = new Socket();
  const before = waits.generation();
  set.publish(1);
  waits.add(s, { generation: before, scope: null, took: false }, 0);
  waits.runOnce(5);
  assert.equal(s.pumps, 1);
});

test('a scoped socket wakes for a publish with entries in its queues only', () => {
  const { set, waits } = setup();
  const s = new Socket();
  waits.add(s, { generation: set.generation, scope: [11, 12], took: false }, 0);
  set.publish(50, { 13: 50 });
  tick(waits, 0, 100);
  assert.equal(s.pumps, 0, 'entries of another queue are not its to take');
  set.publish(51, { 13: 50, 12: 1 });
  waits.runOnce(105);
  assert.equal(s.pumps, 1);
});

test('an empty claim that took entries wakes again while entries are left, not once they are used up', () => {
  const { set, waits } = setup();
  const a = new Socket();
  set.publish(40);
  // Its claim took leased entries and ran out of budget: 40 are still left in the same generation.
  waits.add(a, { generation: set.generation, scope: null, took: true }, 0);
  waits.runOnce(5);
  assert.equal(a.pumps, 1);
  // The next claim used the set up: nothing wakes it until a publish or its safety claim.
  set.remaining = 0;
  waits.add(a, { generation: set.generation, scope: null, took: true }, 10);
  tick(waits, 10, 500);
  assert.equal(a.pumps, 1);
  // A paused claim took nothing: entries left in the set do not wake it in the same generation.
  const b = new Socket();
  set.remaining = 40;
  waits.add(b, { generation: set.generation, scope: null, took: false }, 500);
  tick(waits, 500, 1000);
  assert.equal(b.pumps, 0);
});

test('a tick with nothing new reads the set header once and looks at no socket', () => {
  const { set, waits } = setup();
  const sockets = Array.from({ length: 100 }, () => new Socket());
  for (const s of sockets) waits.add(s, { generation: set.generation, scope: [1], took: false }, 0);
  waits.runOnce(5);
  let sectionReads = 0;
  const section = set.section.bind(set);
  set.section = (q) => {
    sectionReads++;
    return section(q);
  };
  const snapshots = set.snapshots;
  tick(waits, 5, 1000);
  assert.equal(set.snapshots - snapshots, 199, 'one header read per tick');
  assert.equal(sectionReads, 0);
  // A publish: each socket is looked at once for it, not at every later tick.
  set.publish(0, { 2: 5 });
  tick(waits, 1000, 1200);
  assert.equal(sectionReads, 100);
  assert.ok(sockets.every((s) => s.pumps === 0));
});

test('closed sockets and sockets without credits leave the wait without a claim', () => {
  const { set, waits } = setup();
  const closed = new Socket();
  const spent = new Socket();
  for (const s of [closed, spent]) waits.add(s, { generation: set.generation, scope: null, took: false }, 0);
  closed.closed = true;
  spent.credits = 0;
  set.publish(10);
  waits.runOnce(5);
  assert.equal(waits.size, 0);
  assert.equal(closed.pumps + spent.pumps, 0);
});
