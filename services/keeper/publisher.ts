// The keeper's publish on worker 0 (docs/architecture.md, "The publish"): it carries out what
// util/keeper/publishPlan.ts decides. A publish walks the held rows' best (util/keeper/selection.ts)
// straight into the ready set's inactive slot and flips it active; a stage writes the minute publish into
// that slot ahead of its boundary, and the boundary only flips it.
import { planPublish, type PublishPlan, type PublishState } from '../../util/keeper/publishPlan.js';
import type { KeeperCore, PublishWalk, TopSkip } from '../../util/keeper/core.js';
import {
  flagBits,
  type PublishResult,
  type ReadyWriter,
  type StagedSlot,
} from '../../util/sharedMemory/readySet.js';
import type { KeeperPhase } from '../../util/sharedMemory/keeperSignal.js';
import { minuteOf } from '../../util/time.js';
import type { KeeperDeps, KeeperStats } from './deps.js';
import { HEAD_CHECK_ROWS } from './headCheck.js';

/**
 * The minute publish, written ahead of its boundary into the ready set's inactive slot and flipped active
 * at the boundary. Let go (the slot released unpublished) by an early publish before the boundary, a
 * change to a row due by then, a head row leased meanwhile, a flip more than STAGE_USE_MS late, a
 * reclassify, a membership change, withdraw(), stop() and a lost leadership.
 */
interface StagedPublish {
  /** The instant it was selected for: the minute publish's time. */
  at: number;
  slot: StagedSlot;
  walk: PublishWalk;
  head: string[];
  /** What its walk and write took (ms): the early publishes after the flip are spaced by it. */
  ms: number;
}

/** What the publisher reads of the keeper it publishes for. */
export interface PublishHost {
  readonly core: KeeperCore;
  readonly serving: boolean;
  readonly loadComplete: boolean;
  readonly partial: boolean;
  readonly phase: KeeperPhase;
  readonly stats: KeeperStats;
  headCheck(now: number, keys: string[]): number;
}

const EMPTY_WALK: PublishWalk = {
  complete: true,
  skipped: 0,
  skipEndsAt: Infinity,
  completeQueues: new Set(),
};

/** Whether a row due at `nextRenderTime` is due by `at`: its minute has begun (no finite time: due now). */
export function dueByMinute(nextRenderTime: number, at: number): boolean {
  return !Number.isFinite(nextRenderTime) || minuteOf(nextRenderTime) <= minuteOf(at);
}

export class KeeperPublisher {
  private lastPublishKey = '';
  private lastPublishAt = -Infinity;
  private lastTickAt = -Infinity;
  private lastEarlyAt = -Infinity;
  /** The earliest instant a row the last publish skipped as leased may be free again. */
  private skippedFreeAt = Infinity;
  private staged: StagedPublish | null = null;
  private stageTriedFor = -1;
  private soon = false;
  private timed = false;
  /** The last publish left due, unleased rows out of the set (told to claims through the signal). */
  private leftOut = false;
  /**
   * The active set may still list rows a membership change gave away: their republish met the slot busy
   * (a stalled writer, up to its takeover). Claims are stopped (the signal says not live) until a publish
   * goes through; otherwise they would grant rows the new holder grants after its settle.
   */
  activeSetStale = false;

  constructor(
    private readonly host: PublishHost,
    private readonly deps: KeeperDeps,
    private readonly publishInterval: () => number,
  ) {}

  /** An early publish is wanted (a due-now write, a claim's poke). */
  askSoon(): void {
    this.soon = true;
  }

  /** The periodic refresh ran at `now`. */
  ticked(now: number): void {
    this.lastTickAt = now;
  }

  /** The keeper is live: the timed publishes start, the load's last publish counting as a refresh at `now`. */
  startTimed(now: number): void {
    this.timed = true;
    this.lastTickAt = now;
  }

  /** What to do at `now` (util/keeper/publishPlan.ts). */
  plan(now: number): PublishPlan {
    return planPublish(this.state(now, false), now);
  }

