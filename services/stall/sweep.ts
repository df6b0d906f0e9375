// The stall sweep (docs/wakes.md, "The stall sweep"), one duty of worker 0's maintenance tick: gather the
// inputs, let util/stall/rules plan, drain, then charge each planned pair under its lock and wake it only
// once the charge has committed. The keeper's in-memory view is the only source of "due", and it can be short
// of rows: before this worker's keeper serves, while it loads (it serves claims from the first chunk on), and
// after a load that ended partial or a subscription that closed. A drain over such a view deletes ledger rows
// of queues that still have due work — resetting their budgets, so the next sweep wakes them again inside the
// cooldown (the double wake after a restart). So: no sweep at all until the load has completed, and no drain
// unless the keeper can vouch its view is whole.
import type { ClusterLook, NodeQueueView } from '../../util/cluster/clusterEdges.js';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { LeaseTable } from '../../util/leases/table.js';
import type { MetricName } from '../../util/metrics/catalogue.js';
import {
  mergeDueViews,
  planSweep,
  type PairKey,
  type FleetView,
  type HookView,
  type LedgerRow,
  type QueueDueView,
  type RepresentativeRow,
  type StallCharge,
  type StallConfig,
} from '../../util/stall/rules.js';
import type { KeeperPhase } from '../../util/sharedMemory/keeperSignal.js';
import type { Duty } from '../../util/duties/scheduler.js';

export interface StallSweepResult extends Record<string, number> {
  drained: number;
  nudged: number;
}

/** What the sweep reads of worker 0's keeper (services/keeper/service.ts KeeperService). */
export interface SweepKeeper {
  serving: boolean;
  loadComplete: boolean;
  phase: KeeperPhase;
  partial: boolean;
  resyncing: boolean;
  core: {
    dueSummary(now: number): { byQueue: ReadonlyMap<string, { dueVerified: number }> };
    oldestDue(
      queue: string,
      now: number,
      options: { verifiedOnly?: boolean; skip?: (key: string) => boolean },
    ): RepresentativeRow | null;
  };
}

/** The cluster membership the keeper holds rows by (util/cluster/ownership.ts Ownership). */
export interface SweepOwnership {
  readonly nodes: readonly string[];
  readonly self: string;
  ownerOf(key: string): string;
}

/** The stall ledger (services/stall/ledger.ts): conditional writes under the pair's lock. */
export interface SweepLedger {
  read(): Promise<LedgerRow[]>;
  charge(
    charge: StallCharge,
    now: number,
    lastClaimAt: number | undefined,
    cfg: StallConfig,
  ): Promise<boolean>;
  drain(rows: LedgerRow[]): Promise<number>;
  idOf(pair: PairKey): string;
}

/** The per-node due views of a cluster (services/stall/dueSummaries.ts). */
export interface SweepDueBoard {
  publish(node: string, views: readonly NodeQueueView[], now: number, refreshMs: number): Promise<number>;
  peers(
    self: string,
    nodes: readonly string[],
    now: number,
    maxAgeMs: number,
  ): Promise<{ views: NodeQueueView[][]; missing: string[] }>;
}

export interface StallSweepDeps {
  keeper: () => SweepKeeper | undefined;
  ownership: () => SweepOwnership | undefined;
  leases: () => Pick<LeaseTable, 'isLeased'>;
  ledger: SweepLedger;
  dueBoard: SweepDueBoard;
  claimMarks: () => Promise<Map<string, number>>;
  fleets: () => Promise<FleetView[]>;
  hooks: () => Promise<HookView[]>;
  /** False when nothing can be sent (no dispatcher here, no sealing key, hooks switched off). */
  notifyAvailable: () => boolean;
  /** Wakes the fleet's receiving hooks for the charged pair. */
  fireStalled: (fleetId: string, queue: string, job: RepresentativeRow, now: number) => void;
  /** Clustered: this node's unreported lease expiries per queue since `since` (NotifyService.requeueMarks). */
  requeueMarks: (since: number) => ReadonlyMap<string, number>;
  /** Clustered: the merged views go to the queues' judges of `created`/`requeued` (NotifyService.judgeCluster). */
  judgeEdges: (look: ClusterLook) => number;
  config: () => QueueKeeperConfig;
  /** `maintenance.tickInterval`: the sweep's pace, which bounds how old a peer's due view may be. */
  tickInterval: () => number;
  count: (name: MetricName, n: number, labels?: Record<string, string>) => void;
  log: {
    debug: (...args: unknown[]) => void;
    info: (...args: unknown[]) => void;
    error: (...args: unknown[]) => void;
  };
}

/** Rows of fleets that are gone or revoked: the revoke deletes them, but a charge racing it can leave one. */
function orphanRows(ledger: LedgerRow[], fleets: FleetView[], planned: LedgerRow[]): LedgerRow[] {
  const active = new Set(fleets.filter((f) => f.state === 'active').map((f) => f.id));
  const already = new Set(planned);
  return ledger.filter((r) => !active.has(r.fleetId) && !already.has(r));
}

export class StallSweep {
  constructor(private readonly deps: StallSweepDeps) {}

