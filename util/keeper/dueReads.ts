// The keeper's due reads: due counts per queue, each queue's oldest due row, and the counting parts of
// the queue-state document. They walk class heads, not rows, over what KeeperCore holds; apart from
// closing flow minutes (syncDue) they change nothing. Pure: the clock is an argument.
import type { Bucket } from './keeperClass.js';
import type { KeeperClasses } from './classSet.js';
import type { FlowLedger } from './flow.js';
import type { HeldRows } from './heldRows.js';
import { queueState, type QueueStateCounts } from './stateCounts.js';
import type { DueRow, DueSummary } from './types.js';
import { MINUTE_MS, minuteOf } from '../time.js';

export class DueReads {
  constructor(
    private readonly rows: HeldRows<Bucket>,
    private readonly classes: KeeperClasses,
    private readonly flow: FlowLedger,
  ) {}

  /** Due counts per queue and each queue's oldest due verified row; walks class heads, not rows. */
  dueSummary(now: number): DueSummary {
    const summary: DueSummary = { due: 0, dueVerified: 0, byQueue: new Map() };
    if (!Number.isFinite(minuteOf(now))) return summary;
    this.classes.syncDue(now, this.flow);
    for (const cls of this.classes.list) {
      let queue = summary.byQueue.get(cls.route);
      if (queue === undefined) {
        queue = { due: 0, dueVerified: 0, oldestVerifiedDue: null };
        summary.byQueue.set(cls.route, queue);
      }
      queue.due += cls.dueRows;
      summary.due += cls.dueRows;
      if (!cls.verified || cls.dueRows === 0) continue;
      queue.dueVerified += cls.dueRows;
      summary.dueVerified += cls.dueRows;
      const head = cls.order[cls.firstLive()]!; // dueRows > 0, so the first bucket with rows is due
      if (queue.oldestVerifiedDue === null || head.minute * MINUTE_MS < queue.oldestVerifiedDue.dueMs) {
        queue.oldestVerifiedDue = this.firstRow(head, undefined);
      }
    }
    return summary;
  }

  /** The earliest-due row of `queue` that is due at `now`, optionally verified only and not skipped. */
  oldestDue(
    queue: string,
    now: number,
    options: { verifiedOnly?: boolean; skip?: (key: string) => boolean } = {},
  ): DueRow | null {
    const nowMinute = minuteOf(now);
    let best: DueRow | null = null;
    for (const cls of this.classes.list) {
      if (cls.route !== queue || (options.verifiedOnly === true && !cls.verified)) continue;
      const first = cls.firstLive();
      const order = cls.order;
      for (let i = first; i < order.length; i = cls.nextLive(i + 1)) {
        const bucket = order[i]!;
        if (bucket.minute > nowMinute || (best !== null && bucket.minute * MINUTE_MS >= best.dueMs)) break;
        const found = this.firstRow(bucket, options.skip);
        if (found !== null) {
          best = found;
          break;
        }
      }
    }
    return best;
  }

  /** The counting parts of the queue-state document (docs/monitoring.md). Also advances the cameDue count. */
  state(now: number): QueueStateCounts {
    this.classes.syncDue(now, this.flow);
    return queueState(this.classes.list, now, this.flow);
  }

  /** Closes the flow minute: counts rows whose due minute passed since the last call. Returns that count. */
  tick(now: number): number {
    return this.classes.syncDue(now, this.flow);
  }

  private firstRow(bucket: Bucket, skip: ((key: string) => boolean) | undefined): DueRow | null {
    let found: string | null = null;
    this.rows.eachKey(bucket, (key) => {
      if (skip !== undefined && skip(key)) return true;
      found = key;
      return false;
    });
    if (found === null) return null;
    const cls = bucket.owner;
    return {
      key: found,
      dueMs: bucket.minute * MINUTE_MS,
      fromSitemap: cls.fromSitemap,
      verified: cls.verified,
      mark: cls.mark,
    };
  }
}
