// The renders in flight: each job renders under its lease, and is aborted (and reported `failed`) a
// margin before the lease ends, so the report still lands inside it, whether or not the renderer honours
// the signal. A render still running at half its lease asks for the lease to last longer
// (`/render_queue/extend`); the abort moves with each extension granted. A finished render leaves as a
// wire result through `onResult`.
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
  /** The lease's length at its grant: what each extension asks for. */
  leaseMs: number;
  /** The server's clock minus ours when the job came. */
  skewMs: number;
  extendTimer: Timer;
}

/**
 * What an extension came to: the lease's new end on the server's clock, `refused` (409: not ours any
 * more, or ended; the render is left to its abort), or `failed` (the request did not get an answer).
 */
export type ExtendAnswer = number | 'refused' | 'failed';

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
  /** Asks for the job's lease to end `byMs` from now, at the node its result goes to; absent: never. */
  extend?: (job: Job, byMs: number, route: ResultRoute) => Promise<ExtendAnswer>;
}

/** An extension asked for with less than this left is not worth the round trip: the abort is due. */
const MIN_EXTEND_LEFT_MS = 1_000;

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
      leaseMs: lease,
      skewMs,
      extendTimer: { cancel: () => {} },
    };
    this.running.set(job.leaseToken, run);
    run.timer = clock.setTimer(
      () => this.abort(run, 'LeaseExpired', 'the render would have outlived its lease'),
      abortAt - now,
    );
    this.planExtension(run, now);
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

  /** Asks for a longer lease when half of what is left of it has gone, while the render runs. */
  private planExtension(run: Running, now: number): void {
    const extend = this.deps.extend;
    const left = run.localExpiry - now;
    if (!extend || run.settled || left < 2 * MIN_EXTEND_LEFT_MS) return;
    run.extendTimer = this.deps.clock.setTimer(() => {
      if (run.settled) return;
      void extend(run.job, run.leaseMs, run.route).then(
        (answer) => this.extended(run, answer),
        () => this.extended(run, 'failed'),
      );
    }, left / 2);
  }

  private extended(run: Running, answer: ExtendAnswer): void {
    if (run.settled || answer === 'refused') return;
    const now = this.deps.clock.now();
    if (answer === 'failed') {
      // Tried again at half of what is left, while that is worth it; the abort still stands meanwhile.
      this.planExtension(run, now);
      return;
    }
    const localExpiry = answer - run.skewMs;
    // An end that did not move is the cap (queue.maxLeaseTime): the abort at its margin decides now.
    if (localExpiry <= run.localExpiry) return;
    run.localExpiry = localExpiry;
    run.timer.cancel();
    run.timer = this.deps.clock.setTimer(
      () => this.abort(run, 'LeaseExpired', 'the render would have outlived its lease'),
      localExpiry - Math.min(this.deps.leaseMarginMs, run.leaseMs / 4) - now,
    );
    this.planExtension(run, now);
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
    run.extendTimer.cancel();
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
