// The stall sweep (SPEC §7), one duty of worker 0's maintenance tick: gather the inputs, let
// util/stall/rules plan, drain, then charge each planned pair under its lock and wake it only once the
// charge has committed. The keeper's in-memory view is the only source of "due", and it can be short of
// rows: before this worker's keeper serves, while it loads (it serves claims from the first chunk on),
// and after a load that ended partial or a subscription that closed. A drain over such a view deletes
// ledger rows of queues that still have due work — resetting their budgets, so the next sweep wakes
// them again inside the cooldown (the double wake after a restart). So: no sweep at all until the load
// has completed, and no drain unless the keeper can vouch its view is whole.
import {
  mergeDueViews,
  planSweep,
  type PairKey,
  type FleetView,
  type LedgerRow,
  type QueueDueView,
  type RepresentativeRow,
} from '../../util/stall/rules.js';
import { config } from '../runtime/config.js';
import { fleetViews, hookViews } from '../notify/fleets.js';
import { log } from '../runtime/harper.js';
import type { KeeperLeadership } from '../keeper/leadership.js';
import { peerDueViews, publishDueSummaries } from './dueSummaries.js';
import type { KeeperService } from '../keeper/service.js';
import type { Duty } from '../keeper/maintenance.js';
import { count } from '../metrics/values.js';
import { fireStalled, notifyAvailable } from '../notify/wakes.js';
import { leaseTable } from '../runtime/sharedStructures.js';
import { chargePair, drainLedger, ledgerId, readClaimMarks, readLedger } from './ledger.js';

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

/**
 * The queues as the sweep sees them. Alone, this keeper's view. Clustered, each node holds only the rows
 * it owns: publish ours, merge the other nodes' fresh views, and let only a pair's rendezvous owner
 * charge it (one wake per cooldown across nodes). A node with no fresh views makes the whole incomplete:
 * then nothing is drained, because its queues may still hold due work.
 */
async function sweepView(
  svc: KeeperService,
  now: number,
  owners: ReturnType<KeeperLeadership['clusterOwnership']>,
): Promise<{ queues: QueueDueView[]; whole: boolean; mayCharge?: (pair: PairKey) => boolean }> {
  const local = dueViews(svc, now);
  if (!owners || owners.nodes.length <= 1) return { queues: local, whole: true };
  const tick = config().maintenance.tickInterval;
  await publishDueSummaries(owners.self, local, now, 2 * tick);
  const peers = await peerDueViews(owners.self, owners.nodes, now, 6 * tick + 5000);
  if (peers.missing.length > 0)
    log.debug(`stall sweep: no fresh due view from ${peers.missing.join(', ')}; not draining this tick`);
  return {
    queues: mergeDueViews([local, ...peers.views]),
    whole: peers.missing.length === 0,
    mayCharge: (pair) => owners.ownerOf(ledgerId(pair)) === owners.self,
  };
}

export async function sweepStalls(
  now: number,
  keeper: KeeperLeadership,
): Promise<StallSweepResult | Record<string, never>> {
  const svc = keeper.keeper();
  if (!svc?.serving || !svc.loadComplete || svc.phase !== 'live') return {};
  const view = await sweepView(svc, now, keeper.clusterOwnership());
  const viewIsWhole = !svc.partial && !svc.resyncing && view.whole;
  const queues = view.queues;
  const stall = config().stall;
  const [fleets, hooks, ledger, lastClaimAt] = await Promise.all([
    fleetViews(),
    hookViews(),
    readLedger(),
    readClaimMarks(),
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
  const drained = await drainLedger([...drainable, ...orphanRows(ledger, fleets, drainable).filter(mine)]);

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

export function stallSweepDuty(keeper: KeeperLeadership): Duty {
  return { name: 'stall-sweep', runOnce: (now) => sweepStalls(now, keeper) };
}
