// The Harper side of the peer wait (util/cluster/peerWait.ts): on worker 0, before the keeper starts,
// beat and poll the peers' beats until every configured peer is present or the cap passes. Meanwhile the
// keeper signal says `waiting-for-peers`, so queue-state answers 503 with that phase and claims answer
// `unready`. The cap comes from QUEUE_KEEPER_PEER_WAIT_MS when set (tests shorten it), else 120 s.
import { PEER_WAIT_CAP_MS, decidePeerWait, type PeerWaitDecision } from '../../util/cluster/peerWait.js';
import { log } from '../runtime/harper.js';
import { keeperSignal } from '../runtime/sharedStructures.js';
import { membership, type ClusterMembership } from './membership.js';

const POLL_MS = 250;

export interface PeerWaitDeps {
  membership: ClusterMembership;
  now: () => number;
  capMs: number;
  /** Called once when the node has to wait, and again each poll (the signal's heartbeat stays fresh). */
  showWaiting: (now: number) => void;
  sleep: (ms: number) => Promise<void>;
  log: { info(...a: unknown[]): void; warn(...a: unknown[]): void };
}

export async function waitForPeers(deps: PeerWaitDeps): Promise<PeerWaitDecision> {
  deps.membership.start();
  const startedAt = deps.now();
  let told = false;
  for (;;) {
    const now = deps.now();
    let decision: PeerWaitDecision;
    try {
      const p = await deps.membership.presence(now);
      decision = decidePeerWait({
        configured: p.configured,
        missing: p.missing,
        startedAt,
        now,
        capMs: deps.capMs,
      });
    } catch (e) {
      deps.log.warn('peer wait: could not read the cluster membership; trying again', e);
      decision = { action: 'wait', missing: ['?'] };
      if (now - startedAt >= deps.capMs) decision = { action: 'load', reason: 'cap', missing: ['?'] };
    }
    if (decision.action === 'load') {
      if (decision.reason === 'cap')
        deps.log.warn(
          `peer wait: no heartbeat from ${decision.missing.join(', ')} within ${Math.round(deps.capMs / 1000)} s; ` +
            'loading over the nodes present — rows those peers own may be held twice until they return',
        );
      else if (told) deps.log.info('peer wait: every configured peer is present; loading');
      return decision;
    }
    if (!told)
      deps.log.info(
        `peer wait: waiting up to ${Math.round(deps.capMs / 1000)} s for ${decision.missing.join(', ')}`,
      );
    told = true;
    deps.showWaiting(now);
    await deps.sleep(POLL_MS);
  }
}

function capFromEnv(): number {
  const raw = process.env.QUEUE_KEEPER_PEER_WAIT_MS;
  const n = raw === undefined ? NaN : Number(raw);
  return Number.isFinite(n) && n >= 0 ? n : PEER_WAIT_CAP_MS;
}

/** Worker 0, before the keeper starts: resolves when the keeper may load. Never throws. */
export async function peerWait(): Promise<void> {
  await waitForPeers({
    membership: membership(),
    now: () => Date.now(),
    capMs: capFromEnv(),
    showWaiting: (now) =>
      keeperSignal().write({ live: false, phase: 'waiting-for-peers', dueCount: 0, complete: false }, now),
    sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
    log,
  }).catch((e: unknown) => log.error('peer wait failed; loading now', e));
}
