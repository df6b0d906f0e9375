// Which rows this node may hold while the cluster's membership moves (docs/clusters.md). Rendezvous ownership
// alone is not enough: when a node returns, it sees its peers before they see it, and for a while both
// it and the node that covered for it would own the same rows under their two different views — two
// holders, two grants. So every node publishes, with each heartbeat, the node list it holds rows by
// (its *applied* view: published only after the rows it no longer owns were dropped), and a node holds
// a row only if
//   (1) it owns the row under its own view (self plus the peers whose heartbeat is fresh), and
//   (2) no live peer's published view gives the row to that peer.
// Two nodes whose views both contain each other can never both pass (1) for one row — rendezvous picks
// the higher weight of the two in both views — so (2) only matters while one of them does not yet see
// the other, which is exactly the join: the newcomer abstains until the old holder has published a view
// that includes it. A peer whose heartbeat went stale is out of the view and its published view no
// longer counts: its rows are picked up at once. (If it was only cut off and still alive, both sides
// hold its rows until the partition heals — the price of having no coordinator.)
import type { HandoffLease } from './handoff.js';
import { Ownership, type OwnershipView } from './ownership.js';

/** One node's heartbeat as replicated: when it last beat and the node list it holds rows by. */
export interface NodeBeat {
  node: string;
  beatAt: number;
  /** The applied view, or null while the node holds nothing yet (waiting for peers, or starting). */
  view: readonly string[] | null;
  /** Leases the node has out on rows it no longer holds (util/cluster/handoff.ts); none when absent. */
  handoff?: readonly HandoffLease[];
}

/**
 * When this node heard each peer's beat. A beat's age is counted from the later of its own time and the
 * moment this node first read it: a peer whose beats keep arriving is alive however far behind its beats
 * are. Under a write burst a node's replication runs behind by tens of seconds (bench/cluster-scale.ts:
 * beats 15–25 s old, still arriving about every second); counted by their own time alone, such live peers
 * would leave, and two nodes would hold and grant the same rows. A peer whose beats stop arriving
 * ages from the last one heard, so a stopped or stuck node still leaves within the window. The first
 * sighting of a peer counts from the beat's own time (a row left by a node that stopped long ago is old),
 * and a peer whose clock runs behind this one's is counted present from its second beat on.
 */
export class BeatClock {
  private readonly heard = new Map<string, { beatAt: number; heardAt: number | null }>();

  /** `beats` with each beatAt as this node counts it at `now` (the later of written and first read). */
  read(beats: readonly NodeBeat[], now: number): NodeBeat[] {
    const seen = new Set<string>();
    const out = beats.map((b) => {
      seen.add(b.node);
      const h = this.heard.get(b.node);
      if (h === undefined) {
        this.heard.set(b.node, { beatAt: b.beatAt, heardAt: null });
        return b;
      }
      if (h.beatAt !== b.beatAt) {
        h.beatAt = b.beatAt;
        h.heardAt = now;
      }
      return h.heardAt !== null && h.heardAt > b.beatAt ? { ...b, beatAt: h.heardAt } : b;
    });
    for (const node of [...this.heard.keys()]) if (!seen.has(node)) this.heard.delete(node);
    return out;
  }
}

/** A peer counts as present while its last beat, as BeatClock counts it, is at most this old (ms). */
export function beatStaleAfterMs(beatIntervalMs: number): number {
  // A false departure makes two nodes hold one row: with a 5 s window a 30,000-row drain on three loaded
  // 2-core nodes (bench/cluster-drain.ts, load 8–11) granted 3,032 rows twice. So the window is wide:
  // 15 s, or five beats when beats are slower. Still well inside the default maintenance tick.
  return Math.max(15_000, 5 * beatIntervalMs);
}

/**
 * The shorter window that applies while Harper also reports the peer's replication connection down: a
 * beat this old from a peer whose connection has been down at least as long is a departure. Never the
 * only signal — a connection that drops while beats still arrive (or a beat that lags while the
 * connection is up, as under load) keeps the peer present until the full window.
 */
export function quickStaleAfterMs(beatIntervalMs: number): number {
  return Math.max(3000, 3 * beatIntervalMs);
}

/** The replication connection as a second departure signal (services/cluster/connections.ts). */
export interface ConnectionSignal {
  /** Peer name -> since when (this node's clock) its connection has been seen down, without a break. */
  downSince: ReadonlyMap<string, number>;
  beatEveryMs: number;
}

/** Why a peer with a beat is not present (null while it is): which of the two windows let it go. */
export type Absence =
  { kind: 'heartbeat'; beatAgeMs: number } | { kind: 'connection'; beatAgeMs: number; downForMs: number };