  private state(now: number, asTick: boolean): PublishState {
    const last = this.host.stats.lastPublish;
    return {
      serving: this.host.serving,
      timed: asTick || this.timed,
      loadComplete: this.host.loadComplete,
      interval: this.publishInterval(),
      lastPublishAt: this.lastPublishAt,
      lastEarlyAt: this.lastEarlyAt,
      lastCostMs: last === null ? 0 : last.ms + last.stageMs,
      lastTickAt: asTick ? -Infinity : this.lastTickAt,
      changed:
        this.changeKey(now) !== this.lastPublishKey || now >= this.skippedFreeAt || this.activeSetStale,
      soon: asTick ? false : this.soon,
      stagedAt: this.staged?.at ?? null,
      stageTriedFor: this.stageTriedFor,
    };
  }

  /** What a publish depends on: held version, minute, lease occupancy, consumption of the set. */
  private changeKey(now: number): string {
    return `${this.host.core.version}|${minuteOf(now)}|${this.deps.inFlight(now)}|${this.deps.ready.cursorPosition()}`;
  }

  /**
   * A publish now (`force`: walk and write, or flip a stage whose instant has come), or the periodic
   * refresh's (publish when the plan says the set is stale, else the heartbeat only). Always writes the
   * heartbeat. True when a set was published.
   */
  publishOnce(now: number, force: boolean): boolean {
    const core = this.host.core;
    core.tick(now);
    const summary = core.dueSummary(now);
    // Only a complete load is a baseline: a queue first seen in a later chunk is not a new edge.
    if (this.host.serving && this.host.loadComplete) this.deps.onDue?.(summary, now);
    const p = planPublish(this.state(now, true), now);
    const flipDue = p.action === 'flip';
    if (!force && p.action !== 'publish' && !flipDue) {
      this.writeSignal(now, summary.due);
      return false;
    }
    if (p.dropStage || (this.staged !== null && !flipDue)) this.dropStage();
    const t0 = performance.now();
    const staged = flipDue ? this.takeStaged() : null;
    let head: string[] = [];
    let top: PublishWalk = EMPTY_WALK;
    // Claims went on granting from the old set in the lead: a staged head they leased would make the
    // boundary's first claims come back empty, so such a stage gives way to a fresh walk.
    if (staged !== null && staged.head.some((k) => this.deps.isLeased(k, now))) staged.slot.abandon();
    const flip = staged?.slot.flip(now);
    const flipped = flip !== undefined && !flip.busy;
    let r: PublishResult;
    if (flipped) {
      r = flip;
      top = staged!.walk;
      head = staged!.head;
    } else {
      r = this.deps.ready.publishWith(now, (w) => {
        top = this.walkInto(w, now, head);
        return top.completeQueues;
      });
    }
    const ms = performance.now() - t0;
    if (!r.busy) this.activeSetStale = false;
    // Taken after the write: the publish resets the cursor, which must not read as a change next tick.
    this.lastPublishKey = this.changeKey(now);
    this.lastPublishAt = now;
    if (this.soon) this.lastEarlyAt = now;
    this.soon = false;
    this.skippedFreeAt = top.skipEndsAt;
    this.leftOut = !top.complete;
    this.host.stats.lastPublish = {
      at: now,
      ms,
      published: r.published,
      skippedLeased: top.skipped,
      complete: top.complete,
      staged: flipped,
      stageMs: flipped ? staged!.ms : 0,
    };
    this.deps.metric?.('keeper_publish_ms', ms);
    this.writeSignal(now, summary.due);
    this.host.headCheck(now, head);
    return true;
  }

  /** Writes the keeper signal: serving, phase, due count, and whether the set left due rows out. */
  writeSignal(now: number, due: number): void {
    const h = this.host;
    this.deps.signal.write(
      {
        live: this.servingClaims(),
        phase: h.phase,
        dueCount: due,
        complete: h.loadComplete && !h.partial,
        leftOut: this.leftOut,
      },
      now,
    );
  }

