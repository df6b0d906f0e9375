// Holding rows while membership moves (util/cluster/holding.ts): a model of three nodes that beat,
// read each other's beats late and in any order, and re-decide what they hold; at no step may two live
// nodes hold one row, and once everyone has caught up every row has exactly one holder.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  BeatClock,
  HoldingView,
  beatStaleAfterMs,
  presentPeers,
  quickStaleAfterMs,
  type NodeBeat,
} from '../../util/cluster/holding.js';
import { Ownership } from '../../util/cluster/ownership.js';
import type { HandoffLease } from '../../util/cluster/handoff.js';
import { keyHash } from '../../util/keyHash.js';

const NAMES = ['node-a', 'node-b', 'node-c'];
const keys = Array.from({ length: 120 }, (_, i) => `https://model.example.com/p/${i}`);

interface ModelNode {
  name: string;
  alive: boolean;
  /** What the node last read of each peer's beat (replication lag: read late, one peer at a time). */
  seen: Map<string, NodeBeat>;
  holding: HoldingView | null;
  published: readonly string[] | null;
}

function settled(names: string[]): Map<string, ModelNode> {
  const nodes = new Map<string, ModelNode>();
  for (const name of NAMES) {
    const alive = names.includes(name);
    nodes.set(name, { name, alive, seen: new Map(), holding: null, published: alive ? names : null });
  }
  for (const n of nodes.values()) {
    if (!n.alive) continue;
    for (const m of nodes.values())
      if (m.alive && m !== n) n.seen.set(m.name, { node: m.name, beatAt: 0, view: m.published });
    n.holding = new HoldingView(n.name, [...n.seen.values()]);
  }
  return nodes;
}

function holders(nodes: Map<string, ModelNode>, key: string): string[] {
  return [...nodes.values()].filter((n) => n.alive && n.holding?.owns(key)).map((n) => n.name);
}

type Step = { kind: 'read' | 'refresh' | 'publish'; n: number; m: number };

/** One step of the protocol; steps the real system could not take (see the comments) do nothing. */
function apply(nodes: Map<string, ModelNode>, s: Step): void {
  const n = nodes.get(NAMES[s.n]!)!;
  const m = nodes.get(NAMES[s.m]!)!;
  if (!n.alive) return;
  if (s.kind === 'read' && m !== n) {
    // A live peer's beat is read as it is now; a dead peer's goes stale and drops out.
    if (m.alive) n.seen.set(m.name, { node: m.name, beatAt: 0, view: m.published });
    else n.seen.delete(m.name);
  } else if (s.kind === 'refresh') {
    // The peer wait: a starting node decides nothing before it has seen every live peer.
    if (n.holding === null && [...nodes.values()].some((p) => p.alive && p !== n && !n.seen.has(p.name)))
      return;
    n.holding = new HoldingView(n.name, [...n.seen.values()]);
  } else if (s.kind === 'publish') {
    // A beat carries the applied view: the one the keeper holds by now.
    n.published = n.holding ? n.holding.nodes : null;
  }
}

const steps = fc.array(
  fc.record({
    kind: fc.constantFrom<Step['kind']>('read', 'refresh', 'publish'),
    n: fc.integer({ min: 0, max: 2 }),
    m: fc.integer({ min: 0, max: 2 }),
  }),
  { minLength: 15, maxLength: 80 },
);

function catchUp(nodes: Map<string, ModelNode>): void {
  for (let round = 0; round < 3; round++)
    for (const kind of ['read', 'refresh', 'publish'] as const)
      for (let n = 0; n < 3; n++) for (let m = 0; m < 3; m++) apply(nodes, { kind, n, m });
}

function checkEveryStep(nodes: Map<string, ModelNode>, trace: Step[]): void {
  for (const s of trace) {
    apply(nodes, s);
    for (const k of keys) {
      const h = holders(nodes, k);
      assert.ok(h.length <= 1, `${k} held by ${h.join(' and ')} after ${JSON.stringify(s)}`);
    }
  }
  catchUp(nodes);
  for (const k of keys) assert.equal(holders(nodes, k).length, 1, `${k} has one holder once settled`);
}

