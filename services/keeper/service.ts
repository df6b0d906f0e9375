// The queue keeper's lifecycle on worker 0 (docs/architecture.md): withdraw, subscribe-then-walk, serve while
// loading, live, publish, head check, verify, state. Its table access comes through a ScheduleSource so
// service tests can drive it with a fake table and a fake clock; services/keeper/leadership.ts wires the
// real one. Its timers are duties on the scheduler it is given (services/keeper/duties.ts); stop() ends them.
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { pathsWithEffect } from '../../util/config/effects.js';
import type { Cadence, Duty, DutyHandle } from '../../util/duties/scheduler.js';
import { KeeperCore } from '../../util/keeper/core.js';
import type { PublishPlan } from '../../util/keeper/publishPlan.js';
import type { KeeperPhase } from '../../util/sharedMemory/keeperSignal.js';
import { classifyUrl, toScheduleRow, type ScheduleRow } from '../../util/schedule/rules.js';
import { deviceSuffixes, keyOfDevices, urlOfKey } from '../../util/schedule/rowKey.js';
import { KeeperDuties } from './duties.js';
import type { EventStream, KeeperDeps, KeeperStats, RowCheckDeps, ScheduleEvent } from './deps.js';
import { RESERVE_SLACK } from './deps.js';
import { KeeperVerifier, type VerifyResult } from './verification.js';
import { HeadCheck } from './headCheck.js';
import { dueByMinute, KeeperPublisher } from './publisher.js';
import { loadWalk, rowEstimate, type LoadHost, type WalkCursor } from './loadWalk.js';
import { keeperStateDocument } from './stateDocument.js';
import { endSubscription } from '../runtime/tableFollower.js';

export type {
  EventStream,
  KeeperDeps,
  KeeperLog,
  KeeperStats,
  ScheduleEvent,
  ScheduleSource,
} from './deps.js';
export { WALK_CHUNK } from './deps.js';
export { LOAD_BACKOFF_MAX_MS, LOAD_BACKOFF_MS, RESUBSCRIBE_BACKOFF_MS, VERIFY_RETRY_MS } from './duties.js';

/** A stored row that did not decode is logged at most this often (with the count since). */
const UNREADABLE_WARN_EVERY_MS = 60_000;
/** Unreadable rows nobody holds that the keeper reads again, at most (a walk meets any others). */
const UNREADABLE_PENDING_MAX = 10_000;

export class KeeperService {
  readonly core: KeeperCore;
  phase: KeeperPhase = 'stopped';
  /** Claims may be served (set from the first loaded chunk on). */
  serving = false;
  loadComplete = false;
  partial = false;
  resyncing = false;
  stats: KeeperStats = {
    loadMs: null,
    loadRows: 0,
    lastPublish: null,
    headCheck: null,
    lastVerify: null,
    repairedTotal: 0,
    unreadableTotal: 0,
    orphaned: null,
    lastSettledWalk: null,
    recoveredTotal: 0,
    lastError: null,
    apply: { events: 0, ms: 0 },
  };
  readonly clock: () => number;
  private touched: Set<string> | null = null;
  private stream: EventStream | null = null;
  private readonly publisher: KeeperPublisher;
  private readonly verifier: KeeperVerifier;
  private readonly headChecker: HeadCheck;
  /** `|<device>` of each configured device: the keeper holds only those devices' rows. */
  private deviceSuffixes: string[];
  private readonly duties: KeeperDuties;
  private unsubscribeConfig: (() => void) | null = null;
  private stopped = false;
  private readonly yieldLoop: () => Promise<void>;
  /** Events applied; tests use it to wait for the consumer. */
  eventsApplied = 0;
  private unreadableWarnedAt = -Infinity;
  private unreadableWarned = 0;
  /** Owned keys stored but unreadable when a load or walk met them, held by nobody: read again later. */
  private readonly unreadablePending = new Set<string>();
  subscriptions = 0;

