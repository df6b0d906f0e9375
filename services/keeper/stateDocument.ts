// The queue-state document (`GET /prerender_admin/queue-state`, docs/monitoring.md) as the keeper computes
// it: the held rows' counts, the lease figures and the node's pause and status, and the trust block that says
// how far the keeper vouches for them.
import { stateMaxAgeMs, type KeeperPhase } from '../../util/sharedMemory/keeperSignal.js';
import type { KeeperCore } from '../../util/keeper/core.js';
import type { KeeperStats } from './deps.js';
import { MINUTE_MS } from '../../util/time.js';

/** What the document reads of the keeper service. */
export interface KeeperStateView {
  readonly core: KeeperCore;
  readonly phase: KeeperPhase;
  readonly partial: boolean;
  readonly resyncing: boolean;
  readonly stats: KeeperStats;
  exact(): boolean;
}

export interface StateInputs {
  now: number;
  /** Live leases right now. */
  inFlight: number;
  node: { paused: boolean; status: string };
  /** `queue.keeper.stateInterval`: a reader treats the document as stale after stateMaxAgeMs of it. */
  stateInterval: number;
}

export function keeperStateDocument(k: KeeperStateView, input: StateInputs) {
  const { now, inFlight, node } = input;
  const counts = k.core.state(now);
  const stats = k.stats;
  return {
    now: {
      ...counts.now,
      inFlight,
      unclaimed: Math.max(0, counts.now.due - inFlight),
      paused: node.paused,
      status: node.status,
    },
    coming: counts.coming,
    lateness: counts.lateness,
    // The ledger keys its minutes by index; the document says when each began, in epoch ms, as every
    // time in the API is.
    flow: counts.flow.map((f) => ({ ...f, minute: f.minute * MINUTE_MS })),
    trust: {
      source: 'keeper',
      live: k.phase === 'live',
      phase: k.phase,
      exact: k.exact(),
      stateAt: now,
      maxAgeMs: stateMaxAgeMs(input.stateInterval),
      keeper: {
        rows: k.core.size,
        classes: k.core.classCount,
        load: { ms: stats.loadMs, rows: stats.loadRows, partial: k.partial },
        lastPublish: stats.lastPublish,
        headCheck: stats.headCheck,
        lastVerify: stats.lastVerify,
        repairedTotal: stats.repairedTotal,
        unreadableTotal: stats.unreadableTotal,
        orphaned: stats.orphaned,
        lastSettledWalk: stats.lastSettledWalk ?? null,
        recoveredTotal: stats.recoveredTotal,
        lastRepair: stats.lastRepair ?? null,
        apply: {
          events: stats.apply.events,
          avgUs: stats.apply.events ? (1000 * stats.apply.ms) / stats.apply.events : null,
        },
        resyncing: k.resyncing,
        lastError: stats.lastError,
      },
    },
  };
}