test('a node that leaves: whatever order the others notice it, no row is held twice, and then each row once', () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 2 }), steps, (leaver, trace) => {
      const nodes = settled(NAMES);
      nodes.get(NAMES[leaver]!)!.alive = false;
      checkEveryStep(nodes, trace);
    }),
    { numRuns: 100 },
  );
});

test('a node that returns takes its rows back only after their holder let go: no row is held twice at any step', () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 2 }), steps, (joiner, trace) => {
      const nodes = settled(NAMES.filter((_, i) => i !== joiner));
      nodes.get(NAMES[joiner]!)!.alive = true;
      checkEveryStep(nodes, trace);
    }),
    { numRuns: 100 },
  );
});

test('without the published views a returning node would hold rows its peer still holds (the guard is needed)', () => {
  // node-c returns and sees node-a and node-b, which have not noticed it yet.
  const plainC = new Ownership(NAMES, 'node-c');
  const a = new HoldingView('node-a', [{ node: 'node-b', beatAt: 0, view: ['node-a', 'node-b'] }]);
  const c = new HoldingView('node-c', [
    { node: 'node-a', beatAt: 0, view: ['node-a', 'node-b'] },
    { node: 'node-b', beatAt: 0, view: ['node-a', 'node-b'] },
  ]);
  const contested = keys.filter((k) => plainC.owns(k) && a.owns(k));
  assert.ok(contested.length > 0, 'rendezvous alone gives node-c rows node-a holds');
  assert.ok(
    contested.every((k) => !c.owns(k)),
    'node-c abstains from each of them',
  );
});

test('a node with no present peers holds every row; a starting peer with no view yet takes nothing from anyone', () => {
  const alone = new HoldingView('node-a', []);
  assert.ok(keys.every((k) => alone.owns(k)));
  const withStarter = new HoldingView('node-a', [{ node: 'node-b', beatAt: 0, view: null }]);
  // node-b counts as present (its rows are no longer ours), but its empty view claims nothing.
  const plain = new Ownership(['node-a', 'node-b'], 'node-a');
  assert.ok(keys.every((k) => withStarter.owns(k) === plain.owns(k)));
});

test('a changed peer view is a membership change; the same beats in another order are not', () => {
  const beats: NodeBeat[] = [
    { node: 'node-b', beatAt: 1, view: ['node-a', 'node-b'] },
    { node: 'node-c', beatAt: 2, view: ['node-a', 'node-b', 'node-c'] },
  ];
  const v1 = new HoldingView('node-a', beats);
  assert.ok(v1.sameMembership(new HoldingView('node-a', [...beats].reverse())));
  const moved = [beats[0]!, { ...beats[1]!, view: ['node-b', 'node-c'] }];
  assert.equal(v1.sameMembership(new HoldingView('node-a', moved)), false);
  assert.deepEqual(v1.settling(), ['node-b']);
});

test('present peers are the configured ones with a fresh beat', () => {
  const now = 100_000;
  const stale = beatStaleAfterMs(1000);
  const beats: NodeBeat[] = [
    { node: 'node-b', beatAt: now - 100, view: null },
    { node: 'node-c', beatAt: now - stale - 1, view: null },
    { node: 'node-x', beatAt: now, view: null },
    { node: 'node-a', beatAt: now, view: null },
  ];
  const present = presentPeers('node-a', ['node-a', 'node-b', 'node-c'], beats, now, stale);
  assert.deepEqual(
    present.map((b) => b.node),
    ['node-b'],
  );
});

test('a peer whose beat lags 10 s behind (replication under load) still counts as present', () => {
  // bench/cluster-drain.ts at load 8–11 with a 5 s window: live peers counted gone, 3,032 double grants.
  const now = 100_000;
  const lagging: NodeBeat[] = [{ node: 'node-b', beatAt: now - 10_000, view: null }];
  const present = presentPeers('node-a', ['node-a', 'node-b'], lagging, now, beatStaleAfterMs(1000));
  assert.deepEqual(
    present.map((b) => b.node),
    ['node-b'],
  );
  assert.equal(beatStaleAfterMs(5000), 25_000, 'five beats when beats are slower than 3 s');
});

