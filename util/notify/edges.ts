// The `created` and `requeued` wakes (docs/wakes.md) as plain logic: which queues just came due, and the
// per-queue pacing by notify.edgeCooldown. services/notify/wakes.ts feeds it the keeper's due summary
// and expired leases and fires what it admits.

/** The row an edge names: a queue's oldest due verified row. */
export interface EdgeRow {
  key: string;
  dueMs: number;
  fromSitemap: boolean;
}

/** One queue of the keeper's due summary, as far as edges care. */
export interface QueueDueCounts {
  dueVerified: number;
  oldestVerifiedDue: EdgeRow | null;
}

export class EdgeDetector {
  /** Last `created`/`requeued` wake per queue: edges are paced per queue. */
  private readonly lastEdgeAt = new Map<string, number>();
  /** Queues that had due verified rows at the last summary; null until the first one (a baseline). */
  private queuesWithDue: Set<string> | null = null;

  constructor(private readonly cooldownMs: () => number) {}

  /**
   * The keeper's summary of one publish tick: the queues that went from no due verified rows to some,
   * each with its oldest such row. The first summary is the baseline and names none (a restart would
   * otherwise wake every fleet for work that was already there).
   */
  created(byQueue: ReadonlyMap<string, QueueDueCounts>): Array<{ queue: string; row: EdgeRow }> {
    const next = new Set<string>();
    const edges: Array<{ queue: string; row: EdgeRow }> = [];
    for (const [queue, q] of byQueue) {
      if (q.dueVerified === 0 || q.oldestVerifiedDue === null) continue;
      next.add(queue);
      if (this.queuesWithDue !== null && !this.queuesWithDue.has(queue))
        edges.push({ queue, row: q.oldestVerifiedDue });
    }
    this.queuesWithDue = next;
    return edges;
  }

  /**
   * Whether an edge of `queue` may fire at `now`; admitting it starts the queue's cooldown. Created and
   * requeued edges share one cooldown per queue.
   */
  admit(queue: string, now: number): boolean {
    const last = this.lastEdgeAt.get(queue);
    if (last !== undefined && now - last < this.cooldownMs()) return false;
    this.lastEdgeAt.set(queue, now);
    return true;
  }
}