  constructor(private readonly deps: KeeperDeps) {
    const cfg = deps.config();
    this.deviceSuffixes = deviceSuffixes(cfg.render.deviceTypes);
    this.core = new KeeperCore({ classify: this.classifier(cfg), score: this.scoreOptions(cfg) });
    this.yieldLoop = deps.yieldLoop ?? (() => new Promise((r) => setImmediate(r)));
    this.clock = deps.clock ?? (() => Date.now());
    const rows: RowCheckDeps = {
      core: this.core,
      repair: (key, row, now) => {
        this.applyHeld(key, row, now);
      },
      source: deps.source,
      unreadable: (key, now) => this.unreadable(key, now),
      unreadableUnheld: (key, now) => this.unreadableUnheld(key, now),
      owns: (key) => this.owns(key),
      orphan: (key) => this.orphan(key),
      stats: this.stats,
      log: deps.log,
      yieldLoop: this.yieldLoop,
      sliceClock: deps.sliceClock ?? (() => performance.now()),
      metric: deps.metric,
      countRepaired: deps.countRepaired,
      countRecovered: deps.countRecovered,
    };
    this.verifier = new KeeperVerifier(rows);
    this.headChecker = new HeadCheck(rows);
    this.publisher = new KeeperPublisher(this, deps, deps.publishInterval);
    this.duties = new KeeperDuties(this, deps);
  }

  /** A held row's queue and cadence come from its URL (routes match the path, whatever the device). */
  private classifier(cfg: QueueKeeperConfig) {
    return (key: string, own: number | null) => classifyUrl(urlOfKey(key), own, cfg);
  }

  private scoreOptions(cfg: QueueKeeperConfig) {
    const r = cfg.queue.ready;
    return {
      sitemapBoost: r.sitemapBoost,
      urgentHeadStart: r.urgentHeadStart,
      changedHeadStart: r.changedHeadStart,
    };
  }

  /** Whether the keeper holds `key`: a configured device's row of a URL this node owns. */
  private owns(key: string): boolean {
    return keyOfDevices(key, this.deviceSuffixes) && (this.deps.owns ? this.deps.owns(key) : true);
  }

  /** A row of a URL this node owns whose device is not configured (docs/feeding.md "Devices"). */
  private orphan(key: string): boolean {
    return !keyOfDevices(key, this.deviceSuffixes) && (this.deps.owns ? this.deps.owns(key) : true);
  }

  /**
   * Runs the keeper (after withdraw()): follows config changes, arms the minute publish, then subscribes
   * and loads (a failed load retries with backoff) and, once live, runs the publish, state and verify
   * duties. Resolves when the keeper is live (never, if it is stopped first).
   */
  async start(): Promise<void> {
    this.unsubscribeConfig =
      this.deps.onConfigChange?.((_next, _prev, changed) => this.configChanged(changed)) ?? null;
    await this.duties.start();
  }

  /** Unsubscribes (the schedule and config), stops every duty, and waits for one that is running. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.dropStage(); // before waiting for a running duty: a long verify must not keep the slot held
    this.unsubscribeConfig?.();
    this.unsubscribeConfig = null;
    this.closeSubscription();
    await this.duties.stop();
    this.closeSubscription(); // one a load or resubscribe in progress opened meanwhile
    this.serving = false;
  }

  /** Runs `duty` on the keeper's scheduler until the keeper stops (e.g. the status sync). */
  addDuty(duty: Duty, cadence: Cadence): DutyHandle {
    return this.duties.add(duty, cadence);
  }

  /**
   * An early publish (a due-now write, a claim's poke), spaced by what publishes cost
   * (util/keeper/publishPlan.ts).
   */
  publishSoon(): void {
    if (!this.serving) return;
    this.publisher.askSoon();
    this.duties.publishSoon();
  }

  /** What the publish duty does at `now`, and when it looks again (util/keeper/publishPlan.ts). */
  publishPlan(now: number): PublishPlan {
    return this.publisher.plan(now);
  }

  /** The periodic refresh ran at `now` (the publish duty's tick). */
  publishTicked(now: number): void {
    this.publisher.ticked(now);
  }

  /** Live: the timed publishes start (util/keeper/publishPlan.ts). */
  startTimedPublishes(now: number): void {
    this.publisher.startTimed(now);
  }

  /** The config changed: a key whose schema effect is `reclassify` re-sorts the held rows. */
  configChanged(changed: readonly string[]): void {
    if (pathsWithEffect(changed, 'reclassify').length > 0) this.reclassify();
    if (changed.includes('render.deviceTypes')) void this.devicesChanged(() => this.clock());
  }

