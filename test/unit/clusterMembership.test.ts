// The cluster membership's timed parts on a fake clock (services/cluster): the heartbeat is a duty on
// the worker's scheduler, the peer wait polls on it and stops once the node may load, and the
// connection watch turns cluster_status answers into "down since" times (a second departure signal).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { beatStaleAfterMs, type NodeBeat } from '../../util/cluster/holding.js';
import { DutyScheduler } from '../../util/duties/scheduler.js';
import { ConnectionWatch, LOOK_TIMEOUT_MS, peersDown } from '../../util/cluster/connections.js';
import {
  ClusterMembership,
  DROP_WAIT_CAP_MS,
  PUBLISH_SETTLE_MS,
  ReplicationPeers,
  type ConnectionView,
} from '../../util/cluster/membership.js';
import type { HandoffLease } from '../../util/cluster/handoff.js';
import { PEER_WAIT_POLL_MS, waitForPeers } from '../../util/cluster/peerWait.js';
import { FakeClock, turns } from '../fakeClock.js';

const T0 = 1_000_000;
const quiet = { warn: () => undefined, info: () => undefined };

function cluster(
  opts: {
    interval?: number;
    peers?: string[];
    connections?: ConnectionView;
    handoff?: (now: number, newView: boolean) => readonly HandoffLease[] | null;
    log?: { warn(...a: unknown[]): void; info(...a: unknown[]): void };
    processStartedAt?: number;
    /** Beat rows already there (this node's own from an earlier worker, say). */
    rows?: NodeBeat[];
  } = {},
) {
  const clock = new FakeClock(T0);
  const scheduler = new DutyScheduler({
    now: clock.now,
    timer: clock,
    log: { debug: () => undefined, error: () => undefined },
  });
  const beats = new Map<string, NodeBeat>((opts.rows ?? []).map((b) => [b.node, b]));
  const written: number[] = [];
  const membership = new ClusterMembership({
    self: () => 'node-a',
    configuredPeers: async () => opts.peers ?? ['node-b'],
    readBeats: async () => [...beats.values()],
    writeBeat: async ({ keepHandoff, ...b }) => {
      written.push(b.beatAt);
      const kept = keepHandoff ? beats.get(b.node)?.handoff : b.handoff;
      beats.set(b.node, { ...b, ...(kept ? { handoff: kept } : {}) });
      if (!kept) delete beats.get(b.node)!.handoff;
    },
    now: clock.now,
    beatIntervalMs: () => opts.interval ?? 200,
    scheduler,
    connections: opts.connections,
    handoff: opts.handoff,
    log: opts.log ?? quiet,
    ...(opts.processStartedAt !== undefined ? { processStartedAt: opts.processStartedAt } : {}),
  });
  return { clock, scheduler, beats, written, membership };
}

test('the heartbeat is a scheduler duty: the first beat at once, then every max(1 s, publishInterval), none after stop', async () => {
  const c = cluster({ interval: 200 });
  c.membership.start();
  c.membership.start(); // idempotent: one duty
  await c.clock.advance(0);
  assert.deepEqual(c.written, [T0]);
  await c.clock.advance(2500);
  assert.deepEqual(c.written, [T0, T0 + 1000, T0 + 2000]);
  await c.membership.stop();
  await c.clock.advance(5000);
  assert.equal(c.written.length, 3);
  assert.equal(c.clock.armed.length, 0, 'no timer left behind');

  const slow = cluster({ interval: 3000 });
  slow.membership.start();
  await slow.clock.advance(6500);
  assert.deepEqual(slow.written, [T0, T0 + 3000, T0 + 6000]);
});

