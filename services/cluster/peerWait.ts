// The Harper side of the peer wait (util/cluster/peerWait.ts): on worker 0, before the keeper starts,
// beat and poll the peers' beats until every configured peer is present or the cap passes. Meanwhile the
// keeper signal says `waiting-for-peers`, so queue-state answers 503 with that phase and claims answer
// `unready`. The cap comes from QUEUE_KEEPER_PEER_WAIT_MS when set (tests shorten it), else 120 s. The
// poll is a duty on the worker's DutyScheduler; resources.ts hands in the scheduler and the signal, and
// the wait stops once the node may load.
import type { ClusterMembership } from '../../util/cluster/membership.js';
import { PEER_WAIT_CAP_MS, waitForPeers } from '../../util/cluster/peerWait.js';
import type { DutyScheduler } from '../../util/duties/scheduler.js';
import type { KeeperSignal } from '../../util/sharedMemory/keeperSignal.js';
import { log } from '../runtime/harper.js';

function capFromEnv(): number {
  const raw = process.env.QUEUE_KEEPER_PEER_WAIT_MS;
  const n = raw === undefined ? NaN : Number(raw);
  return Number.isFinite(n) && n >= 0 ? n : PEER_WAIT_CAP_MS;
}

/** Worker 0, before the keeper starts: resolves when the keeper may load. Never throws. */
export async function peerWait(deps: {
  membership: ClusterMembership;
  scheduler: DutyScheduler;
  /** The node's keeper signal (a getter: sized at first use). */
  signal: () => Pick<KeeperSignal, 'write'>;
}): Promise<void> {
  const { membership, scheduler, signal } = deps;
  await waitForPeers({
    membership,
    scheduler,
    capMs: capFromEnv(),
    showWaiting: (now) =>
      signal().write({ live: false, phase: 'waiting-for-peers', dueCount: 0, complete: false }, now),
    log,
  }).catch((e: unknown) => log.error('peer wait failed; loading now', e));
}