  /**
   * render.deviceTypes changed: the rows of a device no longer listed are dropped in slices (claims refuse
   * them meanwhile) and a walk takes up the rows of a device listed again. A device new to the table gets
   * its rows from the device duty (services/schedule/deviceDuties.ts), through the subscription.
   */
  async devicesChanged(now: () => number): Promise<void> {
    this.deviceSuffixes = deviceSuffixes(this.deps.config().render.deviceTypes);
    if (this.phase !== 'live') return; // a load in progress reads owns() row by row; a later walk settles the rest
    try {
      this.dropStage();
      await this.verifier.membershipChanged(
        now,
        (dropped) => {
          if (dropped > 0 && this.serving) this.publishOnce(now(), true);
        },
        { sliced: true },
      );
    } catch (e) {
      this.deps.log.error(
        'keeper: taking up the new device list failed; the next verification walk retries',
        e,
      );
    }
  }

  /** A route, default-cadence or score change: re-sort held rows in memory, never reload. */
  reclassify(): void {
    this.dropStage();
    const cfg = this.deps.config();
    this.core.reclassify(this.classifier(cfg), this.scoreOptions(cfg));
  }

  /** Step 1: clear the signal, publish an empty set, report unready. */
  withdraw(now: number): void {
    this.serving = false;
    this.dropStage();
    this.deps.ready.publish([], now);
    this.deps.signal.write(
      { live: false, phase: this.phase, dueCount: 0, complete: false, leftOut: false },
      now,
    );
    this.deps.metric?.('keeper_live', 0);
  }

  applyEvent(ev: ScheduleEvent, now: number): void {
    const key = typeof ev.id === 'string' ? ev.id : String(ev.id);
    if (ev.type !== 'put' && ev.type !== 'delete' && ev.type !== 'patch') return;
    this.touched?.add(key);
    this.verifier.touched(key);
    // A put that carries no schedule record (no value, or one without a due time) says nothing of the row:
    // it is read from the table, never taken for a deletion, which would drop a live row until a walk.
    let row: ScheduleRow | undefined;
    if (ev.type !== 'delete') {
      row = ev.value ? toScheduleRow(key, ev.value) : undefined;
      if (row === undefined) row = this.deps.source.read(key);
      // Harper builds an event's value and a read's row with one decoder, which answers null for a value
      // it cannot decode: a live row must not be dropped for that.
      if (row === undefined && this.unreadable(key, now)) {
        this.eventsApplied++;
        return;
      }
    }
    const held = row && this.owns(key) ? row : null;
    const changed = this.applyHeld(key, held, now);
    this.eventsApplied++;
    // A live write made a row due now (filed due-now, revalidated, changed, a result rescheduling into
    // this minute): publish early so it is claimable within ~50 ms instead of at the next interval.
    // Due by the core's own rule (its minute has begun), or a row due later this minute
    // would be held due and still wait a tick.
    if (changed && held && this.serving && dueByMinute(held.nextRenderTime, now)) this.publishSoon();
  }

  /**
   * A read of `key` found no row, yet the store holds a live value there: one that did not decode (a record
   * layout this process cannot read yet, a damaged value). What the keeper holds of the key stays, since
   * dropping it would leave a live row held by no keeper until a walk could read it; a warning names the
   * key, at most once a minute with the count since.
   */
  private unreadable(key: string, now: number): boolean {
    if (this.deps.source.present?.(key) !== true) return false;
    this.stats.unreadableTotal++;
    if (now - this.unreadableWarnedAt >= UNREADABLE_WARN_EVERY_MS) {
      this.deps.log.warn(
        `keeper: ${this.stats.unreadableTotal - this.unreadableWarned} read(s) found a stored row that did not ` +
          `decode (last ${JSON.stringify(key.slice(0, 200))}); what the keeper holds of those rows is kept`,
      );
      this.unreadableWarnedAt = now;
      this.unreadableWarned = this.stats.unreadableTotal;
    }
    return true;
  }

  /**
   * A load or walk met `key` stored but unreadable, of a URL this node owns, and holds nothing of it: no
   * other keeper holds it either, so it is read again (retryUnreadable) until it reads or is gone.
   */
  private unreadableUnheld(key: string, now: number): void {
    if (!this.owns(key) || this.core.has(key) || this.deps.source.present?.(key) !== true) return;
    if (this.unreadablePending.size >= UNREADABLE_PENDING_MAX) return; // the next verification walk meets the rest
    if (this.unreadable(key, now)) this.unreadablePending.add(key);
  }

