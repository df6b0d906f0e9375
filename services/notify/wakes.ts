// Notify on this node (docs/wakes.md): the dispatcher runs on worker 0 only, so rate limits, edge pacing and
// health writes have one owner. Alone, `created` edges come from the keeper's per-queue due summary on worker
// 0 and `requeued` signals from leases the keeper finds expired on its publish tick (the edge logic is
// util/notify/edges.ts). Clustered (more than one node present), both are cluster-wide events
// (docs/clusters.md): the due summary and an expiry do not fire here by themselves; an expiry leaves a
// mark that the stall sweep publishes with this node's due view, and the sweep hands the merged views to
// `judgeCluster`, which fires the edges of the queues this node judges (util/cluster/clusterEdges.ts).
// `stalled` wakes come from the stall ledger's sweep on worker 0 in both cases.
import {
  ClusterEdges,
  queueJudgeKey,
  type ClusterLook,
  type Judges,
} from '../../util/cluster/clusterEdges.js';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { LeaseTable } from '../../util/leases/table.js';
import { EdgeDetector, type EdgeRow, type QueueDueCounts } from '../../util/notify/edges.js';
import type { Duty } from '../../util/duties/scheduler.js';
import type { Wake, WakeJob, WakeReason } from './dispatcher.js';
import { urlOfKey } from '../../util/schedule/rowKey.js';

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
  /** The membership the keeper holds rows by (undefined before it starts); clustered when it has 2+ nodes. */
  ownership: () => Judges | undefined;
  destroyExpiredSecrets: (now: number) => Promise<number>;
  log: { info: (...args: unknown[]) => void; warn: (...args: unknown[]) => void };
}

/** A wake names the row's key as the job's id and its URL as the job's url, as a claimed job does. */
function wakeJob(row: EdgeRow): WakeJob {
  return { id: row.key, url: urlOfKey(row.key), dueAt: row.dueMs, fromSitemap: row.fromSitemap };
}

export class NotifyService {
  private dispatcher: WakeSink | undefined;
  private readonly edges: EdgeDetector;
  private readonly cluster = new ClusterEdges();
  /** Clustered: the last unreported expiry per queue on this node, published with its due view. */
  private readonly marks = new Map<string, number>();

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

  /** The membership when clustered (two or more nodes present), else undefined. */
  private clustered(): Judges | undefined {
    const owners = this.deps.ownership();
    return owners && owners.nodes.length > 1 ? owners : undefined;
  }

  /**
   * Called by the keeper on every publish tick: a queue going from no due verified rows to some is
   * `created`. Clustered, this node's rows are only its share: the baseline still moves (so a node left
   * alone again judges from a current one), but the cluster's judge decides (`judgeCluster`).
   */
  onDueSummary(summary: { byQueue: ReadonlyMap<string, QueueDueCounts> }, now: number): void {
    const created = this.edges.created(summary.byQueue);
    if (this.clustered()) return;
    for (const edge of created) this.fireEdge('created', edge.queue, edge.row, now);
  }

  /** The queue's oldest due verified row on this node that nobody holds. */
  private oldestUnleased(queue: string, now: number): EdgeRow | null {
    const leases = this.deps.leases();
    return (
      this.deps.keeper()?.core.oldestDue(queue, now, {
        verifiedOnly: true,
        skip: (k) => leases.isLeased(k, now),
      }) ?? null
    );
  }

  /**
   * Leases of `queue` expired unreported (the keeper finds them on its publish tick, worker 0): wake the
   * queue's fleets, naming its oldest verified row nobody holds; with none there is nothing to wake anyone
   * for (and a queue of unverified rows never names one). Clustered, the expiry is marked for the queue's
   * judge; when that is this node, it answers at once.
   */
  onRequeued(queue: string, now: number): void {
    const owners = this.clustered();
    if (!owners) {
      const oldest = this.oldestUnleased(queue, now);
      if (oldest) this.fireEdge('requeued', queue, oldest, now);
      return;
    }
    this.marks.set(queue, Math.max(now, this.marks.get(queue) ?? -Infinity));
    if (owners.ownerOf(queueJudgeKey(queue)) !== owners.self) return;
    const edge = this.cluster.localRequeue({
      now,
      owners,
      queue,
      job: this.oldestUnleased(queue, now),
      cooldownMs: this.deps.config().notify.edgeCooldown,
      send: this.available(),
    });
    if (edge) this.fireClusterEdge(edge, now);
  }

  /**
   * Clustered: this node's requeue marks to publish, those at or after `since`; older ones are
   * forgotten (every judge has had ticks enough to read them).
   */
  requeueMarks(since: number): ReadonlyMap<string, number> {
    for (const [queue, at] of this.marks) if (at < since) this.marks.delete(queue);
    return new Map(this.marks);
  }

  /**
   * The stall sweep's look at the merged due views (maintenance tick, clustered): fires the `created`
   * and `requeued` edges of the queues this node judges. Returns how many fired.
   */
  judgeCluster(look: ClusterLook): number {
    const edges = this.cluster.decide({
      ...look,
      cooldownMs: this.deps.config().notify.edgeCooldown,
      send: this.available(),
    });
    for (const edge of edges) this.fireClusterEdge(edge, look.now);
    return edges.length;
  }

  private fireClusterEdge(
    edge: { reason: 'created' | 'requeued'; queue: string; job: EdgeRow },
    now: number,
  ) {
    void this.dispatcher?.fire({
      reason: edge.reason,
      queue: edge.queue,
      job: wakeJob(edge.job),
      createdAt: now,
    });
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
