// Operator view of the stall ledger: which (fleet, queue) pairs have been woken for a stall,
// how often since the stall began or last progressed, and when last.
import { reply, type Router } from '../router.js';
import type { LedgerRow } from '../../../util/stall/rules.js';

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function registerStall(router: Router, deps: { readLedger: () => Promise<LedgerRow[]> }): void {
  router.route('GET', '/prerender_admin/stall-ledger', 'admin', async () => {
    const rows = await deps.readLedger();
    rows.sort((a, b) => compareText(a.fleetId, b.fleetId) || compareText(a.queue, b.queue));
    return reply(
      rows.map((r) => ({
        fleetId: r.fleetId,
        queue: r.queue,
        nudges: r.nudges,
        lastNudgedAt: r.lastNudgedAt,
      })),
    );
  });
}