test('a beat counts from when this node heard it: late beats that keep arriving are fresh, a first sighting is not', () => {
  const clock = new BeatClock();
  const t = 1_000_000;
  const beat = (node: string, beatAt: number): NodeBeat => ({ node, beatAt, view: null });
  // First sighting: the beat's own time (a row left by a node that stopped long ago stays old).
  assert.deepEqual(
    clock.read([beat('node-b', t - 60_000), beat('node-c', t - 25_000)], t).map((b) => b.beatAt),
    [t - 60_000, t - 25_000],
  );
  // node-c's next beat arrives, 25 s behind its own time (replication running behind a burst): heard now.
  const later = clock.read([beat('node-b', t - 60_000), beat('node-c', t - 24_000)], t + 1000);
  assert.deepEqual(
    later.map((b) => b.beatAt),
    [t - 60_000, t + 1000],
  );
  // Nothing new from node-c: it ages from when it was heard, and leaves a window after that.
  assert.equal(clock.read([beat('node-c', t - 24_000)], t + 9000)[0]!.beatAt, t + 1000);
  // A beat dated after it was heard (this node's clock behind) keeps its own time.
  assert.equal(clock.read([beat('node-c', t + 20_000)], t + 10_000)[0]!.beatAt, t + 20_000);
  // A node whose row went away and came back is a first sighting again.
  clock.read([], t + 11_000);
  assert.equal(clock.read([beat('node-c', t - 5000)], t + 12_000)[0]!.beatAt, t - 5000);
});

test('a peer whose replication connection is down leaves after the quick window, never on the connection alone', () => {
  const now = 100_000;
  const stale = beatStaleAfterMs(1000);
  const quick = quickStaleAfterMs(1000);
  assert.equal(quick, 3000);
  const beats: NodeBeat[] = [
    { node: 'node-b', beatAt: now - quick - 1, view: null }, // down long enough, beat as old: gone
    { node: 'node-c', beatAt: now - 500, view: null }, // down, but beats still arrive (relayed): present
    { node: 'node-d', beatAt: now - 10_000, view: null }, // beat lags, connection up: present
    { node: 'node-e', beatAt: now - 10_000, view: null }, // beat lags, just went down: present for now
  ];
  const downSince = new Map([
    ['node-b', now - quick],
    ['node-c', now - 60_000],
    ['node-e', now - 1000],
  ]);
  const names = ['node-a', 'node-b', 'node-c', 'node-d', 'node-e'];
  const present = presentPeers('node-a', names, beats, now, stale, { downSince, beatEveryMs: 1000 });
  assert.deepEqual(
    present.map((b) => b.node),
    ['node-c', 'node-d', 'node-e'],
  );
  assert.deepEqual(
    presentPeers('node-a', names, beats, now, stale).map((b) => b.node),
    ['node-b', 'node-c', 'node-d', 'node-e'],
    'without the connection signal only the full window counts',
  );
  assert.equal(quickStaleAfterMs(2000), 6000, 'three beats when beats are slower than 1 s');
});

// ------------------------------------------------------------------ leases handed over with their rows

interface LeasingNode extends ModelNode {
  /** Keys this node's lease table refuses: its own grants and the leases it adopted. Leases never end here. */
  leased: Set<string>;
  /** Keys it granted itself (what a fleet renders under its lease). */
  granted: Set<string>;
  handoff: HandoffLease[];
}

const hashOf = new Map(keys.map((k) => [k, keyHash(k)]));

type LeaseStep = { kind: 'read' | 'refresh' | 'publish' | 'grant'; n: number; m: number };