/**
 * One peer's beat against the windows: gone by the heartbeat when its beat is older than the full
 * window; gone by the connection when its connection has been down for the quick window and its beat is
 * as old. Anything else (a socket down while beats still arrive, a beat lagging with the socket up) is
 * present.
 */
export function absenceOf(
  beat: NodeBeat,
  now: number,
  staleAfterMs: number,
  connection?: ConnectionSignal,
): Absence | null {
  const beatAgeMs = now - beat.beatAt;
  if (beatAgeMs > staleAfterMs) return { kind: 'heartbeat', beatAgeMs };
  const downSince = connection?.downSince.get(beat.node);
  if (downSince === undefined) return null;
  const quick = quickStaleAfterMs(connection!.beatEveryMs);
  const downForMs = now - downSince;
  return beatAgeMs > quick && downForMs >= quick ? { kind: 'connection', beatAgeMs, downForMs } : null;
}

/**
 * The configured peers whose heartbeat is fresh. Configured means listed in Harper's node table: a beat
 * from a node that was removed no longer makes it a member. With a connection signal, a peer whose
 * connection has been down for the quick window and whose beat is as old leaves at once.
 */
export function presentPeers(
  self: string,
  configured: readonly string[],
  beats: readonly NodeBeat[],
  now: number,
  staleAfterMs: number,
  connection?: ConnectionSignal,
): NodeBeat[] {
  const wanted = new Set(configured.filter((n) => n !== self));
  return beats.filter(
    (b) => b.node !== self && wanted.has(b.node) && absenceOf(b, now, staleAfterMs, connection) === null,
  );
}

/**
 * Ownership as the keeper uses it (`owns` decides what it holds), with the peers' published views as
 * the guard of rule (2). `nodes` are this node plus the present peers; `ownerOf` is plain rendezvous
 * over them (the stall sweep charges a pair on its owner).
 */
export class HoldingView implements OwnershipView {
  readonly nodes: readonly string[];
  readonly self: string;
  /** Plain rendezvous over this node and the present peers, before the peers' views are consulted. */
  private readonly base: Ownership;
  private readonly peerViews: ReadonlyArray<{ node: string; view: Ownership }>;
  private readonly signature: string;
  private readonly present: readonly NodeBeat[];

  constructor(self: string, present: readonly NodeBeat[]) {
    this.base = new Ownership(
      present.map((b) => b.node),
      self,
    );
    this.nodes = this.base.nodes;
    this.self = self;
    this.present = present;
    this.peerViews = present
      .filter((b): b is NodeBeat & { view: readonly string[] } => b.view !== null && b.view.length > 0)
      .map((b) => ({ node: b.node, view: new Ownership(b.view, b.node) }))
      .sort((x, y) => (x.node < y.node ? -1 : x.node > y.node ? 1 : 0));
    this.signature = this.peerViews.map((p) => `${p.node}:${p.view.nodes.join(',')}`).join(';');
  }

  ownerOf(key: string): string {
    return this.base.ownerOf(key);
  }

  ownerOfHash(hi: number, lo: number): string {
    return this.base.ownerOfHash(hi, lo);
  }

  owns(key: string): boolean {
    if (!this.base.owns(key)) return false;
    for (const p of this.peerViews) if (p.view.ownerOf(key) === p.node) return false;
    return true;
  }

  ownsHash(hi: number, lo: number): boolean {
    if (!this.base.ownsHash(hi, lo)) return false;
    for (const p of this.peerViews) if (p.view.ownerOfHash(hi, lo) === p.node) return false;
    return true;
  }

  /**
   * The leases present peers hand over (util/cluster/handoff.ts) on rows this view holds, with the
   * peer each came from: this node must not grant those rows before the leases end.
   */
  handedOver(): Array<{ from: string; lease: HandoffLease }> {
    const out: Array<{ from: string; lease: HandoffLease }> = [];
    for (const b of this.present)
      for (const lease of b.handoff ?? [])
        if (this.ownsHash(lease.hi, lease.lo)) out.push({ from: b.node, lease });
    return out;
  }

  /** The same holding decision for every key: same nodes and the same published peer views. */
  sameMembership(other: OwnershipView): boolean {
    return (
      other instanceof HoldingView &&
      this.base.sameMembership(other.base) &&
      other.signature === this.signature
    );
  }

  /** Peers whose published view still lists a different membership than ours (rows may be moving). */
  settling(): string[] {
    const mine = this.nodes.join(',');
    return this.peerViews.filter((p) => p.view.nodes.join(',') !== mine).map((p) => p.node);
  }
}
