// Operator view of the stall ledger: which (fleet, queue) pairs have been woken for a stall,
// how often since the stall began or last progressed, and when last.
import { type ApiResponse, reply, type Router, type RouteEntry } from '../router.js';
import type { LedgerRow } from '../../../util/stall/rules.js';

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export interface StallRouteDeps {
  readLedger: () => Promise<LedgerRow[]>;
}

/** `GET /prerender_admin/stall-ledger`: every pair, by fleet then queue. */
async function stallLedger(deps: StallRouteDeps): Promise<ApiResponse> {
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
}

const STALL_ROUTES: readonly RouteEntry<StallRouteDeps>[] = [
  { method: 'GET', path: '/prerender_admin/stall-ledger', caller: 'admin', handler: stallLedger },
];

export function registerStall(router: Router, deps: StallRouteDeps): void {
  router.register(STALL_ROUTES, deps);
}
