// Worker 0's maintenance tick (SPEC §7, `maintenance.tickInterval`): every tick runs each duty's
// runOnce(now) in turn. A failing duty is logged and the others still run; the next tick is armed only
// after the current one has finished, so two ticks never overlap (a slow sweep must not meet a second
// sweep of itself, which would plan from the same ledger twice). Results are counts; the tick itself
// stays silent when every count is zero.
//
// This module imports nothing from Harper at load time, so the tick can be driven in a plain Node
// process with a fake timer and clock; startMaintenance pulls in config and the logger when called.

export interface Duty {
  name: string;
  runOnce(now: number): Promise<Record<string, number>>;
}

export interface TickLog {
  debug(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

export interface TickTimer {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

export interface MaintenanceDeps {
  duties: Duty[];
  /** Read before arming each tick, so a changed interval applies from the next arm on. */
  interval: () => number;
  clock: () => number;
  timer: TickTimer;
  log: TickLog;
}

export type TickResults = Map<string, Record<string, number>>;

export class MaintenanceTick {
  private handle: unknown = undefined;
  private running = false;
  private started = false;

  constructor(private readonly deps: MaintenanceDeps) {}

  start(): void {
    if (this.started) return;
    this.started = true;
    this.arm();
  }

  stop(): void {
    this.started = false;
    this.disarm();
  }

  /** The interval changed: wait the new interval from now instead of finishing the old wait. */
  rearm(): void {
    if (!this.started || this.running) return; // a running tick arms with the new value when it ends
    this.disarm();
    this.arm();
  }

  /**
   * One tick. Answers the results by duty name (a failed duty has none), or null when a tick is already
   * running — the caller then does nothing rather than run the duties a second time alongside it.
   */
  async tickOnce(): Promise<TickResults | null> {
    if (this.running) return null;
    this.running = true;
    const results: TickResults = new Map();
    try {
      for (const duty of this.deps.duties) {
        try {
          const counts = await duty.runOnce(this.deps.clock());
          results.set(duty.name, counts);
          const said = Object.entries(counts).filter(([, n]) => n !== 0);
          if (said.length > 0)
            this.deps.log.debug(`maintenance ${duty.name} ${said.map(([k, n]) => `${k}=${n}`).join(' ')}`);
        } catch (e) {
          this.deps.log.error(`maintenance duty ${duty.name} failed`, e);
        }
      }
    } finally {
      this.running = false;
    }
    return results;
  }

  private arm(): void {
    this.handle = this.deps.timer.set(() => {
      this.handle = undefined;
      void this.tickOnce().finally(() => {
        if (this.started && this.handle === undefined) this.arm();
      });
    }, this.deps.interval());
  }

  private disarm(): void {
    if (this.handle !== undefined) this.deps.timer.clear(this.handle);
    this.handle = undefined;
  }
}

const realTimer: TickTimer = {
  set: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/**
 * Starts the tick on this worker (call on worker 0 only) with `maintenance.tickInterval` from config,
 * re-armed when that key changes. Answers the stop function.
 */
export function startMaintenance(duties: Duty[]): () => void {
  let stopped = false;
  let tick: MaintenanceTick | undefined;
  let unsubscribe: (() => void) | undefined;
  void Promise.all([import('../runtime/config.js'), import('../runtime/harper.js')])
    .then(([{ config, onConfigChange }, { log }]) => {
      if (stopped) return;
      tick = new MaintenanceTick({
        duties,
        interval: () => config().maintenance.tickInterval,
        clock: () => Date.now(),
        timer: realTimer,
        log,
      });
      unsubscribe = onConfigChange((_next, _prev, changed) => {
        if (changed.includes('maintenance.tickInterval')) tick?.rearm();
      });
      tick.start();
    })
    .catch((e: unknown) => {
      // Nothing to log through if the logger itself failed to load.
      console.error('queue-keeper: maintenance tick failed to start', e);
    });
  return () => {
    stopped = true;
    unsubscribe?.();
    tick?.stop();
  };
}
