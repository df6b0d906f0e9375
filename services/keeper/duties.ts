// The keeper's timers, every one a duty on the scheduler (util/duties/scheduler.ts):
// - load: subscribe, then walk; a failed load retries after 30 s, doubling to 10 min;
// - publish tick every `queue.keeper.publishInterval` (leadership check, publish, requeued pass, status);
// - the minute publish just after each minute boundary (rows come due on minute boundaries), written
//   STAGE_LEAD_MS ahead into the ready set's inactive slot when rows come due at that boundary, so the
//   publish only flips it active;
// - the early publish, when woken (a due-now write, the exhausted-set poke, the refill watch), at most
//   every 50 ms, and further apart when publishes are slow (never more than ~1/4 of worker 0's time);
// - the refill watch, every 10 ms while the last publish left due rows out of the set (a burst): it
//   asks for the early publish once a quarter of the set is left, so claims rarely find it empty;
// - state document every `queue.keeper.stateInterval`;
// - verification every `queue.keeper.verifyInterval` (0 = off, re-checked each minute; a failed walk
//   retries in 30 s);
// - resubscribe, 30 s after the schedule subscription closed (a failed attempt waits again).
// Interval changes re-arm through the scheduler (a `timers` key of the config schema).
import {
  every,
  onWake,
  type Cadence,
  type Counts,
  type Duty,
  type DutyHandle,
  type DutyScheduler,
} from '../../util/duties/scheduler.js';
import type { KeeperService } from './service.js';
import type { KeeperDeps } from './deps.js';

export const RESUBSCRIBE_BACKOFF_MS = 30_000;
export const VERIFY_RETRY_MS = 30_000;
export const LOAD_BACKOFF_MS = 30_000;
export const LOAD_BACKOFF_MAX_MS = 600_000;
/** Verification off (interval 0) is re-checked this often. */
const VERIFY_OFF_RECHECK_MS = 60_000;
const POKE_MIN_MS = 50;
/** An early publish waits at least this many times the last publish's own cost after the previous one. */
const PUBLISH_COST_SPACING = 4;
/** How often the refill watch looks at the set while a burst has due rows left out of it. */
export const REFILL_POLL_MS = 10;
/** The watch asks for a publish once this share of the published entries (or less) is left. */
export const REFILL_AT_SHARE = 0.25;
const MINUTE_MS = 60_000;
/** The minute publish runs this long after the boundary, so `now` is surely past it on every clock read. */
const MINUTE_SLACK_MS = 5;
/**
 * How long before a minute boundary the minute publish is written (staged). The walk and write it takes off
 * the due instant ran 40–100 ms of wall time on a loaded worker 0 (an instrumented bench/due-burst.ts); the
 * lead leaves room for that. Periodic publishes in the lead wait for the flip; early ones drop the stage.
 */
export const STAGE_LEAD_MS = 400;

export class KeeperDuties {
  private readonly scheduler: DutyScheduler;
  private readonly handles: DutyHandle[] = [];
  private readonly early: DutyHandle;
  private readonly refill: DutyHandle;
  /** The last publish left due, unleased rows out of the set: the refill watch runs. */
  private watching = false;
  private readonly resubscribe: DutyHandle;
  private loadRetryMs = LOAD_BACKOFF_MS;
  private loadWait: number | null = 0;
  private verifyFailed = false;
  private live: (() => void) | null = null;
  private stopped = false;

  constructor(
    private readonly svc: KeeperService,
    private readonly deps: KeeperDeps,
  ) {
    this.scheduler = deps.scheduler;
    this.early = this.add(
      { name: 'keeper early publish', runOnce: (now) => this.publishForced(now) },
      onWake((now, last) => (last ? Math.max(0, last.at + this.earlySpacing() - now) : 0)),
    );
    this.refill = this.add(
      { name: 'keeper refill watch', runOnce: () => this.refillOnce() },
      { next: () => (this.watching ? REFILL_POLL_MS : null), wake: () => REFILL_POLL_MS },
    );
    this.resubscribe = this.add(
      { name: 'keeper resubscribe', runOnce: () => this.resubscribeOnce() },
      onWake(() => RESUBSCRIBE_BACKOFF_MS),
    );
  }

  add(duty: Duty, cadence: Cadence): DutyHandle {
    const h = this.scheduler.add(duty, cadence);
    if (this.stopped) void h.stop();
    else this.handles.push(h);
    return h;
  }

  publishSoon(): void {
    this.early.wake();
  }

  /**
   * A publish just happened: `complete` says whether every due, unleased row made it into the set. An
   * incomplete set (a burst larger than the set) starts the refill watch; a complete one stops it.
   */
  published(complete: boolean): void {
    const was = this.watching;
    this.watching = !complete;
    if (this.watching && !was) this.refill.wake();
  }

  resubscribeSoon(): void {
    this.resubscribe.wake();
  }