  /**
   * Reads again the rows a load or walk could not read: one that reads now is taken up (through the
   * keeper's one apply path), one no longer stored or owned is forgotten. Answers the rows taken up.
   */
  retryUnreadable(now: number): number {
    let taken = 0;
    for (const key of this.unreadablePending) {
      if (!this.owns(key)) {
        this.unreadablePending.delete(key);
        continue;
      }
      const row = this.deps.source.read(key);
      if (row !== undefined) {
        this.unreadablePending.delete(key);
        if (!this.core.has(key)) {
          this.applyHeld(key, row, now);
          taken++;
        }
      } else if (this.deps.source.present?.(key) !== true) this.unreadablePending.delete(key);
    }
    if (taken > 0)
      this.deps.log.info(`keeper: took up ${taken} rows that read again after they did not decode`);
    return taken;
  }

  /** Rows waiting to be read again (retryUnreadable). */
  get unreadableWaiting(): number {
    return this.unreadablePending.size;
  }

  /**
   * Every change to what the keeper holds, from an event or a repair (verify, head check). A row that is
   * due by the staged minute publish and changed (filed, marked, moved into it, repaired) is not in its
   * selection as it is now: the minute publish walks afresh instead. True when the held entry changed.
   */
  private applyHeld(key: string, held: ScheduleRow | null, now: number): boolean {
    const changed = this.core.apply(key, held, now);
    if (changed && held) this.publisher.rowChanged(held.nextRenderTime);
    return changed;
  }

  /** Opens the subscription and consumes it in the background; resolves once subscribed. */
  async subscribe(now: () => number, onClosed: (err?: unknown) => void): Promise<void> {
    const stream = await this.deps.source.subscribe();
    if (this.stopped) {
      this.stream = stream;
      this.closeSubscription();
      return;
    }
    this.stream = stream;
    this.subscriptions++;
    void (async () => {
      try {
        for await (const ev of stream) {
          if (this.stream !== stream) return;
          const t0 = performance.now();
          this.applyEvent(ev, now());
          this.stats.apply.ms += performance.now() - t0;
          this.stats.apply.events++;
        }
        if (this.stream === stream) onClosed();
      } catch (e) {
        if (this.stream === stream) onClosed(e);
      }
    })();
  }

  /**
   * The subscription ended or failed: the keeper keeps serving what it holds but marks itself resyncing
   * (`exact: false`), then after RESUBSCRIBE_BACKOFF_MS opens a new subscription and runs a verification
   * walk to pick up what it missed meanwhile. A failed attempt waits the backoff again — never a tight
   * loop against a store that is refusing subscriptions.
   */
  subscriptionClosed(err?: unknown): void {
    if (this.stopped) return;
    this.deps.log.error('keeper subscription closed; resubscribing after backoff, then verifying', err);
    this.resyncing = true;
    this.stats.lastError = `subscription closed: ${(err as Error | undefined)?.message ?? 'ended'}`;
    this.duties.resubscribeSoon();
  }

  closeSubscription(): void {
    const s = this.stream;
    this.stream = null;
    endSubscription(s);
  }

  /**
   * Walks the table in chunks, applying rows no event has touched; publishes while loading. On a key
   * that does not decode it reads the rest from the top down; if that also stops short the load ends
   * partial (`exact: false`).
   */
  async load(now: () => number): Promise<void> {
    const started = now();
    this.phase = 'loading';
    this.loadComplete = false;
    this.partial = false;
    this.touched = new Set();
    const tally = { rows: 0, orphaned: 0 };
    // Sized once for the rows this node will hold: a regrowth mid-load rehashes them all at once.
    const share = this.deps.ownedShare?.() ?? (this.deps.owns === undefined ? 1 : 0);
    if (share > 0) this.core.reserve(Math.ceil(rowEstimate(this.deps) * Math.min(1, share * RESERVE_SLACK)));
    const forward: WalkCursor = {};
    let forwardFailed: unknown = null;
    try {
      await loadWalk(this.loadHost(), { reverse: false, publish: true }, forward, tally, now);
    } catch (e) {
      forwardFailed = e;
    }
    if (forwardFailed) {
      this.deps.log.error(
        `keeper load stopped at an unreadable row after ${tally.rows} rows; reading the rest from the top down`,
        forwardFailed,
      );
      try {
        await loadWalk(this.loadHost(), { reverse: true, end: forward.last, publish: false }, {}, tally, now);
      } catch (e) {
        this.partial = true;
        this.stats.lastError = `partial load: ${(e as Error)?.message ?? String(e)}`;
        this.deps.log.error(
          `keeper load is partial: the top-down walk also stopped short; live on ${this.core.size} rows with exact=false`,
          e,
        );
      }
    }
    this.touched = null;
    this.stats.loadMs = now() - started;
    this.stats.loadRows = tally.rows;
    this.stats.orphaned = { rows: tally.orphaned, countedAt: started };
    this.deps.metric?.('keeper_load_ms', this.stats.loadMs);
    this.loadComplete = true;
    this.serving = true;
    this.phase = 'live';
    this.deps.metric?.('keeper_live', 1);
    this.publishOnce(now(), true);
  }

