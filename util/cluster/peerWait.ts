// The peer wait before the keeper loads (docs/clusters.md): a node with configured peers waits until
// it sees each of them beat, so it decides ownership over the real membership and does not load rows it
// will not own (a node that loads alone first holds every row, and its peers' rows twice). The wait is
// capped: a peer that is down must not keep this node from serving; after the cap it loads over the
// peers it does see, with a warning. waitForPeers polls on the scheduler it is given and stops once decided.
import type { Counts, DutyScheduler } from '../duties/scheduler.js';
import type { ClusterMembership } from './membership.js';

/** The cap of the peer wait; QUEUE_KEEPER_PEER_WAIT_MS shortens it (services/cluster/peerWait.ts). */
export const PEER_WAIT_CAP_MS = 120_000;

export type PeerWaitDecision =
  | { action: 'load'; reason: 'alone' | 'all-present' }
  | { action: 'load'; reason: 'cap'; missing: string[] }
  | { action: 'wait'; missing: string[] };

export function decidePeerWait(input: {
  configured: readonly string[];
  missing: readonly string[];
  startedAt: number;
  now: number;
  capMs: number;
}): PeerWaitDecision {
  if (input.configured.length === 0) return { action: 'load', reason: 'alone' };
  if (input.missing.length === 0) return { action: 'load', reason: 'all-present' };
  if (input.now - input.startedAt >= input.capMs)
    return { action: 'load', reason: 'cap', missing: [...input.missing] };
  return { action: 'wait', missing: [...input.missing] };
}

export const PEER_WAIT_POLL_MS = 250;

export interface PeerWaitDeps {
  membership: Pick<ClusterMembership, 'start' | 'presence'>;
  scheduler: DutyScheduler;
  capMs: number;
  /** Called once when the node has to wait, and again each poll (the signal's heartbeat stays fresh). */
  showWaiting: (now: number) => void;
  log: { info(...a: unknown[]): void; warn(...a: unknown[]): void };
}

/** Resolves with the decision to load: every peer present, alone, or the cap passed. */
export function waitForPeers(deps: PeerWaitDeps): Promise<PeerWaitDecision> {
  deps.membership.start();
  let startedAt: number | null = null;
  let told = false;
  return new Promise((resolve) => {
    const poll = deps.scheduler.add(
      {
        name: 'cluster peer wait',
        runOnce: async (now): Promise<Counts> => {
          startedAt ??= now;
          const decision = await decide(deps, startedAt, now);
          if (decision.action === 'load') {
            if (decision.reason === 'cap')
              deps.log.warn(
                `peer wait: no heartbeat from ${decision.missing.join(', ')} within ${Math.round(deps.capMs / 1000)} s; ` +
                  'loading over the nodes present — rows those peers own may be held twice until they return',
              );
            else if (told) deps.log.info('peer wait: every configured peer is present; loading');
            void poll.stop();
            resolve(decision);
            return { loaded: 1 };
          }
          if (!told)
            deps.log.info(
              `peer wait: waiting up to ${Math.round(deps.capMs / 1000)} s for ${decision.missing.join(', ')}`,
            );
          told = true;
          deps.showWaiting(now);
          return {};
        },
      },
      { next: (_now, last) => (last ? PEER_WAIT_POLL_MS : 0) },
    );
  });
}

async function decide(deps: PeerWaitDeps, startedAt: number, now: number): Promise<PeerWaitDecision> {
  try {
    const p = await deps.membership.presence(now);
    return decidePeerWait({
      configured: p.configured,
      missing: p.missing,
      startedAt,
      now,
      capMs: deps.capMs,
    });
  } catch (e) {
    deps.log.warn('peer wait: could not read the cluster membership; trying again', e);
    if (now - startedAt >= deps.capMs) return { action: 'load', reason: 'cap', missing: ['?'] };
    return { action: 'wait', missing: ['?'] };
  }
}
