// The readings a scrape takes at its own instant: leases from the lease table, keeper health from its
// signal, due rows and the per-queue series from the state document when the keeper can vouch for it.
// queue-state, the overview and the metrics answer from the same judgement (vouchedState). The same
// readings go to Harper analytics on worker 0's maintenance tick, so Harper Studio shows them without
// any Prometheus scraping. One HealthFigures per worker, built in resources.ts over the node's shared
// structures.
import type { Duty } from '../../util/duties/scheduler.js';
import { stateMaxAgeMs, type KeeperSignal } from '../../util/sharedMemory/keeperSignal.js';
import type { StateDoc } from '../../util/sharedMemory/stateDoc.js';
import type { LeaseTable } from '../../util/leases/table.js';
import { queueNames, queueSeries, type QueueStateLateness } from '../../util/metrics/queueSeries.js';
import type { QueueResultsReading } from '../../util/metrics/queueResults.js';
import type { LiveFigures, MetricValues } from './values.js';

/** The parts of the state document (services/keeper/stateDocument.ts) read here and by queue-state. */
export interface StateDocRead {
  now: {
    due: number;
    inFlight: number;
    paused: boolean;
    status: string;
    rowsByState?: Record<string, number>;
  };
  lateness: QueueStateLateness;
  trust: {
    live: boolean;
    exact: boolean;
    phase: string;
    stateAt: number;
    maxAgeMs: number;
    keeper?: { rows?: number; orphaned?: { rows: number; countedAt: number } | null };
  };
}

/** The document when the keeper can vouch for it, else the phase to report. */
export type VouchedState = { ok: true; doc: StateDocRead; maxAgeMs: number } | { ok: false; phase: string };

export interface HealthFiguresDeps {
  /** The node's lease table, keeper signal and state document (getters: sized at first use). */
  leases: () => Pick<LeaseTable, 'upkeep' | 'occupancy' | 'maxLeases'>;
  signal: () => Pick<KeeperSignal, 'read'>;
  state: () => Pick<StateDoc<StateDocRead>, 'read'>;
  /** The serving view at an instant (services/keeper/servingView.ts). */
  serving: (now: number) => { serving: boolean; stale: boolean };
  /** `queue.keeper.stateInterval`: a document older than stateMaxAgeMs of it is stale. */
  stateInterval: () => number;
  /** The configured routes: every queue gets its series, `unrouted` too. */
  routes: () => ReadonlyArray<{ name: string }>;
  /** The per-queue results and render times of these queues (MetricValues.resultReadings). */
  results: (queues: readonly string[]) => QueueResultsReading;
}

export class HealthFigures {
  constructor(private readonly deps: HealthFiguresDeps) {}

  /**
   * The lease figures as worker 0's last reconcile stored them (a read never rescans and rewrites the
   * lease table); before the first reconcile, the live gauge (which only ever drifts high).
   */
  leaseFigures(now: number): {
    occupancy: number;
    oldestExpiresAt: number | null;
    oldestGrantedAt: number | null;
  } {
    const leases = this.deps.leases();
    const stored = leases.upkeep.lastReconcile();
    if (stored && now - stored.at <= stateMaxAgeMs(this.deps.stateInterval())) return stored;
    return { occupancy: leases.occupancy(), oldestExpiresAt: null, oldestGrantedAt: null };
  }

  /**
   * The state document when the keeper can vouch for it: live, not stale, and a document no older
   * than maxAgeMs; otherwise the phase to report.
   */
  vouchedState(now: number): VouchedState {
    const read = this.deps.state().read();
    const signal = this.deps.signal().read();
    const maxAgeMs = stateMaxAgeMs(this.deps.stateInterval());
    const fresh = read !== null && now - read.doc.trust.stateAt <= maxAgeMs;
    if (read && fresh && signal.phase === 'live' && !this.deps.serving(now).stale)
      return { ok: true, doc: read.doc, maxAgeMs };
    return { ok: false, phase: read && !fresh && signal.phase === 'live' ? 'stale' : signal.phase };
  }

  liveFigures(now: number): LiveFigures {
    const leases = this.deps.leases();
    const occupancy = this.leaseFigures(now).occupancy;
    const view = this.deps.serving(now);
    const vouched = this.vouchedState(now);
    const doc = vouched.ok ? vouched.doc : null;
    const latest = this.deps.state().read();
    const queues = queueNames(this.deps.routes());
    const results = this.deps.results(queues);
    const perQueue = queueSeries(queues, doc?.lateness ?? null, leases.upkeep.leasesByQueue(now), now);
    return {
      keeper_live: this.deps.signal().read().phase === 'live' && view.serving && !view.stale ? 1 : 0,
      keeper_exact: doc?.trust.exact ? 1 : 0,
      // Unknown while the keeper cannot vouch for its numbers: NaN, never a stale figure shown as live.
      keeper_rows: doc?.trust.keeper?.rows ?? NaN,
      rows_by_state: rowsByState(doc),
      state_age: latest ? Math.max(0, now - latest.doc.trust.stateAt) / 1000 : NaN,
      leases_held: occupancy,
      lease_capacity: leases.maxLeases,
      lease_occupancy: occupancy / leases.maxLeases,
      due: doc ? doc.now.due : NaN,
      overdue: doc ? Math.max(0, doc.now.due - occupancy) : NaN,
      queue_due: perQueue.due,
      queue_oldest_due_age: perQueue.oldestDueAgeSeconds,
      queue_lateness: perQueue.latenessCadences,
      queue_leases: perQueue.leases,
      results: results.results,
      render_seconds: { histograms: results.renderSeconds },
    };
  }

  /** Worker 0's maintenance duty that records the live readings to Harper analytics (`queue_health`). */
  recordDuty(metrics: Pick<MetricValues, 'recordLive'>): Duty {
    return {
      name: 'health-record',
      runOnce: async (now) => ({ recorded: metrics.recordLive(this.liveFigures(now)) }),
    };
  }
}

/** queue_keeper_rows{state}: the held rows by state and the orphaned count; no series while unvouched. */
function rowsByState(doc: StateDocRead | null): Array<{ labels: Record<string, string>; value: number }> {
  if (doc === null) return [];
  const held = doc.now.rowsByState;
  const orphaned = doc.trust.keeper?.orphaned?.rows;
  return [
    ...(held ? Object.entries(held).map(([state, value]) => ({ labels: { state }, value })) : []),
    ...(orphaned !== undefined ? [{ labels: { state: 'orphaned' }, value: orphaned }] : []),
  ];
}
