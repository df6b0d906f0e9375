// The pure rules of webhook delivery (docs/wakes.md): what an attempt's outcome means, how long to wait
// before the next, how fast one hook may be called, and the drop-warning interval. Clock passed in, in ms.

/** `dns`: the resolver could not answer now (EAI_AGAIN); our side's trouble, not the receiver's. */
export type AttemptOutcome = { status: number } | { error: 'timeout' | 'network' | 'dns' | 'refused' };
export type AttemptVerdict = 'success' | 'retry' | 'fail';

/**
 * Retry only what may heal by itself: the network, timeouts, 408, 429 and 5xx. A 3xx is final because
 * redirects are never followed (a redirect is how an allowed host points us at a refused one); other 4xx
 * say the receiver rejects this request; a refused address will be refused again.
 */
export function classifyResponse(outcome: AttemptOutcome): AttemptVerdict {
  if ('error' in outcome) return outcome.error === 'refused' ? 'fail' : 'retry';
  const s = outcome.status;
  if (s >= 200 && s < 300) return 'success';
  if (s === 408 || s === 429 || (s >= 500 && s < 600)) return 'retry';
  return 'fail';
}

/**
 * Whether a failed delivery counts toward the hook's auto-disable. A temporary DNS failure is retried
 * like any network error, but when it is all we saw, it says our resolver was down, not that the
 * receiver is broken: ten of those in a row must not switch off a healthy hook.
 */
export function countsTowardDisable(last: AttemptOutcome | null): boolean {
  return !(last !== null && 'error' in last && last.error === 'dns');
}

/** Pause after attempt 1, after attempt 2; later attempts reuse the last step. */
const RETRY_DELAYS_MS: readonly number[] = [1000, 5000];
/** ±20 % spreads the retries of many hooks that failed together, so they do not return in a wave. */
const RETRY_JITTER = 0.2;

/** The wait before the next attempt. `random` is in [0, 1) (Math.random in production, fixed in tests). */
export function retryDelayMs(attemptJustFailed: number, random: () => number): number {
  const i = Math.min(Math.max(1, Math.floor(attemptJustFailed)), RETRY_DELAYS_MS.length) - 1;
  const base = RETRY_DELAYS_MS[i]!;
  return Math.round(base * (1 - RETRY_JITTER + 2 * RETRY_JITTER * random()));
}

/** A hook's deliveries of the last minute, oldest first, from `head` on. */
interface Window {
  times: number[];
  head: number;
}

const WINDOW_MS = 60_000;

/**
 * Per-hook sliding window: at most `perMinute` deliveries in any 60 s (notify.ratePerMinute, 120 by
 * default), so a burst of the whole rate waits a full minute for the next. A hook with nothing
 * in its window carries no information and is pruned, so memory follows active hooks only.
 */
export class RateLimiter {
  private readonly windows = new Map<string, Window>();
  private perMinute: number;

  constructor(perMinute: number) {
    this.perMinute = RateLimiter.checked(perMinute);
  }

  private static checked(perMinute: number): number {
    if (!Number.isFinite(perMinute) || perMinute <= 0) throw new RangeError('rate must be a positive number');
    return perMinute;
  }

  /** A config change applies to the next take, counted over the deliveries already in the window. */
  setRate(perMinute: number): void {
    this.perMinute = RateLimiter.checked(perMinute);
  }

  /** Deliveries in the minute up to `now`, after dropping the older ones. */
  private live(w: Window, now: number): number {
    const from = now - WINDOW_MS;
    while (w.head < w.times.length && w.times[w.head]! <= from) w.head++;
    if (w.head > 64 && w.head * 2 > w.times.length) {
      w.times = w.times.slice(w.head);
      w.head = 0;
    }
    return w.times.length - w.head;
  }

  /** Takes one delivery slot for `hookId` at `now`; false means over the rate (the caller drops or waits). */
  tryTake(hookId: string, now: number): boolean {
    let w = this.windows.get(hookId);
    if (w === undefined) {
      w = { times: [], head: 0 };
      this.windows.set(hookId, w);
    }
    if (this.live(w, now) >= this.perMinute) return false;
    w.times.push(now);
    return true;
  }

  /** Forgets a deleted hook. */
  forget(hookId: string): void {
    this.windows.delete(hookId);
  }

  /** Drops hooks with nothing in their window; returns how many remain. */
  prune(now: number): number {
    for (const [id, w] of this.windows) if (this.live(w, now) === 0) this.windows.delete(id);
    return this.windows.size;
  }
}

/** At most one warning per this many ms about dropped deliveries, however fast they drop. */
export const DROP_WARN_INTERVAL_MS = 10_000;
