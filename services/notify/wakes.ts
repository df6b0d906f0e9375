// Notify on this node (SPEC §6): the dispatcher runs on worker 0 only, so rate limits, edge pacing and
// health writes have one owner. `created` edges come from the keeper's per-queue due summary on worker 0;
// `requeued` signals come from leases the keeper finds expired on its publish tick; `stalled` wakes come
// from the stall ledger's sweep on worker 0. The edge logic itself is util/notify/edges.ts.
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { LeaseTable } from '../../util/leases/table.js';
import { EdgeDetector, type EdgeRow, type QueueDueCounts } from '../../util/notify/edges.js';
import type { Duty } from '../keeper/maintenance.js';
import type { Wake, WakeJob, WakeReason } from './dispatcher.js';

/** What the service needs of the dispatcher (services/notify/dispatcher.ts). */
export interface WakeSink {
  fire(wake: Wake): Promise<number>;
  prune(now: number): number;
}

export interface NotifyDeps {
  config: () => QueueKeeperConfig;
  /** The sealing key; null: nothing can be sent. */
  sealKey: () => Buffer | null;
  /** Builds the dispatcher (once, on start). */
  createDispatcher: () => WakeSink;
  /** Worker 0's keeper, for the oldest due verified row of a queue. */
  keeper: () =>
    | {
        core: {
          oldestDue(
            queue: string,
            now: number,
            options: { verifiedOnly?: boolean; skip?: (key: string) => boolean },
          ): EdgeRow | null;
        };
      }
    | undefined;
  leases: () => Pick<LeaseTable, 'isLeased'>;
  destroyExpiredSecrets: (now: number) => Promise<number>;
  log: { info: (...args: unknown[]) => void; warn: (...args: unknown[]) => void };
}

function wakeJob(row: EdgeRow): WakeJob {
  return { id: row.key, url: row.key, dueAt: row.dueMs, fromSitemap: row.fromSitemap };
}

export class NotifyService {
  private dispatcher: WakeSink | undefined;
  private readonly edges: EdgeDetector;

  constructor(private readonly deps: NotifyDeps) {
    this.edges = new EdgeDetector(() => deps.config().notify.edgeCooldown);
  }

  /** Worker 0: builds the dispatcher. */
  start(): void {
    if (this.dispatcher) return;
    this.dispatcher = this.deps.createDispatcher();
    if (!this.available())
      this.deps.log.warn('notify: nothing will be dispatched (no sealing key or hooks switched off)');
  }

  /**
   * False when nothing can be sent from this worker: no dispatcher here (it runs on worker 0), no sealing
   * key, or the notify.maxHooksPerFleet kill switch. The stall sweep charges nothing then.
   */
  available(): boolean {
    return (
      this.dispatcher !== undefined &&
      this.deps.sealKey() !== null &&
      this.deps.config().notify.maxHooksPerFleet > 0
    );
  }

  /** The stall ledger charged (fleet, queue): wake that fleet's receiving hooks. Worker 0 only. */
  fireStalled(fleetId: string, queue: string, job: EdgeRow, now: number): void {
    if (!this.dispatcher) return;
    void this.dispatcher.fire({ reason: 'stalled', queue, job: wakeJob(job), fleetId, createdAt: now });
  }

  private fireEdge(reason: Exclude<WakeReason, 'stalled'>, queue: string, row: EdgeRow, now: number): void {
    // Pacing is spent only on an edge that can be sent.
    if (!this.dispatcher || !this.available()) return;
    if (!this.edges.admit(queue, now)) return;
    void this.dispatcher.fire({ reason, queue, job: wakeJob(row), createdAt: now });
  }

  /** Called by the keeper on every publish tick: a queue going from no due verified rows to some is `created`. */
  onDueSummary(summary: { byQueue: ReadonlyMap<string, QueueDueCounts> }, now: number): void {
    for (const edge of this.edges.created(summary.byQueue))
      this.fireEdge('created', edge.queue, edge.row, now);
  }

  /**
   * Leases of `queue` expired unreported (the keeper finds them on its publish tick, worker 0): wake the
   * queue's fleets, naming its oldest verified row nobody holds; with none there is nothing to wake anyone
   * for (and a queue of unverified rows never names one).
   */
  onRequeued(queue: string, now: number): void {
    const leases = this.deps.leases();
    const oldest = this.deps.keeper()?.core.oldestDue(queue, now, {
      verifiedOnly: true,
      skip: (k) => leases.isLeased(k, now),
    });
    if (oldest) this.fireEdge('requeued', queue, oldest, now);
  }

  /** Maintenance duty: destroys previous hook secrets whose 24 h rotation grace has ended. */
  secretCleanupDuty(): Duty {
    return {
      name: 'secret-cleanup',
      runOnce: async (now) => {
        this.dispatcher?.prune(now);
        const destroyed = await this.deps.destroyExpiredSecrets(now);
        if (destroyed > 0)
          this.deps.log.info(`notify: destroyed ${destroyed} expired previous hook secret(s)`);
        return { destroyed };
      },
    };
  }
}
