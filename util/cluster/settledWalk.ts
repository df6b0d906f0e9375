// When a node walks its table once a cluster membership change has settled (docs/clusters.md, "A node
// that returns"). The drops and walks at each change run while the nodes' views still move: a row can fall
// between two nodes that each see it as the other's for a moment, and a write that arrives in that moment
// can leave it with no holder. One walk under the views every node agrees on takes such rows up. Pure:
// services/keeper/leadership.ts asks it on every membership beat and runs the walk.

/** The walk waits at least this many ticks after a change: writes made under the old view replicate first. */
export const SETTLED_WALK_AFTER_TICKS = 1;
/**
 * A change whose peers never all publish this node's view (one stuck, or a view that keeps moving) still
 * gets its walk this long after it, at the latest: the safety net must not wait on the peer it covers for.
 */
export const SETTLED_WALK_CAP_MS = 30_000;

export class SettledWalkPlan {
  /** The last change that has not had its walk yet (null: none pending). */
  private changedAt: number | null = null;

  /** The membership changed at `now` (or the keeper started clustered): a walk is owed once it settles. */
  changed(now: number): void {
    this.changedAt = now;
  }

  /** Whether a walk is owed. */
  get pending(): boolean {
    return this.changedAt !== null;
  }

  /**
   * Whether the walk runs at `now`: a tick after the last change once no present peer still publishes
   * another view (`settling`), or SETTLED_WALK_CAP_MS after it whatever the peers publish.
   */
  due(now: number, tickMs: number, settling: boolean): boolean {
    if (this.changedAt === null) return false;
    const since = now - this.changedAt;
    if (since < SETTLED_WALK_AFTER_TICKS * tickMs) return false;
    return !settling || since >= Math.max(SETTLED_WALK_CAP_MS, SETTLED_WALK_AFTER_TICKS * tickMs);
  }

  /**
   * A walk that began at `startedAt` completed: it settles every change before it. A change that came
   * while it ran still owes one (its rows were walked under the view before it).
   */
  walked(startedAt: number): void {
    if (this.changedAt !== null && this.changedAt < startedAt) this.changedAt = null;
  }
}
