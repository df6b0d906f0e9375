// A fake clock with fake timers for unit tests of timed code: the test moves the clock and the timers
// that come due fire in time order, each followed by a few turns of the event loop so async work
// started by a timer (a duty's runOnce) can finish before the next one fires. No real waiting.
import type { SchedulerTimer } from '../util/duties/scheduler.js';

interface Armed {
  id: number;
  at: number;
  ms: number;
  fn: () => void;
}

/** A few event-loop turns: lets promise chains and setImmediate callbacks run to their end. */
export async function turns(n = 5): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

export class FakeClock implements SchedulerTimer {
  private pending: Armed[] = [];
  private nextId = 1;
  /** Every wait a timer was armed with, in order (tests read the cadence from it). */
  readonly waits: number[] = [];

  constructor(public t: number) {}

  readonly now = (): number => this.t;

  set(fn: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.pending.push({ id, at: this.t + ms, ms, fn });
    this.waits.push(ms);
    return id;
  }

  clear(handle: unknown): void {
    this.pending = this.pending.filter((a) => a.id !== handle);
  }

  /** The armed timers, soonest first. */
  get armed(): ReadonlyArray<{ at: number; ms: number }> {
    return [...this.pending].sort((a, b) => a.at - b.at || a.id - b.id).map(({ at, ms }) => ({ at, ms }));
  }

  /** Moves the clock `ms` forward, firing each timer that comes due (in time order) at its instant. */
  async advance(ms: number): Promise<void> {
    const until = this.t + ms;
    for (;;) {
      const due = this.pending.filter((a) => a.at <= until).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!due) break;
      this.pending = this.pending.filter((a) => a !== due);
      this.t = Math.max(this.t, due.at);
      due.fn();
      await turns();
    }
    this.t = until;
    await turns();
  }
}