  /**
   * Arms the minute publish and the load (at once); resolves once the keeper is live and its publish,
   * state and verify duties run.
   */
  start(): Promise<void> {
    this.add(
      { name: 'keeper minute stage', runOnce: (now) => this.stageOnce(now) },
      {
        next: (now) => {
          const ms = MINUTE_MS - (now % MINUTE_MS) - STAGE_LEAD_MS;
          return ms > 0 ? ms : ms + MINUTE_MS;
        },
      },
    );
    this.add(
      {
        name: 'keeper minute publish',
        runOnce: (now) => {
          if (this.svc.serving) return this.publishForced(now);
          this.svc.dropStage();
          return {};
        },
      },
      { next: (now) => MINUTE_MS - (now % MINUTE_MS) + MINUTE_SLACK_MS },
    );
    return new Promise((resolve) => {
      this.live = resolve;
      this.add({ name: 'keeper load', runOnce: () => this.loadOnce() }, { next: () => this.loadWait });
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.handles.map((h) => h.stop()));
  }

  /**
   * The gap between early publishes: POKE_MIN_MS, or PUBLISH_COST_SPACING × the last publish's cost when
   * that is longer (a publish skipping 100,000 leased rows took 213 ms; every 50 ms it would leave worker
   * 0 no time for claims), never longer than the publish interval. A flipped stage costs what its walk
   * did before the boundary: the next early publish walks.
   */
  private earlySpacing(): number {
    const last = this.svc.stats.lastPublish;
    const cost = (last === null ? 0 : last.ms + last.stageMs) * PUBLISH_COST_SPACING;
    const interval = this.deps.publishInterval();
    return Math.max(POKE_MIN_MS, Math.min(cost, interval));
  }

  /** The refill watch: once a quarter of an incomplete set is left, ask for the early publish. */
  private refillOnce(): Counts {
    if (!this.watching || !this.svc.serving) return {};
    const set = this.deps.ready.snapshot();
    if (set.remaining > set.count * REFILL_AT_SHARE) return {};
    this.early.wake();
    return { refill: 1 };
  }

  /** Writes the next minute publish ahead (stageMinutePublish), when this runs shortly before its boundary. */
  private stageOnce(now: number): Counts {
    const at = now - (now % MINUTE_MS) + MINUTE_MS + MINUTE_SLACK_MS;
    if (!this.svc.serving || at - now > 2 * STAGE_LEAD_MS) return {};
    return this.svc.stageMinutePublish(now, at) ? { staged: 1 } : {};
  }

  private publishForced(now: number): Counts {
    this.svc.publishOnce(now, true);
    return {};
  }

  private async loadOnce(): Promise<Counts> {
    const svc = this.svc;
    try {
      await svc.subscribe(svc.clock, (err) => svc.subscriptionClosed(err));
      await svc.load(svc.clock);
    } catch (e) {
      svc.phase = 'failed';
      svc.stats.lastError = `load failed: ${(e as Error)?.message ?? String(e)}`;
      svc.closeSubscription();
      svc.withdraw(svc.clock());
      this.deps.log.error(`keeper load failed; retrying in ${this.loadRetryMs / 1000} s`, e);
      this.loadWait = this.loadRetryMs;
      this.loadRetryMs = Math.min(this.loadRetryMs * 2, LOAD_BACKOFF_MAX_MS);
      return {};
    }
    this.loadWait = null;
    if (this.stopped) return {};
    this.deps.log.info(`keeper live: ${svc.core.size} rows loaded in ${svc.stats.loadMs} ms`);
    this.startLive();
    this.live?.();
    return {};
  }

  private startLive(): void {
    const svc = this.svc;
    const keeper = () => this.deps.config().queue.keeper;
    this.add(
      { name: 'keeper publish', runOnce: (now) => this.publishTick(now) },
      every(this.deps.publishInterval),
    );
    this.add(
      {
        name: 'keeper state',
        runOnce: async (now) => {
          await this.deps.beforeState?.(now);
          svc.writeState(now);
          return {};
        },
      },
      every(this.deps.stateInterval),
    );
    svc.writeState(svc.clock());
    this.add(
      { name: 'keeper verify', runOnce: () => this.verifyOnce() },
      {
        next: () => (this.verifyFailed ? VERIFY_RETRY_MS : keeper().verifyInterval || VERIFY_OFF_RECHECK_MS),
      },
    );
  }

  /** The periodic publish: only while this keeper holds the leader slot. */
  private async publishTick(now: number): Promise<Counts> {
    const svc = this.svc;
    // A keeper that lost its leader slot (it stalled past the stale limit and a new worker 0 took over)
    // must stop writing shared memory: two publishers would interleave sets.
    if (this.deps.holdLeadership && !this.deps.holdLeadership(now)) {
      const was = svc.serving;
      if (was)
        this.deps.log.error('keeper lost its leadership slot to another worker 0; no longer publishing');
      svc.serving = false;
      svc.dropStage(); // its held slot would block the new keeper's publishes
      return { leadershipLost: was ? 1 : 0 };
    }
    if (!svc.serving && svc.phase === 'live') svc.serving = true;
    svc.publishOnce(now, false);
    return (await this.deps.afterPublish?.(now)) ?? {};
  }

  private async verifyOnce(): Promise<Counts> {
    if (this.deps.config().queue.keeper.verifyInterval === 0) return {};
    try {
      const r = await this.svc.verify(this.svc.clock);
      this.verifyFailed = false;
      return r
        ? { missing: r.missing, mismatched: r.mismatched, phantom: r.phantom, unowned: r.unowned }
        : {};
    } catch (e) {
      this.verifyFailed = true;
      this.deps.log.error(`keeper verification failed; retrying in ${VERIFY_RETRY_MS / 1000} s`, e);
      this.svc.stats.lastError = `verify failed: ${(e as Error)?.message ?? String(e)}`;
      return {};
    }
  }

  private async resubscribeOnce(): Promise<Counts> {
    const svc = this.svc;
    try {
      svc.closeSubscription();
      await svc.subscribe(svc.clock, (err) => svc.subscriptionClosed(err));
      await svc.verify(svc.clock);
      svc.resyncing = false;
      return { resubscribed: 1 };
    } catch (e) {
      this.deps.log.error('keeper resubscribe failed; retrying after backoff', e);
      svc.stats.lastError = `resubscribe failed: ${(e as Error | undefined)?.message ?? String(e)}`;
      // Woken while it runs: it runs again after the backoff.
      this.resubscribe.wake();
      return {};
    }
  }
}
