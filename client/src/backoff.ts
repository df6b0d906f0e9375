// Waiting rules of the claim loop, as plain functions of attempt counts and a random source.

export interface BackoffPolicy {
  /** The first wait. */
  baseMs: number;
  /** No wait is longer than this. */
  capMs: number;
}

/**
 * Exponential backoff with "equal jitter": the wait for attempt n (0-based) is drawn from
 * [d/2, d] with d = min(cap, base × 2^n). Half of it is fixed so a fleet never spins, the other half is
 * random so a hundred fleets that went idle together do not poll together.
 */
export function backoffDelay(policy: BackoffPolicy, attempt: number, random: () => number): number {
  const exp = policy.baseMs * 2 ** Math.min(attempt, 30);
  const d = Math.min(policy.capMs, exp);
  return Math.round(d / 2 + (d / 2) * random());
}
