// The peer wait before the keeper loads (SPEC §2 step 2, §9): a node with configured peers waits until
// it sees each of them beat, so it decides ownership over the real membership and does not load rows it
// will not own (a node that loads alone first holds every row, and its peers' rows twice). The wait is
// capped: a peer that is down must not keep this node from serving; after the cap it loads over the
// peers it does see, with a warning.

/** SPEC §2/§9: "waits up to 120 s". Not a config key (SPEC §8 names none). */
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
