// Time as the client sees it. Every wait in the client goes through a Clock, so tests drive time with
// a fake one (test/fakeClock.ts) instead of sleeping.

export interface Timer {
  cancel(): void;
}

export interface Clock {
  /** Epoch milliseconds. */
  now(): number;
  /** Runs `fn` once after `ms`; a cancelled timer never runs. */
  setTimer(fn: () => void, ms: number): Timer;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(fn, ms) {
    const t = setTimeout(fn, Math.max(0, ms));
    return { cancel: () => clearTimeout(t) };
  },
};

/**
 * One interruptible wait at a time: the claim loop sleeps here until its deadline or until something
 * (a finished render, a webhook, stop()) calls `wake()`. A wake that arrives while nobody waits is kept,
 * so the next wait returns at once: a result that lands between two checks is never slept through.
 */
export class Waker {
  private pending: (() => void) | null = null;
  private woken = false;

  constructor(private readonly clock: Clock) {}

  /** Resolves `'woken'` on wake() or `'timeout'` after `ms` (Infinity waits for a wake only). */
  wait(ms: number): Promise<'woken' | 'timeout'> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve('woken');
    }
    return new Promise((resolve) => {
      let timer: Timer | null = null;
      const done = (why: 'woken' | 'timeout') => {
        timer?.cancel();
        this.pending = null;
        resolve(why);
      };
      this.pending = () => done('woken');
      if (Number.isFinite(ms)) timer = this.clock.setTimer(() => done('timeout'), ms);
    });
  }

  wake(): void {
    if (this.pending) this.pending();
    else this.woken = true;
  }
}
