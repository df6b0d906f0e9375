// The stall sweep (SPEC §7), one duty of worker 0's maintenance tick: gather the inputs, let
// util/stallRules plan, drain, then charge each planned pair under its lock and wake it only once the
// charge has committed. The keeper's in-memory view is the only source of "due", and it can be short of
// rows: before this worker's keeper serves, while it loads (it serves claims from the first chunk on),
// and after a load that ended partial or a subscription that closed. A drain over such a view deletes
// ledger rows of queues that still have due work — resetting their budgets, so the next sweep wakes
// them again inside the cooldown (the double wake after a restart). So: no sweep at all until the load
// has completed, and no drain unless the keeper can vouch its view is whole.
import {
  planSweep,
  type FleetView,
  type LedgerRow,
  type QueueDueView,
  type RepresentativeRow,
} from '../util/stallRules.js';
import { config } from './config.js';
import { fleetViews, hookViews } from './fleets.js';
import { log } from './harper.js';
import { keeper } from './keeper.js';
import type { KeeperService } from './keeperService.js';
import type { Duty } from './maintenance.js';
import { count } from './metrics.js';
import { fireStalled, notifyAvailable } from './notify.js';
import { leaseTable } from './shared.js';
import { chargePair, drainLedger, readClaimMarks, readLedger } from './stallLedger.js';

export interface StallSweepResult extends Record<string, number> {
  drained: number;
  nudged: number;
}

/**
 * One QueueDueView per queue holding due verified rows (SPEC §7.1: unverified rows never qualify a queue
 * and never name a wake). A queue left out counts as drained. `oldestGateDue` skips leased rows: a queue
 * whose due work is all in flight is busy, not stalled, and keeps its ledger row.
 */
function dueViews(svc: KeeperService, now: number): QueueDueView[] {
  const leases = leaseTable();
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

/** Rows of fleets that are gone or revoked: the revoke deletes them, but a charge racing it can leave one. */
function orphanRows(ledger: LedgerRow[], fleets: FleetView[], planned: LedgerRow[]): LedgerRow[] {
  const active = new Set(fleets.filter((f) => f.state === 'active').map((f) => f.id));
  const already = new Set(planned);
  return ledger.filter((r) => !active.has(r.fleetId) && !already.has(r));
}

export async function sweepStalls(now: number): Promise<StallSweepResult | Record<string, never>> {
  const svc = keeper();
  if (!svc?.serving || !svc.loadComplete || svc.phase !== 'live') return {};
  const viewIsWhole = !svc.partial && !svc.resyncing;
  const queues = dueViews(svc, now);
  const stall = config().stall;
  const [fleets, hooks, ledger, lastClaimAt] = await Promise.all([
    fleetViews(),
    hookViews(),
    readLedger(),
    readClaimMarks(),
  ]);
  const plan = planSweep({ now, queues, fleets, hooks, ledger, lastClaimAt, config: stall });
  const drainable = viewIsWhole ? plan.drain : [];
  const drained = await drainLedger([...drainable, ...orphanRows(ledger, fleets, drainable)]);

  // No receiver, no charge: with the dispatcher unable to send (no sealing key, or the hook kill switch)
  // a charge would spend the pair's budget on a wake nobody gets.
  if (!notifyAvailable()) return { drained, nudged: 0 };

  let nudged = 0;
  for (const charge of plan.charges) {
    let charged: boolean;
    try {
      charged = await chargePair(charge, now, lastClaimAt.get(charge.queue), stall);
    } catch (e) {
      log.error(`stall charge failed for fleet ${charge.fleetId} queue ${JSON.stringify(charge.queue)}`, e);
      continue;
    }
    if (!charged) continue; // another sweep charged it since our plan: its wake is the one wake
    nudged++;
    count('stall_nudges_total', 1, { queue: charge.queue });
    try {
      fireStalled(charge.fleetId, charge.queue, charge.representative, now);
    } catch (e) {
      // The charge stands (it is spent either way); the other pairs still get their wakes.
      log.error(`stall wake failed for fleet ${charge.fleetId} queue ${JSON.stringify(charge.queue)}`, e);
    }
  }
  if (nudged > 0) log.info(`nudged stalled queues count=${nudged}`);
  return { drained, nudged };
}

export function stallSweepDuty(): Duty {
  return { name: 'stall-sweep', runOnce: (now) => sweepStalls(now) };
}
