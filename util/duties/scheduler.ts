// The one way a periodic duty runs: a duty is `runOnce(now)` answering counts, and the
// scheduler owns its timer. It arms the next run only after the current one finished (two runs of a
// duty never overlap), reads the wait afresh at every arm, re-arms a waiting duty when a config key whose
// schema effect is `timers` changed, and stops every timer on stop(), waiting for a run in progress.
// A failing duty is logged and the others still run; a duty that did something (a non-zero count) is
// summarised at debug, one that did nothing says nothing.
//
// Pure: the clock and the timer functions are injected, so unit tests drive it with a fake clock.
import { pathsWithEffect } from '../config/effects.js';

export type Counts = Record<string, number>;

export interface Duty {
  name: string;
  runOnce(now: number): Promise<Counts> | Counts;
}

/** How the previous run of a duty ended (null before its first run). */
export interface LastRun {
  /** The clock when the run started. */
  at: number;
  /** Every duty of the run finished without throwing. */
  ok: boolean;
}

export interface Cadence {
  /**
   * The wait before the next run, read when the duty is added, after each run, and when a `timers` key
   * of the config changed. null: not armed until woken.
   */
  next(now: number, last: LastRun | null): number | null;
  /** The wait when woken (default 0). */
  wake?(now: number, last: LastRun | null): number;
}

export interface SchedulerTimer {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

export interface SchedulerLog {
  debug(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

export interface SchedulerDeps {
  now: () => number;
  timer: SchedulerTimer;
  log: SchedulerLog;
  /**
   * Lets the event loop turn between two duties of a group (a tick). A duty that finishes without waiting
   * on I/O resolves in a microtask, so without a turn a tick's duties run as one hold of their summed time.
   */
  yieldLoop?: () => Promise<void>;
}

export interface DutyHandle {
  readonly name: string;
  /** Run soon (Cadence.wake), unless it is already armed to run sooner; a running duty runs again after. */
  wake(): void;
  /** The duty runs no more; resolves once a run in progress has finished. */
  stop(): Promise<void>;
}

/** setTimeout, unref'd: a waiting duty never holds the process open. */
export const realTimer: SchedulerTimer = {
  set: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

class Entry implements DutyHandle {
  private handle: unknown = undefined;
  /** When the armed timer fires, and the wait it was armed with (null: armed by a wake). */
  private dueAt = Infinity;
  private armedWith: number | null = null;
  private running: Promise<void> | null = null;
  private wokenWhileRunning = false;
  private stopped = false;
  private last: LastRun | null = null;

  constructor(
    readonly name: string,
    private readonly duties: readonly Duty[],
    private readonly group: boolean,
    private readonly cadence: Cadence,
    private readonly deps: SchedulerDeps,
    private readonly forget: (e: Entry) => void,
  ) {}

  start(): void {
    this.armNext();
  }

  wake(): void {
    if (this.stopped) return;
    if (this.running) {
      this.wokenWhileRunning = true;
      return;
    }
    const now = this.deps.now();
    const wait = Math.max(0, this.cadence.wake?.(now, this.last) ?? 0);
    if (this.handle !== undefined && this.dueAt <= now + wait) return;
    this.arm(wait, null);
  }

  /** A `timers` key changed: a waiting duty whose wait now differs waits the new wait from now. */
  rearm(): void {
    if (this.stopped || this.running || (this.armedWith === null && this.handle !== undefined)) return;
    const next = this.cadence.next(this.deps.now(), this.last);
    if (next === this.armedWith) return;
    this.disarm();
    if (next !== null) this.arm(next, next);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.disarm();
    this.forget(this);
    await this.running;
  }

  private armNext(): void {
    const next = this.cadence.next(this.deps.now(), this.last);
    if (next !== null) this.arm(next, next);
    else this.armedWith = null;
  }

  private arm(ms: number, armedWith: number | null): void {
    this.disarm();
    this.armedWith = armedWith;
    this.dueAt = this.deps.now() + ms;
    this.handle = this.deps.timer.set(() => {
      this.handle = undefined;
      this.dueAt = Infinity;
      this.running = this.run().finally(() => {
        this.running = null;
        if (this.stopped) return;
        if (this.wokenWhileRunning) {
          this.wokenWhileRunning = false;
          this.wake();
        } else this.armNext();
      });
    }, ms);
  }

  private disarm(): void {
    if (this.handle !== undefined) this.deps.timer.clear(this.handle);
    this.handle = undefined;
    this.dueAt = Infinity;
  }

  private async run(): Promise<void> {
    const at = this.deps.now();
    let ok = true;
    for (const [i, duty] of this.duties.entries()) {
      if (i > 0 && this.deps.yieldLoop) await this.deps.yieldLoop();
      if (this.stopped) break;
      const label = this.group ? `${this.name} ${duty.name}` : duty.name;
      try {
        const counts = await duty.runOnce(this.deps.now());
        const said = Object.entries(counts).filter(([, n]) => n !== 0);
        if (said.length > 0) this.deps.log.debug(`${label} ${said.map(([k, n]) => `${k}=${n}`).join(' ')}`);
      } catch (e) {
        ok = false;
        this.deps.log.error(`${label} failed`, e);
      }
    }
    this.last = { at, ok };
  }
}

export class DutyScheduler {
  private readonly entries = new Set<Entry>();
  private stopped = false;

  constructor(private readonly deps: SchedulerDeps) {}

  /** Adds one duty and arms it (Cadence.next); answers its handle. */
  add(duty: Duty, cadence: Cadence): DutyHandle {
    return this.addEntry(duty.name, [duty], false, cadence);
  }

  /**
   * Adds duties that run in turn on one timer (a tick): one failing never keeps the next from running,
   * and each is logged as `<name> <duty>`.
   */
  addGroup(name: string, duties: readonly Duty[], cadence: Cadence): DutyHandle {
    return this.addEntry(name, duties, true, cadence);
  }

  /** The config changed these paths: re-arm the waiting duties if any of them is a `timers` key. */
  configChanged(paths: readonly string[]): void {
    if (pathsWithEffect(paths, 'timers').length === 0) return;
    for (const e of this.entries) e.rearm();
  }

  /** Clears every timer and waits for the duties that are running. Nothing is armed afterwards. */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.entries].map((e) => e.stop()));
  }

  private addEntry(name: string, duties: readonly Duty[], group: boolean, cadence: Cadence): DutyHandle {
    const entry = new Entry(name, duties, group, cadence, this.deps, (e) => this.entries.delete(e));
    if (this.stopped) {
      void entry.stop();
      return entry;
    }
    this.entries.add(entry);
    entry.start();
    return entry;
  }
}

/** A cadence of a fixed wait read from config at each arm (e.g. an interval key). */
export function every(ms: () => number): Cadence {
  return { next: () => ms() };
}

/** A cadence that only runs when woken, `wait(now, last)` after the wake. */
export function onWake(wait: (now: number, last: LastRun | null) => number = () => 0): Cadence {
  return { next: () => null, wake: wait };
}
