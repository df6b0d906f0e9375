// Cluster-wide `created` and `requeued` wakes, once per cluster per cooldown (docs/clusters.md). Alone, a
// node judges a queue's edges from its own keeper (util/notify/edges.ts). Clustered, each node holds only its
// own rows, so judged per node a queue rings once per node that sees it go from nothing due to something due.
// Here the judge of a queue is its rendezvous owner (over the present nodes, keyed `queue:<name>`): it reads
// the merged per-node due views (every node publishes its own, services/stall/dueSummaries.ts) on its
// maintenance tick and fires for the cluster. A requeue is seen only by the node whose lease expired: that
// node marks it in its published view (`requeuedAt`), and the queue's judge answers the newest mark it has
// not seen yet. When the judge is that node itself it answers at once (`localRequeue`, within the publish
// tick like a lone node); otherwise one tick later.
//
// A mark is answered once: seen inside the cooldown (or with no unleased due row to name) it is spent,
// as a lone node drops an edge its cooldown refuses — a late `requeued` could name a row long claimed.
//
// Limits, by design: while the members disagree on who is present (a departure or return in flight,
// one tick or so), two nodes can each judge a queue and a wake can ring twice. A queue's cooldown lives
// on its judge: when the judge changes, the new one starts without it (its first look is a baseline for
// the requeue marks, and the due baseline is cluster-wide, so it never fires `created` for a queue that
// was already due; a `created` can still come early after a move, paced by the new judge's cooldown).
// While a departed node's rows are being picked up by the others' walk, its queues can look drained and
// then due again: a `created` then rings once for the cluster (the work did move), not once per node.
import type { OwnershipView } from './ownership.js';

/** What the judge needs of the membership (util/cluster/ownership.ts OwnershipView). */
export type Judges = Pick<OwnershipView, 'nodes' | 'self' | 'ownerOf'>;

/** One node's published view of one queue: due gate-passing rows, the oldest unleased one, requeues. */
export interface NodeQueueView {
  queue: string;
  hasGateDue: boolean;
  oldestGateDue: { key: string; dueMs: number; fromSitemap: boolean } | null;
  /** The last instant a lease of this queue expired unreported on that node (null: never). */
  requeuedAt: number | null;
}

export interface ClusterEdge {
  reason: 'created' | 'requeued';
  queue: string;
  job: { key: string; dueMs: number; fromSitemap: boolean };
}

export interface EdgeInput {
  now: number;
  /** Rendezvous over the present nodes; `self` is this node. */
  owners: Judges;
  /** The views of every present node, this node's included, one array per node. */
  views: readonly (readonly NodeQueueView[])[];
  /**
   * Every present node has a fresh view and this node's own is whole. When not, a queue can look
   * drained only because its holder's view is missing (or short): no `created`, the baseline stays.
   */
  complete: boolean;
  cooldownMs: number;
  /**
   * False when nothing can be sent (no sealing key, hooks switched off): the baselines still move and
   * marks are spent, but nothing fires and no cooldown starts — as a lone node spends pacing only on
   * an edge it can send. Default true.
   */
  send?: boolean;
}

/** One look as the stall sweep gathers it; the notify service adds the cooldown and whether it can send. */
export type ClusterLook = Omit<EdgeInput, 'cooldownMs' | 'send'>;

export function queueJudgeKey(queue: string): string {
  return `queue:${queue}`;
}

type Row = ClusterEdge['job'];

function older(a: Row, b: Row | null): boolean {
  return b === null || a.dueMs < b.dueMs || (a.dueMs === b.dueMs && a.key < b.key);
}

export class ClusterEdges {
  /** Queues with due gate-passing rows at the last complete look; null before the first (a baseline). */
  private due: Set<string> | null = null;
  private readonly lastEdgeAt = new Map<string, number>();
  /** The newest requeue mark per queue already answered, spent, or taken as a baseline. */
  private readonly requeueSeen = new Map<string, number>();
  /** The membership of the last look: a queue whose judge was another node has no mark history here. */
  private lastOwners: Judges | undefined;

