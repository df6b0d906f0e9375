// A clock the test moves by hand. The client under test does real HTTP against a fake server, so the
// test waits (by polling real time) for the client to arm the timer it expects, then fires it.
import type { Clock, Timer } from '../src/clock.js';

export interface FakeTimer {
  id: number;
  at: number;
  delay: number;
}

interface Entry extends FakeTimer {
  fn: () => void;
}

export class FakeClock implements Clock {
  private seq = 0;
  private entries: Entry[] = [];

  constructor(public t = 1_700_000_000_000) {}

  now(): number {
    return this.t;
  }

  setTimer(fn: () => void, ms: number): Timer {
    const e: Entry = { id: ++this.seq, at: this.t + Math.max(0, ms), delay: Math.max(0, ms), fn };
    this.entries.push(e);
    return { cancel: () => (this.entries = this.entries.filter((x) => x !== e)) };
  }

  pending(): FakeTimer[] {
    return this.entries.map(({ id, at, delay }) => ({ id, at, delay }));
  }

  /** Waits (polling real time) until an armed timer matches `pred`; fails after `timeoutMs`. */
  async timer(pred: (t: FakeTimer) => boolean = () => true, timeoutMs = 5_000): Promise<FakeTimer> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.entries.filter(pred).sort((a, b) => a.at - b.at)[0];
      if (hit) return { id: hit.id, at: hit.at, delay: hit.delay };
      if (Date.now() > deadline)
        throw new Error(`no timer matched; armed: ${JSON.stringify(this.pending().map((p) => p.delay))}`);
      await new Promise((r) => setTimeout(r, 2));
    }
  }

  /** Moves time forward to `t`, running every timer due by then in order. */
  advanceTo(t: number): void {
    for (;;) {
      const next = [...this.entries].sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!next || next.at > t) break;
      this.entries = this.entries.filter((x) => x !== next);
      this.t = Math.max(this.t, next.at);
      next.fn();
    }
    this.t = Math.max(this.t, t);
  }

  advance(ms: number): void {
    this.advanceTo(this.t + ms);
  }

  /** Fires one timer by moving time to its instant. */
  fire(timer: FakeTimer): void {
    this.advanceTo(timer.at);
  }
}

/** Polls a condition in real time (the client is doing real I/O); fails after `timeoutMs`. */
export async function until<T>(what: string, fn: () => T | undefined | false, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** A promise with its resolve and reject exposed, for renders the test finishes by hand. */
export function deferred<T>(): {
  promise: Promise<T>;
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
} {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((a, b) => ((resolve = a), (reject = b)));
  return { promise, resolve, reject };
}