test('the peer wait polls on the scheduler until the peer beats, shows waiting meanwhile, and stops polling', async () => {
  const c = cluster();
  const waiting: number[] = [];
  let decided: unknown = null;
  void waitForPeers({
    membership: c.membership,
    scheduler: c.scheduler,
    capMs: 120_000,
    showWaiting: (now) => waiting.push(now),
    log: quiet,
  }).then((d) => (decided = d));
  await c.clock.advance(1000);
  assert.equal(decided, null);
  assert.deepEqual(waiting.slice(0, 3), [T0, T0 + PEER_WAIT_POLL_MS, T0 + 2 * PEER_WAIT_POLL_MS]);
  c.beats.set('node-b', { node: 'node-b', beatAt: c.clock.now(), view: null });
  await c.clock.advance(PEER_WAIT_POLL_MS);
  assert.deepEqual(decided, { action: 'load', reason: 'all-present' });
  const polls = waiting.length;
  await c.membership.stop();
  await c.clock.advance(10_000);
  assert.equal(waiting.length, polls, 'no poll after the decision');
  assert.equal(c.clock.armed.length, 0);
});

test('the peer wait loads alone after the cap when a peer never beats', async () => {
  const c = cluster();
  let decided: unknown = null;
  void waitForPeers({
    membership: c.membership,
    scheduler: c.scheduler,
    capMs: 5000,
    showWaiting: () => undefined,
    log: quiet,
  }).then((d) => (decided = d));
  await c.clock.advance(4900);
  assert.equal(decided, null);
  await c.clock.advance(PEER_WAIT_POLL_MS);
  assert.deepEqual(decided, { action: 'load', reason: 'cap', missing: ['node-b'] });
});

test('an unreadable node table is warned about once per instance, and answers alone', async () => {
  const warned: unknown[] = [];
  const failing = () => ({
    [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(new Error('no table')) }),
  });
  const peers = new ReplicationPeers({
    self: () => 'node-a',
    nodes: failing,
    log: { warn: (m) => warned.push(m) },
  });
  assert.deepEqual(await peers.names(), []);
  assert.deepEqual(await peers.names(), []);
  assert.equal(warned.length, 1);
  const other = new ReplicationPeers({
    self: () => 'node-a',
    nodes: failing,
    log: { warn: (m) => warned.push(m) },
  });
  await other.names();
  assert.equal(warned.length, 2, 'the state is the instance’s, not the module’s');
});

const status = (sockets: Record<string, boolean>) => ({
  connections: Object.entries(sockets).map(([name, connected]) => ({
    name,
    authorization: 'Basic c2VjcmV0',
    database_sockets: [
      { database: 'system', connected: true },
      { database: 'render_queue', connected },
    ],
  })),
});

test('cluster_status answers are read as the peers whose beat socket is down; other shapes say nobody is', () => {
  assert.deepEqual([...peersDown(status({ 'node-b': false, 'node-c': true }))], ['node-b']);
  assert.deepEqual([...peersDown({ connections: [{ name: 'node-b', database_sockets: [] }] })], []);
  assert.deepEqual([...peersDown(null)], []);
  assert.deepEqual([...peersDown({ connections: 'x' })], []);
});

test('the connection watch keeps since when a peer has been down, forgets it on reconnect, and knows nothing on a failed or silent look', async () => {
  const clock = new FakeClock(T0);
  let answer: () => Promise<unknown> = async () => status({ 'node-b': false });
  const watch = new ConnectionWatch({
    clusterStatus: () => answer(),
    sleep: (ms) => new Promise((r) => clock.set(r, ms)),
    log: quiet,
  });
  assert.deepEqual([...(await watch.downSince(T0))], [['node-b', T0]]);
  clock.t = T0 + 1000;
  assert.deepEqual([...(await watch.downSince(clock.t))], [['node-b', T0]], 'down since the first look');
  answer = async () => status({ 'node-b': true });
  clock.t = T0 + 2000;
  assert.deepEqual([...(await watch.downSince(clock.t))], []);
  answer = async () => Promise.reject(new Error('no replication'));
  clock.t = T0 + 3000;
  assert.deepEqual([...(await watch.downSince(clock.t))], []);
  // An answer that never comes (Harper keeps one resolver off the main thread) times out.
  answer = async () => status({ 'node-b': false });
  clock.t = T0 + 4000;
  await watch.downSince(clock.t);
  answer = () => new Promise(() => undefined);
  clock.t = T0 + 5000;
  let looked: ReadonlyMap<string, number> | null = null;
  void watch.downSince(clock.t).then((m) => (looked = m));
  await turns();
  assert.equal(looked, null);
  await clock.advance(LOOK_TIMEOUT_MS);
  assert.deepEqual([...looked!], [], 'a silent look counts as nothing known');
});