  /** What a load walk reads and calls of the keeper. */
  private loadHost(): LoadHost {
    return {
      core: this.core,
      source: this.deps.source,
      touched: this.touched,
      owns: (key) => this.owns(key),
      orphan: (key) => this.orphan(key),
      unreadable: (key, now) => this.unreadableUnheld(key, now),
      yieldLoop: this.yieldLoop,
      chunkRead: (t, publish) => {
        this.serving = true;
        // Serve from the first chunk on, then publish at the publish interval: a publish per chunk was
        // ~45 % of a 1M-row load's CPU (bench/keeper-load-profile.ts), for sets claims mostly never saw.
        if (publish && t - (this.stats.lastPublish?.at ?? -Infinity) >= this.deps.publishInterval())
          this.publishOnce(t, false);
      },
    };
  }

  /**
   * A publish now (`force`), or the periodic refresh's: publish when anything the set depends on
   * changed (or 10 s passed), else write the heartbeat only. True when a set was published.
   */
  publishOnce(now: number, force: boolean): boolean {
    return this.publisher.publishOnce(now, force);
  }

  /** Writes the minute publish at `at` ahead of its boundary (services/keeper/publisher.ts). */
  stageMinutePublish(now: number, at: number): boolean {
    return this.publisher.stageMinutePublish(now, at);
  }

  /** Lets a staged minute publish go; a no-op when none is staged. */
  dropStage(): void {
    this.publisher.dropStage();
  }

  /** Point-reads the head of the published set and repairs what the keeper holds wrongly (headCheck.ts). */
  headCheck(now: number, keys: string[]): number {
    return this.headChecker.check(now, keys);
  }

  /**
   * The verification walk: add missing rows, fix mismatched ones, drop rows no longer owned, then
   * point-check held keys for rows deleted without an event. A walk asked for while one runs is queued.
   */
  verify(now: () => number): Promise<VerifyResult | null> {
    return this.verifier.verify(now);
  }

  /**
   * The cluster membership changed (docs/clusters.md): drop the rows this node no longer owns, in slices
   * that yield, and publish without them; then `applied` (with the time), then walk the table for the rows
   * it gained. `owns` must already answer with the new membership. The view that gives those rows away
   * must not be published before `applied`: until then they are still claimable here.
   */
  membershipChanged(
    now: () => number,
    applied?: (at: number) => void,
  ): Promise<{ dropped: number; gained: number }> {
    this.dropStage();
    // The published set may list the dropped rows: a new one goes out at once, so claims stop granting
    // them now and not a publish later (the view that gives them away is published a settle after
    // `applied`, util/cluster/membership.ts, which covers claims under way).
    return this.verifier.membershipChanged(
      now,
      (dropped) => {
        if (dropped > 0 && this.serving) {
          this.publisher.activeSetStale = true;
          this.publishOnce(now(), true);
          if (this.publisher.activeSetStale)
            this.deps.log.warn(
              `keeper: the ready set is held by another writer, so the rows given away (${dropped}) could not be ` +
                'taken out of it; claims answer unready until a publish goes through',
            );
        }
        applied?.(now());
      },
      { sliced: true },
    );
  }

  /**
   * The walk once a membership change has settled (services/keeper/verification.ts): takes up owned rows
   * that no keeper holds, counted as recovered. Null when it was merged into a walk already running.
   */
  settledWalk(now: () => number): Promise<VerifyResult | null> {
    return this.verifier.settledWalk(now);
  }

  /** Whether the keeper can vouch for its numbers right now. */
  exact(): boolean {
    return (
      this.phase === 'live' &&
      !this.resyncing &&
      !this.partial &&
      (this.stats.lastVerify?.repaired ?? 0) === 0
    );
  }

  /** Computes the queue-state document (stateDocument.ts) and writes it to shared memory. */
  writeState(now: number): boolean {
    return this.deps.state.write(
      keeperStateDocument(this, {
        now,
        inFlight: this.deps.inFlight(now),
        node: this.deps.nodeView(),
        stateInterval: this.deps.stateInterval(),
      }),
      now,
    );
  }
}