  /** Whether claims may take from the active set: serving, and no given-away row left in it. */
  private servingClaims(): boolean {
    return this.host.serving && !this.activeSetStale;
  }

  /** The rows a publish takes: at most the set's own capacity (fixed at first allocation). */
  private publishCapacity(): number {
    return Math.min(this.deps.config().queue.ready.capacity, this.deps.ready.capacity);
  }

  /**
   * The global top, then extra rows for the queues it under-represents (their ready-set sections),
   * walked straight into the ready set's slot: no entry objects. The first keys go to `head`.
   */
  private walkInto(w: ReadyWriter, now: number, head: string[], countFlow = true): PublishWalk {
    const core = this.host.core;
    // Keys go from the held rows' bytes into the set's: only the head checked after the publish is read
    // as strings.
    const keys = core.keyBytes;
    return core.selection.publishWalk(
      this.publishCapacity(),
      this.deps.ready.extraCapacity,
      now,
      {
        top: (slot, score, dueMs, held) => {
          if (head.length < HEAD_CHECK_ROWS) head.push(core.keyAt(slot));
          w.topFrom(
            keys,
            slot,
            score,
            dueMs,
            flagBits(held.fromSitemap, held.verified, held.mark),
            held.route,
          );
        },
        extra: (slot, score, dueMs, held) =>
          w.extraFrom(
            keys,
            slot,
            score,
            dueMs,
            flagBits(held.fromSitemap, held.verified, held.mark),
            held.route,
          ),
      },
      this.leaseSkip(now),
      countFlow,
    );
  }

  /** The publish's lease skip at `now`: the stored lease hash when the table is wired, else the key. */
  private leaseSkip(now: number): TopSkip {
    const leasedUntil = this.deps.leasedUntilHash;
    const core = this.host.core;
    return leasedUntil
      ? (_slot, hi, lo) => leasedUntil(hi, lo, now)
      : (slot) => this.deps.isLeased(core.keyAt(slot), now);
  }

  /**
   * Writes now, into the ready set's inactive slot, what the minute publish at `at` (just after the next
   * boundary) would write, when rows come due at that boundary; that publish then only flips the slot
   * active, so the due instant's first grant waits for no walk and no write. Nothing is staged while
   * loading, when `at` is not the next minute, when no row comes due, or when the slot is busy. The walk
   * reads the due counts at `at` without counting a minute's flow (rows are counted as come due when the
   * clock gets there). True when staged.
   */
  stageMinutePublish(now: number, at: number): boolean {
    this.dropStage();
    this.stageTriedFor = (minuteOf(now) + 1) * 60_000;
    const core = this.host.core;
    if (!this.host.serving || !this.host.loadComplete || minuteOf(at) !== minuteOf(now) + 1) return false;
    if (core.rowsComingDue(now, at) === 0) return false;
    const t0 = performance.now();
    const head: string[] = [];
    let walk: PublishWalk = EMPTY_WALK;
    const slot = this.deps.ready.stageWith(at, (w) => {
      walk = this.walkInto(w, at, head, false);
      return walk.completeQueues;
    });
    // The walk's section extras moved the due cursor to `at` (without counting flow): back to the present,
    // or the clock's own arrival at `at` would find the cursor there already and count nothing.
    core.tick(now);
    if (slot === null) return false;
    this.staged = { at, slot, walk, head, ms: performance.now() - t0 };
    return true;
  }

  /** Lets a staged minute publish go (its slot released unpublished); a no-op when none is staged. */
  dropStage(): void {
    this.staged?.slot.abandon();
    this.staged = null;
  }

  /** A held row changed: a stage it would be in (due by the staged instant) walks afresh at the boundary. */
  rowChanged(nextRenderTime: number): void {
    if (this.staged !== null && dueByMinute(nextRenderTime, this.staged.at)) this.dropStage();
  }

  /** The stage, taken for its flip when the plan says its instant has come (a late one is let go). */
  private takeStaged(): StagedPublish | null {
    const s = this.staged;
    this.staged = null;
    return s;
  }
}
