// The readings a scrape takes at its own instant: leases from the lease table, keeper health
// from its signal, due rows and the per-queue series from the state document when the keeper can vouch
// for it. The same readings go to Harper analytics on worker 0's maintenance tick, so Harper Studio
// shows them without any Prometheus scraping.
import { stateMaxAgeMs } from '../../util/handoff/keeperSignal.js';
import { queueNames, queueSeries, type QueueStateLateness } from '../../util/metrics/queueSeries.js';
import { config } from '../runtime/config.js';
import { servingView } from '../keeper/servingView.js';
import type { Duty } from '../keeper/maintenance.js';
import type { LiveFigures, MetricValues } from './values.js';
import { keeperSignal, leaseTable, stateDoc } from '../runtime/sharedStructures.js';

/** The parts of the state document (services/keeper/service.ts writeState) read here. */
interface StateDocPart {
  now: { due: number };
  lateness: QueueStateLateness;
  trust: { exact: boolean; stateAt: number; keeper?: { rows?: number } };
}

/** What services/http/routes/queue.ts vouchedState answers: the document only when the keeper vouches for it. */
export type VouchedRead = { ok: true; doc: object } | { ok: false };

/**
 * The lease figures as worker 0's last reconcile stored them (a read never rescans and rewrites the
 * lease table); before the first reconcile, the live gauge (which only ever drifts high).
 */
export function leaseFigures(now: number): {
  occupancy: number;
  oldestExpiresAt: number | null;
  oldestGrantedAt: number | null;
} {
  const leases = leaseTable();
  const stored = leases.lastReconcile();
  if (stored && now - stored.at <= stateMaxAgeMs(config().queue.keeper.stateInterval)) return stored;
  return { occupancy: leases.occupancy(), oldestExpiresAt: null, oldestGrantedAt: null };
}

export function liveFigures(now: number, vouched: VouchedRead): LiveFigures {
  const leases = leaseTable();
  const occupancy = leaseFigures(now).occupancy;
  const view = servingView(now);
  const doc = vouched.ok ? (vouched.doc as StateDocPart) : null;
  const latest = stateDoc<StateDocPart>().read();
  const perQueue = queueSeries(
    queueNames(config().render.routes),
    doc?.lateness ?? null,
    leases.leasesByQueue(now),
    now,
  );
  return {
    keeper_live: keeperSignal().read().phase === 'live' && view.serving && !view.stale ? 1 : 0,
    keeper_exact: doc?.trust.exact ? 1 : 0,
    // Unknown while the keeper cannot vouch for its numbers: NaN, never a stale figure shown as live.
    keeper_rows: doc?.trust.keeper?.rows ?? NaN,
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
  };
}

/** Worker 0's maintenance duty that records the live readings to Harper analytics (`queue_health`). */
export function healthRecordDuty(
  vouchedState: (now: number) => VouchedRead,
  metrics: Pick<MetricValues, 'recordLive'>,
): Duty {
  return {
    name: 'health-record',
    runOnce: async (now) => ({ recorded: metrics.recordLive(liveFigures(now, vouchedState(now))) }),
  };
}