  /**
   * One QueueDueView per queue holding due verified rows (the wake gate: unverified rows never qualify a
   * queue and never name a wake). A queue left out counts as drained. `oldestGateDue` skips leased rows:
   * a queue whose due work is all in flight is busy, not stalled, and keeps its ledger row.
   */
  private dueViews(svc: SweepKeeper, now: number): QueueDueView[] {
    const leases = this.deps.leases();
    const views: QueueDueView[] = [];
    for (const [queue, due] of svc.core.dueSummary(now).byQueue) {
      if (due.dueVerified === 0) continue;
      const oldest = svc.core.oldestDue(queue, now, {
        verifiedOnly: true,
        skip: (key) => leases.isLeased(key, now),
      });
      const representative: RepresentativeRow | null = oldest
        ? { key: oldest.key, dueMs: oldest.dueMs, fromSitemap: oldest.fromSitemap }
        : null;
      views.push({ queue, hasGateDue: true, oldestGateDue: representative });
    }
    return views;
  }

  /**
   * The queues as the sweep sees them. Alone, this keeper's view. Clustered, each node holds only the
   * rows it owns: publish ours (with this node's requeue marks), merge the other nodes' fresh views, and
   * let only a pair's rendezvous owner charge it (one wake per cooldown across nodes). A node with no
   * fresh views makes the whole incomplete: then nothing is drained, because its queues may still hold
   * due work. The same merged views go to the `created`/`requeued` judges (docs/clusters.md), so a clustered
   * edge comes on the maintenance tick after this node's keeper saw it.
   */
  private async sweepView(
    svc: SweepKeeper,
    now: number,
  ): Promise<{ queues: QueueDueView[]; whole: boolean; mayCharge?: (pair: PairKey) => boolean }> {
    const local = this.dueViews(svc, now);
    const owners = this.deps.ownership();
    if (!owners || owners.nodes.length <= 1) return { queues: local, whole: true };
    const tick = this.deps.tickInterval();
    // A view older than this is a node that is gone; a mark is kept as long, so every judge reads it.
    const freshMs = 6 * tick + 5000;
    const marks = this.deps.requeueMarks(now - freshMs);
    const mine: NodeQueueView[] = local.map((v) => ({ ...v, requeuedAt: marks.get(v.queue) ?? null }));
    const withView = new Set(local.map((v) => v.queue));
    for (const [queue, at] of marks)
      if (!withView.has(queue)) mine.push({ queue, hasGateDue: false, oldestGateDue: null, requeuedAt: at });
    await this.deps.dueBoard.publish(owners.self, mine, now, 2 * tick);
    const peers = await this.deps.dueBoard.peers(owners.self, owners.nodes, now, freshMs);
    if (peers.missing.length > 0)
      this.deps.log.debug(
        `stall sweep: no fresh due view from ${peers.missing.join(', ')}; not draining this tick`,
      );
    const whole = peers.missing.length === 0;
    try {
      this.deps.judgeEdges({
        now,
        owners,
        views: [mine, ...peers.views],
        complete: whole && !svc.partial && !svc.resyncing,
      });
    } catch (e) {
      // The sweep's own work (drains, charges) does not depend on the edges.
      this.deps.log.error('cluster edge decision failed', e);
    }
    return {
      queues: mergeDueViews([local, ...peers.views]),
      whole,
      mayCharge: (pair) => owners.ownerOf(this.deps.ledger.idOf(pair)) === owners.self,
    };
  }

  async runOnce(now: number): Promise<StallSweepResult | Record<string, never>> {
    const { deps } = this;
    const svc = deps.keeper();
    if (!svc?.serving || !svc.loadComplete || svc.phase !== 'live') return {};
    const view = await this.sweepView(svc, now);
    const viewIsWhole = !svc.partial && !svc.resyncing && view.whole;
    const queues = view.queues;
    const stall = deps.config().stall;
    const [fleets, hooks, ledger, lastClaimAt] = await Promise.all([
      deps.fleets(),
      deps.hooks(),
      deps.ledger.read(),
      deps.claimMarks(),
    ]);
    const plan = planSweep({
      now,
      queues,
      fleets,
      hooks,
      ledger,
      lastClaimAt,
      config: stall,
      mayCharge: view.mayCharge,
    });
    // Clustered, a row is drained only by its pair's owner, like a charge.
    const mine = (r: LedgerRow) => !view.mayCharge || view.mayCharge(r);
    const drainable = viewIsWhole ? plan.drain.filter(mine) : [];
    const drained = await deps.ledger.drain([
      ...drainable,
      ...orphanRows(ledger, fleets, drainable).filter(mine),
    ]);

    // No receiver, no charge: with the dispatcher unable to send (no sealing key, or the hook kill switch)
    // a charge would spend the pair's budget on a wake nobody gets.
    if (!deps.notifyAvailable()) return { drained, nudged: 0 };

    let nudged = 0;
    for (const charge of plan.charges) {
      let charged: boolean;
      try {
        charged = await deps.ledger.charge(charge, now, lastClaimAt.get(charge.queue), stall);
      } catch (e) {
        deps.log.error(
          `stall charge failed for fleet ${charge.fleetId} queue ${JSON.stringify(charge.queue)}`,
          e,
        );
        continue;
      }
      if (!charged) continue; // another sweep charged it since our plan: its wake is the one wake
      nudged++;
      deps.count('stall_nudges_total', 1, { queue: charge.queue });
      try {
        deps.fireStalled(charge.fleetId, charge.queue, charge.representative, now);
      } catch (e) {
        // The charge stands (it is spent either way); the other pairs still get their wakes.
        deps.log.error(
          `stall wake failed for fleet ${charge.fleetId} queue ${JSON.stringify(charge.queue)}`,
          e,
        );
      }
    }
    if (nudged > 0) deps.log.info(`nudged stalled queues count=${nudged}`);
    return { drained, nudged };
  }

  /** The sweep as a maintenance duty. */
  duty(): Duty {
    return { name: 'stall-sweep', runOnce: (now) => this.runOnce(now) };
  }
}
