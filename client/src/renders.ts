// The renders in flight: each job renders under its lease, and is aborted (and reported `failed`) a
// margin before the lease ends, so the report still lands inside it, whether or not the renderer honours
// the signal. A finished render leaves as a wire result through `onResult`.
import type { Clock, Timer } from './clock.js';
import type { FleetCounters } from './fleetOptions.js';
import type { ResultRoute } from './resultRoutes.js';
import type { Job, Outcome, RenderFn, RenderResult, WireResult } from './types.js';
import { errorOf, toWire } from './wireResults.js';

interface Running {
  job: Job;
  controller: AbortController;
  startedAt: number;
  /** The lease end on our clock. */
  localExpiry: number;
  timer: Timer;
  settled: boolean;
  /** Where its result goes. */
  route: ResultRoute;
}

export interface RendersDeps {
  clock: Clock;
  render: RenderFn;
  /** Aborted this long before the lease ends (at most a quarter of the lease). */
  leaseMarginMs: number;
  count: FleetCounters;
  /**
   * A render finished (or was aborted): its result, its lease end on our clock, the clock now, and the
   * route its job was started with.
   */
  onResult: (wire: WireResult, localExpiry: number, now: number, route: ResultRoute) => void;
}

export class Renders {
  private readonly running = new Map<string, Running>();

  constructor(private readonly deps: RendersDeps) {}

  get size(): number {
    return this.running.size;
  }

  /**
   * Starts rendering a granted job; its lease end is read on the server's clock, `skewMs` ahead of ours.
   * `route` says where its result goes.
   */
  start(job: Job, skewMs: number, now: number, route: ResultRoute = { origin: null }): void {
    const { clock, count } = this.deps;
    if (typeof job?.leaseToken !== 'string' || typeof job.id !== 'string') return;
    count.claimed++;
    const localExpiry = (typeof job.expiresAt === 'number' ? job.expiresAt : now) - skewMs;
    const lease = Math.max(0, localExpiry - now);
    const abortAt = localExpiry - Math.min(this.deps.leaseMarginMs, lease / 4);
    const run: Running = {
      job,
      controller: new AbortController(),
      startedAt: now,
      localExpiry,
      timer: { cancel: () => {} },
      settled: false,
      route,
    };
    this.running.set(job.leaseToken, run);
    run.timer = clock.setTimer(
      () => this.abort(run, 'LeaseExpired', 'the render would have outlived its lease'),
      abortAt - now,
    );
    let p: Promise<RenderResult>;
    try {
      p = Promise.resolve(this.deps.render(job, run.controller.signal));
    } catch (e) {
      p = Promise.reject(e);
    }
    p.then(
      (r) => this.finish(run, r),
      (e: unknown) => this.finish(run, { outcome: 'failed', error: errorOf(e) }),
    );
  }

  /** Aborts every render in flight with this error (the fleet stopping before they finished). */
  abortAll(name: string, message: string): void {
    for (const r of [...this.running.values()]) this.abort(r, name, message);
  }

  private abort(run: Running, name: string, message: string): void {
    if (run.settled) return;
    run.controller.abort(Object.assign(new Error(message), { name }));
    if (name === 'LeaseExpired') this.deps.count.abortedAtLease++;
    // Reported now, whether or not the renderer honours the signal: the lease will not wait for it.
    this.finish(run, { outcome: 'failed', error: { name, message } });
  }

  private finish(run: Running, r: RenderResult): void {
    if (run.settled) return;
    run.settled = true;
    run.timer.cancel();
    this.running.delete(run.job.leaseToken);
    const now = this.deps.clock.now();
    const wire = toWire(run.job, r, now - run.startedAt);
    this.countOutcome(wire.outcome);
    this.deps.onResult(wire, run.localExpiry, now, run.route);
  }

  private countOutcome(o: Outcome): void {
    const { count } = this.deps;
    if (o === 'rendered') count.rendered++;
    else if (o === 'failed') count.failed++;
    else if (o === 'redirected') count.redirected++;
    else count.nonIndexable++;
  }
}