test('a node with no configured peers never asks for the connection state', async () => {
  let looks = 0;
  const c = cluster({
    peers: [],
    connections: {
      downSince: async () => {
        looks++;
        return new Map();
      },
    },
  });
  assert.deepEqual((await c.membership.presence()).configured, []);
  assert.deepEqual((await c.membership.currentOwnership()).nodes, ['node-a']);
  assert.equal(looks, 0);
});

test('the membership counts a peer gone within the quick window once its connection is down and its beat stopped', async () => {
  const downSince = new Map<string, number>();
  const c = cluster({ interval: 1000, connections: { downSince: async () => downSince } });
  c.beats.set('node-b', { node: 'node-b', beatAt: T0, view: ['node-a', 'node-b'] });
  c.clock.t = T0 + 4000;
  assert.deepEqual((await c.membership.presence()).missing, [], 'connection up: the 15 s window');
  downSince.set('node-b', T0 + 500);
  assert.deepEqual((await c.membership.presence()).missing, ['node-b']);
  assert.deepEqual((await c.membership.currentOwnership()).nodes, ['node-a']);
});

test('a peer whose socket flaps while its beats keep arriving is never dropped, and one that stops beating leaves by the connection', async () => {
  const clock = new FakeClock(T0);
  let connected = true;
  const logged: string[] = [];
  const watch = new ConnectionWatch({
    clusterStatus: async () => status({ 'node-b': connected }),
    sleep: (ms) => new Promise((r) => clock.set(r, ms)),
    log: { info: (m: unknown) => logged.push(String(m)), warn: () => undefined },
  });
  const c = cluster({ interval: 1000, connections: watch });
  const step = 250;
  // A minute of a socket down 4 s, up 0.5 s, down again…, with node-b beating every second throughout
  // (its beats arrive 0.8 s late): both signals are needed, the connection alone never drops it.
  for (let t = 0; t <= 60_000; t += step) {
    c.clock.t = clock.t = T0 + t;
    connected = t % 4500 >= 4000;
    c.beats.set('node-b', {
      node: 'node-b',
      beatAt: T0 + Math.max(0, Math.floor((t - 800) / 1000) * 1000),
      view: null,
    });
    assert.deepEqual((await c.membership.presence()).missing, [], `node-b present at ${t} ms`);
  }
  assert.equal(c.membership.departures().size, 0);
  assert.ok(logged.some((l) => /node-b's render_queue socket down/.test(l)));
  // Then it stops: the socket stays down and no beat comes. It leaves after the quick window, not 15 s.
  const lastBeat = c.beats.get('node-b')!.beatAt;
  connected = false;
  let leftAt = -1;
  for (let t = 60_000 + step; t <= 80_000 && leftAt < 0; t += step) {
    c.clock.t = clock.t = T0 + t;
    if ((await c.membership.presence()).missing.includes('node-b')) leftAt = T0 + t;
  }
  assert.ok(leftAt > 0, 'node-b left');
  // Its last beat reached this node 0.8–1 s after it was written; the quick window counts from then.
  assert.ok(leftAt - lastBeat <= 5000, `left ${leftAt - lastBeat} ms after its last beat`);
  assert.equal(c.membership.departures().get('node-b')?.kind, 'connection');
});

test('a peer whose beats stop while Harper still reports its socket connected leaves by the heartbeat window only', async () => {
  const c = cluster({ interval: 1000, connections: { downSince: async () => new Map() } });
  c.beats.set('node-b', { node: 'node-b', beatAt: T0, view: null });
  assert.deepEqual((await c.membership.presence()).missing, []);
  c.clock.t = T0 + beatStaleAfterMs(1000);
  assert.deepEqual((await c.membership.presence()).missing, [], 'a hung peer with its socket open: 15 s');
  c.clock.t += 1;
  assert.deepEqual((await c.membership.presence()).missing, ['node-b']);
  assert.equal(c.membership.departures().get('node-b')?.kind, 'heartbeat');
});

test('a peer whose beats arrive every second but 25 s behind (a write burst) stays; once they stop it leaves a window after the last one heard', async () => {
  // bench/cluster-scale.ts, 300k rows seeded on one of three 1-thread nodes: the others' beats reached it
  // 15–25 s after they were written, about one a second; counted by their own time, both left.
  const c = cluster({ interval: 1000, connections: { downSince: async () => new Map() } });
  const lagMs = 25_000;
  const window = beatStaleAfterMs(1000);
  for (let t = 0; t <= 120_000; t += 250) {
    c.clock.t = T0 + t;
    c.beats.set('node-b', { node: 'node-b', beatAt: T0 + Math.floor((t - lagMs) / 1000) * 1000, view: null });
    const { missing } = await c.membership.presence();
    // The first sighting counts from the beat's own time (25 s old): present from the next beat heard.
    if (t < 1000) continue;
    assert.deepEqual(missing, [], `node-b present at ${t} ms`);
  }
  assert.equal(c.membership.departures().size, 0);
  const lastHeard = c.clock.t;
  let leftAt = -1;
  for (let t = lastHeard + 250; leftAt < 0 && t <= lastHeard + 30_000; t += 250) {
    c.clock.t = t;
    if ((await c.membership.presence()).missing.includes('node-b')) leftAt = t;
  }
  assert.ok(leftAt > 0, 'node-b left once its beats stopped');
  assert.ok(
    leftAt - lastHeard > window && leftAt - lastHeard <= window + 1000,
    `left ${leftAt - lastHeard} ms after`,
  );
  assert.equal(c.membership.departures().get('node-b')?.kind, 'heartbeat');
});

test('a view that gives rows away is published only after the settle, one that only gains at once; beats carry the handoff', async () => {
  let handing: HandoffLease[] = [];
  const asked: string[] = [];
  const c = cluster({
    interval: 1000,
    peers: ['node-b', 'node-c'],
    handoff: (_now, newView) => {
      if (newView) asked.push(c.beats.get('node-a')?.view?.join(',') ?? 'none');
      return handing;
    },
  });
  const beatOf = (n: string) => ({ node: n, beatAt: c.clock.t, view: null });
  const published = () => c.beats.get('node-a')?.view?.join(',');
  c.beats.set('node-b', beatOf('node-b'));
  assert.deepEqual((await c.membership.currentOwnership()).nodes, ['node-a', 'node-b']);
  await c.clock.advance(0);
  assert.equal(published(), 'node-a,node-b', 'the first view goes out at once');
  assert.equal(c.beats.get('node-a')?.handoff, undefined, 'nothing to hand over: no list');

  // node-c comes back: node-a applies the three-node view and drops node-c's rows in slices, which
  // takes 1 s here; its beats keep the old view until PUBLISH_SETTLE_MS after the drop ended, so node-c
  // abstains until claims under way on node-a (the rows stayed claimable while it dropped) are done.
  const changedAt = c.clock.t;
  const droppedAt = changedAt + 1000;
  c.beats.set('node-b', beatOf('node-b'));
  c.beats.set('node-c', beatOf('node-c'));
  assert.deepEqual((await c.membership.currentOwnership()).nodes, ['node-a', 'node-b', 'node-c']);
  handing = [{ hi: 1, lo: 2, until: 3, dueMinute: 4, misses: 0 }];
  const seen: string[] = [];
  while (c.clock.t < droppedAt + PUBLISH_SETTLE_MS + 1000) {
    await c.clock.advance(250);
    if (c.clock.t === droppedAt) c.membership.viewApplied(['node-a', 'node-b', 'node-c'], droppedAt);
    c.beats.set('node-b', beatOf('node-b'));
    c.beats.set('node-c', beatOf('node-c'));
    const mark = `${published()}@${c.clock.t >= droppedAt + PUBLISH_SETTLE_MS}`;
    if (seen.at(-1) !== mark) seen.push(mark);
  }
  assert.deepEqual(seen, ['node-a,node-b@false', 'node-a,node-b,node-c@true']);
  // Told a new view goes out (so it scans then) on the first beat and on the settled one, only then;
  // each time the beat row still shows the view before.
  assert.deepEqual(asked, ['none', 'node-a,node-b']);
  assert.deepEqual(c.beats.get('node-a')?.handoff, handing, 'the beat carries the leases handed over');

  // node-c leaves: the view only gains rows, and the next beat publishes it.
  c.beats.delete('node-c');
  assert.deepEqual((await c.membership.currentOwnership()).nodes, ['node-a', 'node-b']);
  await c.clock.advance(1000);
  assert.equal(published(), 'node-a,node-b');
});

test("a change during another one's settle waits for it: the rows the first gave away are not given early", async () => {
  const c = cluster({ interval: 1000, peers: ['node-b', 'node-c'] });
  const beatOf = (n: string) => ({ node: n, beatAt: c.clock.t, view: null });
  c.beats.set('node-b', beatOf('node-b'));
  await c.membership.currentOwnership();
  await c.clock.advance(0);
  c.beats.set('node-c', beatOf('node-c'));
  await c.membership.currentOwnership(); // gives rows to node-c: settles until +2 s
  c.membership.viewApplied(['node-a', 'node-b', 'node-c'], c.clock.t); // its drop ended at once
  await c.clock.advance(500);
  c.beats.delete('node-b'); // node-b leaves 0.5 s later: a change that only gains
  c.beats.set('node-c', beatOf('node-c'));
  assert.deepEqual((await c.membership.currentOwnership()).nodes, ['node-a', 'node-c']);
  await c.clock.advance(1000);
  assert.equal(c.beats.get('node-a')?.view?.join(','), 'node-a,node-b', 'still the view before node-c came');
  await c.clock.advance(1000);
  c.beats.set('node-c', beatOf('node-c'));
  assert.equal(c.beats.get('node-a')?.view?.join(','), 'node-a,node-c');
});

test("a view that gives rows away waits for the keeper's drop, at most DROP_WAIT_CAP_MS; a report for an older view changes nothing", async () => {
  const c = cluster({ interval: 1000, peers: ['node-b', 'node-c'] });
  const up = (...names: string[]) => {
    for (const n of names) c.beats.set(n, { node: n, beatAt: c.clock.t, view: null });
  };
  const published = () => c.beats.get('node-a')?.view?.join(',');
  up('node-b');
  await c.membership.currentOwnership();
  await c.clock.advance(0);
  assert.equal(published(), 'node-a,node-b');
  up('node-b', 'node-c');
  const changedAt = c.clock.t;
  await c.membership.currentOwnership();
  // A report for another view (one this node no longer applies) is not this view's drop.
  c.membership.viewApplied(['node-a', 'node-b'], changedAt);
  while (c.clock.t < changedAt + DROP_WAIT_CAP_MS - 1000) {
    await c.clock.advance(1000);
    up('node-b', 'node-c');
    assert.equal(
      published(),
      'node-a,node-b',
      `no drop reported: still the view before at +${c.clock.t - changedAt} ms`,
    );
  }
  await c.clock.advance(2000);
  up('node-b', 'node-c');
  assert.equal(published(), 'node-a,node-b,node-c', 'the cap lets it go out');
});

test('a handoff list that fails to build never stops the beat, and the row keeps the list it had', async () => {
  const warned: unknown[] = [];
  const had = [{ hi: 1, lo: 2, until: 3, dueMinute: 4, misses: 0 }];
  const c = cluster({
    interval: 1000,
    handoff: () => {
      throw new Error('scan failed');
    },
    log: { info: () => undefined, warn: (m: unknown) => void warned.push(m) },
    rows: [{ node: 'node-a', beatAt: T0 - 1000, view: null, handoff: had }],
  });
  c.beats.set('node-b', { node: 'node-b', beatAt: T0, view: null });
  await c.membership.currentOwnership();
  assert.equal(await c.membership.beatOnce(T0), true);
  assert.deepEqual(c.beats.get('node-a')?.view, ['node-a', 'node-b']);
  assert.deepEqual(c.beats.get('node-a')?.handoff, had, 'its leases still run: not wiped');
  assert.match(String(warned[0]), /could not list the leases to hand over/);
});

test('before the keeper has a view (the peer wait) the beat keeps the list its row has; an empty list clears it', async () => {
  const had = [{ hi: 1, lo: 2, until: 3, dueMinute: 4, misses: 0 }];
  let list: HandoffLease[] | null = null;
  const c = cluster({
    interval: 1000,
    handoff: () => list,
    rows: [{ node: 'node-a', beatAt: 0, view: null, handoff: had }],
  });
  assert.equal(await c.membership.beatOnce(T0), true);
  assert.deepEqual(c.beats.get('node-a')?.handoff, had);
  list = [];
  assert.equal(await c.membership.beatOnce(T0 + 1000), true);
  assert.equal(c.beats.get('node-a')?.handoff, undefined);
});

test('a worker 0 restarted inside the process carries on the view its predecessor published, and settles a first view that gives rows away', async () => {
  const earlier: NodeBeat = { node: 'node-a', beatAt: T0 - 500, view: ['node-a', 'node-b'] };
  const peersUp = (c: ReturnType<typeof cluster>) => {
    c.beats.set('node-b', { node: 'node-b', beatAt: c.clock.t, view: null });
    c.beats.set('node-c', { node: 'node-c', beatAt: c.clock.t, view: null });
  };
  const startedAt = (processStartedAt: number) =>
    cluster({ interval: 1000, peers: ['node-b', 'node-c'], processStartedAt, rows: [earlier] });
  const restarted = startedAt(T0 - 60_000);
  peersUp(restarted);
  assert.deepEqual((await restarted.membership.currentOwnership()).nodes, ['node-a', 'node-b', 'node-c']);
  restarted.membership.viewApplied(['node-a', 'node-b', 'node-c'], restarted.clock.t);
  await restarted.clock.advance(0);
  assert.deepEqual(
    restarted.beats.get('node-a')?.view,
    ['node-a', 'node-b'],
    'the old view until the settle',
  );
  while (restarted.clock.t < T0 + PUBLISH_SETTLE_MS + 1000) {
    await restarted.clock.advance(500);
    peersUp(restarted);
  }
  assert.deepEqual(restarted.beats.get('node-a')?.view, ['node-a', 'node-b', 'node-c']);

  // In production the beat starts first (the peer wait starts the membership before any look): its
  // first write must not replace the earlier worker's view before anything read it.
  const beatFirst = startedAt(T0 - 60_000);
  peersUp(beatFirst);
  beatFirst.membership.start();
  await beatFirst.clock.advance(0);
  assert.deepEqual(beatFirst.beats.get('node-a')?.view, ['node-a', 'node-b'], 'the first beat keeps it');
  await beatFirst.membership.currentOwnership();
  beatFirst.membership.viewApplied(['node-a', 'node-b', 'node-c'], beatFirst.clock.t);
  await beatFirst.clock.advance(1000);
  assert.deepEqual(beatFirst.beats.get('node-a')?.view, ['node-a', 'node-b'], 'settling');
  await beatFirst.clock.advance(2000);
  peersUp(beatFirst);
  await beatFirst.clock.advance(1000);
  assert.deepEqual(beatFirst.beats.get('node-a')?.view, ['node-a', 'node-b', 'node-c']);

  // The same row from before this process started (the node itself restarted): it holds nothing now,
  // so the first view goes out at once, as before.
  const fresh = startedAt(T0 - 100);
  peersUp(fresh);
  await fresh.membership.currentOwnership();
  await fresh.clock.advance(0);
  assert.deepEqual(fresh.beats.get('node-a')?.view, ['node-a', 'node-b', 'node-c']);
});