  private mayFire(queue: string, now: number, cooldownMs: number): boolean {
    const last = this.lastEdgeAt.get(queue);
    return last === undefined || now - last >= cooldownMs;
  }

  private judges(owners: Judges, queue: string): boolean {
    return owners.ownerOf(queueJudgeKey(queue)) === owners.self;
  }

  /**
   * A lease of `queue` expired unreported on this node at `now`. When this node judges the queue it
   * answers at once, naming `job` (its own oldest unleased due gate-passing row), and the mark it
   * publishes later is already seen. Otherwise (or with no row to name) the judge answers from the
   * board on its tick. Returns the edge to fire, if any.
   */
  localRequeue(input: {
    now: number;
    owners: Judges;
    queue: string;
    job: Row | null;
    cooldownMs: number;
    send?: boolean;
  }): ClusterEdge | null {
    const { now, queue, job } = input;
    // No history is needed: the expiry is fresh and local, so no other node can have answered it yet.
    if (!job || !this.judges(input.owners, queue)) return null;
    const seen = this.requeueSeen.get(queue);
    if (seen !== undefined && seen >= now) return null;
    this.requeueSeen.set(queue, now);
    if (input.send === false || !this.mayFire(queue, now, input.cooldownMs)) return null;
    this.lastEdgeAt.set(queue, now);
    return { reason: 'requeued', queue, job: { ...job } };
  }

  /** This node judged `queue` at the last look as well (so its mark history is its own). */
  private judgedBy(previous: Judges, owners: Judges, queue: string): boolean {
    return previous.self === owners.self && this.judges(previous, queue);
  }

  decide(input: EdgeInput): ClusterEdge[] {
    const send = input.send !== false;
    const merged = new Map<string, { hasGateDue: boolean; oldest: Row | null; requeuedAt: number | null }>();
    for (const nodeViews of input.views)
      for (const v of nodeViews) {
        const m = merged.get(v.queue) ?? { hasGateDue: false, oldest: null, requeuedAt: null };
        m.hasGateDue ||= v.hasGateDue;
        const o = v.oldestGateDue;
        if (o && older(o, m.oldest)) m.oldest = { ...o };
        if (v.requeuedAt !== null && (m.requeuedAt === null || v.requeuedAt > m.requeuedAt))
          m.requeuedAt = v.requeuedAt;
        merged.set(v.queue, m);
      }

    const edges: ClusterEdge[] = [];
    const previous = this.lastOwners;
    for (const [queue, m] of merged) {
      if (!this.judges(input.owners, queue)) continue;
      if (m.requeuedAt !== null) {
        const seen = this.requeueSeen.get(queue);
        if (seen === undefined || m.requeuedAt > seen) {
          this.requeueSeen.set(queue, m.requeuedAt);
          // A queue this node did not judge at the last look (a first look, or a judge that moved here):
          // its marks are history the previous judge answered, or not; take them as the baseline.
          const baseline = previous === undefined || !this.judgedBy(previous, input.owners, queue);
          if (!baseline && send && m.oldest && this.mayFire(queue, input.now, input.cooldownMs)) {
            this.lastEdgeAt.set(queue, input.now);
            edges.push({ reason: 'requeued', queue, job: m.oldest });
            continue;
          }
        }
      }
      if (!send || !input.complete || this.due === null || !m.hasGateDue || this.due.has(queue)) continue;
      if (!m.oldest || !this.mayFire(queue, input.now, input.cooldownMs)) continue;
      this.lastEdgeAt.set(queue, input.now);
      edges.push({ reason: 'created', queue, job: m.oldest });
    }
    this.lastOwners = input.owners;
    if (input.complete) this.due = new Set([...merged].filter(([, m]) => m.hasGateDue).map(([q]) => q));
    return edges;
  }
}
