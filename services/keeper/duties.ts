// The keeper's timers, every one a duty on the scheduler (util/duties/scheduler.ts):
// - load: subscribe, then walk; a failed load retries after 30 s, doubling to 10 min;
// - publish: one duty that carries out util/keeper/publishPlan.ts: the periodic refresh every
//   `queue.keeper.publishInterval` (with the leadership check, the requeued pass and the status), the
//   publish at each due instant, the minute publish staged ahead of its boundary, and the early publish
//   when woken (a due-now write, a claim's poke), spaced by what publishes cost. It looks again when
//   the plan says;
// - state document every `queue.keeper.stateInterval`;
// - verification every `queue.keeper.verifyInterval` (0 = off, re-checked each minute; a failed walk
//   retries in 30 s);
// - resubscribe, 30 s after the schedule subscription closed (a failed attempt waits again);
// - every minute, a read of the rows a load or walk met stored but unreadable, held by no keeper.
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
import type { PublishPlan } from '../../util/keeper/publishPlan.js';
import type { KeeperPhase } from '../../util/sharedMemory/keeperSignal.js';
import type { VerifyResult } from './verification.js';
import type { KeeperDeps, KeeperStats } from './deps.js';

/** What the duties run of the keeper (services/keeper/service.ts KeeperService). */
export interface DutyHost {
  readonly clock: () => number;
  readonly core: { readonly size: number };
  readonly stats: KeeperStats;
  phase: KeeperPhase;
  serving: boolean;
  resyncing: boolean;
  subscribe(now: () => number, onClosed: (err?: unknown) => void): Promise<void>;
  subscriptionClosed(err?: unknown): void;
  closeSubscription(): void;
  load(now: () => number): Promise<void>;
  withdraw(now: number): void;
  verify(now: () => number): Promise<VerifyResult | null>;
  retryUnreadable(now: number): number;
  writeState(now: number): boolean;
  publishPlan(now: number): PublishPlan;
  publishTicked(now: number): void;
  startTimedPublishes(now: number): void;
  publishOnce(now: number, force: boolean): boolean;
  stageMinutePublish(now: number, at: number): boolean;
  dropStage(): void;
}

export const RESUBSCRIBE_BACKOFF_MS = 30_000;
export const VERIFY_RETRY_MS = 30_000;
export const LOAD_BACKOFF_MS = 30_000;
export const LOAD_BACKOFF_MAX_MS = 600_000;
/** Verification off (interval 0) is re-checked this often. */
const VERIFY_OFF_RECHECK_MS = 60_000;
/** How often rows that did not decode are read again (KeeperService.retryUnreadable). */
export const UNREADABLE_RETRY_MS = 60_000;
export class KeeperDuties {
  private readonly scheduler: DutyScheduler;
  private readonly handles: DutyHandle[] = [];
  private readonly publish: DutyHandle;
  private readonly resubscribe: DutyHandle;
  private loadRetryMs = LOAD_BACKOFF_MS;
  private loadWait: number | null = 0;
  private verifyFailed = false;
  private live: (() => void) | null = null;
  private stopped = false;

  constructor(
    private readonly svc: DutyHost,
    private readonly deps: KeeperDeps,
  ) {
    this.scheduler = deps.scheduler;
    // From construction: an early publish may be asked for while the load runs. A plan that has
    // something to do runs at once; one that only waits is armed for when it says.
    const wait = (now: number): number | null => {
      const p = svc.publishPlan(now);
      if (p.action !== 'wait') return 0;
      return Number.isFinite(p.next) ? Math.max(0, p.next - now) : null;
    };
    this.publish = this.add(
      { name: 'keeper publish', runOnce: (now) => this.publishOnce(now) },
      { next: wait, wake: (now) => wait(now) ?? 0 },
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

  /** Wakes the publish duty: it publishes as soon as the plan's spacing allows. */
  publishSoon(): void {
    this.publish.wake();
  }

  resubscribeSoon(): void {
    this.resubscribe.wake();
  }

  /**
   * Arms the minute publish and the load (at once); resolves once the keeper is live and its publish,
   * state and verify duties run.
   */
  start(): Promise<void> {
    return new Promise((resolve) => {
      this.live = resolve;
      this.add({ name: 'keeper load', runOnce: () => this.loadOnce() }, { next: () => this.loadWait });
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.handles.map((h) => h.stop()));
  }

  /** Carries out the publish plan at `now` (util/keeper/publishPlan.ts). */
  private async publishOnce(now: number): Promise<Counts> {
    const svc = this.svc;
    const p = svc.publishPlan(now);
    if (p.tick) {
      svc.publishTicked(now);
      // A keeper that lost its leader slot (it stalled past the stale limit and a new worker 0 took
      // over) must stop writing shared memory: two publishers would interleave sets.
      if (this.deps.holdLeadership && !this.deps.holdLeadership(now)) {
        const was = svc.serving;
        if (was) this.deps.log.error('keeper lost its leader slot to another worker 0; no longer publishing');
        svc.serving = false;
        svc.dropStage(); // its held slot would block the new keeper's publishes
        return { leadershipLost: was ? 1 : 0 };
      }
      if (!svc.serving && svc.phase === 'live') svc.serving = true;
    }
    if (!svc.serving) {
      if (p.dropStage) svc.dropStage();
      return {};
    }
    if (p.action === 'stage') {
      if (!svc.stageMinutePublish(now, p.at)) return {};
      return { staged: 1 };
    }
    if (p.action === 'publish' || p.action === 'flip') svc.publishOnce(now, true);
    else if (p.tick) svc.publishOnce(now, false);
    if (!p.tick) return {};
    return (await this.deps.afterPublish?.(now)) ?? {};
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
    // The load publishes while it walks, and its last publish counts as this interval's refresh.
    svc.startTimedPublishes(svc.clock());
    this.publish.wake();
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
    // Rows a load or walk met stored but unreadable, held by no keeper: read again each minute.
    this.add(
      { name: 'keeper unreadable retry', runOnce: (now) => ({ taken: svc.retryUnreadable(now) }) },
      every(() => UNREADABLE_RETRY_MS),
    );
    this.add(
      { name: 'keeper verify', runOnce: () => this.verifyOnce() },
      {
        next: () => (this.verifyFailed ? VERIFY_RETRY_MS : keeper().verifyInterval || VERIFY_OFF_RECHECK_MS),
      },
    );
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