/** The protocol with leases: grants lease every held row, a beat hands over leases on rows not held. */
function applyLeasing(nodes: Map<string, LeasingNode>, s: LeaseStep, adopt: boolean): void {
  const n = nodes.get(NAMES[s.n]!)!;
  const m = nodes.get(NAMES[s.m]!)!;
  if (!n.alive) return;
  if (s.kind === 'read' && m !== n) {
    if (m.alive) n.seen.set(m.name, { node: m.name, beatAt: 0, view: m.published, handoff: m.handoff });
    else n.seen.delete(m.name);
  } else if (s.kind === 'refresh') {
    if (n.holding === null && [...nodes.values()].some((p) => p.alive && p !== n && !n.seen.has(p.name)))
      return;
    const next = new HoldingView(n.name, [...n.seen.values()]);
    // Before the keeper holds the new rows: the leases handed over on them become leases of this table.
    if (adopt)
      for (const { lease } of next.handedOver())
        for (const [k, h] of hashOf) if (h.hi === lease.hi && h.lo === lease.lo) n.leased.add(k);
    n.holding = next;
  } else if (s.kind === 'publish') {
    n.published = n.holding ? n.holding.nodes : null;
    // The beat's list: its own grants on rows it no longer holds (sticky: leases never end here).
    n.handoff = [...n.granted]
      .filter((k) => !n.holding?.owns(k))
      .map((k) => ({ ...hashOf.get(k)!, until: 1, dueMinute: 0, misses: 0 }));
  } else if (s.kind === 'grant') {
    for (const k of keys)
      if (n.holding?.owns(k) && !n.leased.has(k)) {
        n.leased.add(k);
        n.granted.add(k);
      }
  }
}

/** Keys granted by two live nodes whose leases both still run (no lease ends in this model). */
function grantedTwice(nodes: Map<string, LeasingNode>): string[] {
  const live = [...nodes.values()].filter((n) => n.alive);
  return keys.filter((k) => live.filter((n) => n.granted.has(k)).length > 1);
}

function leasingReturn(joiner: number): Map<string, LeasingNode> {
  const base = settled(NAMES.filter((_, i) => i !== joiner));
  const nodes = new Map<string, LeasingNode>();
  for (const [name, n] of base) nodes.set(name, { ...n, leased: new Set(), granted: new Set(), handoff: [] });
  // Every row is due and leased by its holder before the node comes back.
  for (let i = 0; i < 3; i++) applyLeasing(nodes, { kind: 'grant', n: i, m: i }, true);
  nodes.get(NAMES[joiner]!)!.alive = true;
  return nodes;
}

const leaseSteps = fc.array(
  fc.record({
    kind: fc.constantFrom<LeaseStep['kind']>('read', 'refresh', 'publish', 'grant'),
    n: fc.integer({ min: 0, max: 2 }),
    m: fc.integer({ min: 0, max: 2 }),
  }),
  { minLength: 15, maxLength: 100 },
);

test('a node that returns never grants a row its covering peer still has leased: the leases come over with the rows', () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 2 }), leaseSteps, (joiner, trace) => {
      const nodes = leasingReturn(joiner);
      for (const s of trace) {
        applyLeasing(nodes, s, true);
        assert.deepEqual(grantedTwice(nodes), [], `after ${JSON.stringify(s)}`);
      }
    }),
    { numRuns: 150 },
  );
});

test('without the handoff the returning node grants rows still leased elsewhere (the handoff is needed)', () => {
  const nodes = leasingReturn(2);
  const run = (kind: LeaseStep['kind'], n: number, m = n) => applyLeasing(nodes, { kind, n, m }, false);
  // node-a and node-b see node-c, drop its rows and publish; node-c reads them, picks its rows up, grants.
  for (const n of [0, 1]) {
    run('read', n, 2);
    run('refresh', n);
    run('publish', n);
  }
  run('read', 2, 0);
  run('read', 2, 1);
  run('refresh', 2);
  run('grant', 2);
  assert.ok(grantedTwice(nodes).length > 0, 'rows granted on two nodes');
});
