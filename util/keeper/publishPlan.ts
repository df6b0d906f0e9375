// When the keeper publishes (docs/architecture.md, "The publish"): one decision over the keeper's state
// and the clock, carried out by services/keeper/service.ts. What the contract asks for:
//   - the periodic refresh, every `queue.keeper.publishInterval`, when anything the set depends on changed
//     (and at least every FORCED_PUBLISH_MS);
//   - a publish at each due instant: rows come due on minute boundaries;
//   - a publish soon after a write made a row due now, or a claim found the set used up or running low
//     while rows were left out of it (the early publish), spaced by what publishes cost;
//   - the minute publish written ahead of its boundary (staged) when rows come due there, so the due
//     instant only flips it active: its walk and write would otherwise stand between the due instant
//     and the first grant.
// Pure: the state is plain values, `now` is passed in; the answer says what to do now and when to look
// again.
import { minuteOf } from '../time.js';

export const MINUTE_MS = 60_000;
/** The due instant's publish runs this long after the boundary, so `now` is surely past it on every clock. */
export const MINUTE_SLACK_MS = 5;
/**
 * How long before a minute boundary the minute publish is staged. The walk and write it takes off the due
 * instant ran 40–100 ms of wall time on a loaded worker 0 (bench/due-burst.ts); the lead leaves room.
 */
export const STAGE_LEAD_MS = 400;
/** A stage is flipped up to this long after its instant; a later publish lets it go and walks afresh. */
export const STAGE_USE_MS = 1000;
/** Early publishes are at least this far apart: a burst of due-now writes costs one publish per 50 ms. */
export const EARLY_MIN_MS = 50;
/**
 * And at least this many times the last publish's own cost apart: a publish skipping 100,000 leased rows
 * took 213 ms, and every 50 ms it would leave worker 0 no time for claims.
 */
export const PUBLISH_COST_SPACING = 4;
/** An unchanged set is still republished this often, so nothing the change key misses lasts longer. */
export const FORCED_PUBLISH_MS = 10_000;

export interface PublishState {
  /** Serving claims (live, and holding the leader slot). */
  serving: boolean;
  /**
   * The timed publishes run (the keeper is live): the refresh, the due instants and the stage. Before
   * that only an early publish is planned; the load publishes as it walks.
   */
  timed: boolean;
  /** The load finished: only then is there a minute publish worth staging. */
  loadComplete: boolean;
  /** `queue.keeper.publishInterval`. */
  interval: number;
  /** The last publish (a flip counts); -Infinity before the first. */
  lastPublishAt: number;
  /** The last publish that answered an early request; -Infinity before the first. */
  lastEarlyAt: number;
  /** What the last publish cost, ms (a flipped stage: its walk before the boundary). */
  lastCostMs: number;
  /** The last periodic refresh; -Infinity before the first. */
  lastTickAt: number;
  /** Something the set depends on changed since the last publish (rows, minute, leases, takes). */
  changed: boolean;
  /** An early publish was asked for and none has run since. */
  soon: boolean;
  /** The instant a staged minute publish was written for, or null when none is staged. */
  stagedAt: number | null;
  /** The boundary a stage was last tried for: one try per boundary, staged or not. */
  stageTriedFor: number;
}

export type PublishAction =
  /** Walk and write a new set (dropping a stage first when `dropStage`). */
  | 'publish'
  /** Make the staged set active (when that cannot be done, publish). */
  | 'flip'
  /** Write the minute publish at `at` into the inactive slot. */
  | 'stage'
  /** Nothing to publish: write the keeper's heartbeat only. */
  | 'heartbeat'
  /** Nothing to do now. */
  | 'wait';

export interface PublishPlan {
  action: PublishAction;
  /** Let the staged set go before acting (it is out of date, or an early publish takes its slot). */
  dropStage: boolean;
  /** This run is the periodic refresh (the service runs its per-interval work with it). */
  tick: boolean;
  /** For 'stage': the minute publish's instant. */
  at: number;
  /** When to look again, absolute ms. */
  next: number;
}

/** The gap an early publish keeps after the last early one. */
export function earlySpacing(s: PublishState): number {
  return Math.max(EARLY_MIN_MS, Math.min(s.lastCostMs * PUBLISH_COST_SPACING, s.interval));
}

/** The next minute publish's instant after `now`'s minute, and when its stage is due. */
function minuteAhead(now: number): { boundary: number; stageAt: number; at: number } {
  const boundary = (minuteOf(now) + 1) * MINUTE_MS;
  return { boundary, stageAt: boundary - STAGE_LEAD_MS, at: boundary + MINUTE_SLACK_MS };
}

/** What to do at `now`. */
export function planPublish(s: PublishState, now: number): PublishPlan {
  const tickAt = s.lastTickAt + s.interval;
  const tick = s.timed && now >= tickAt;
  const nextTick = tick ? now + s.interval : tickAt;
  const plan = (action: PublishAction, next: number, dropStage = false, at = 0): PublishPlan => ({
    action,
    dropStage,
    tick,
    at,
    next,
  });
  if (!s.serving) return plan(tick ? 'heartbeat' : 'wait', nextTick, s.stagedAt !== null);
  const earlyAt = s.lastEarlyAt + earlySpacing(s);
  if (!s.timed) {
    if (s.soon && now >= earlyAt) return plan('publish', Infinity);
    return plan('wait', s.soon ? earlyAt : Infinity);
  }

  const dueInstant = minuteOf(now) * MINUTE_MS + MINUTE_SLACK_MS;
  const ahead = minuteAhead(now);

  // A stage whose instant has come: flip it while it is fresh, else let it go and walk afresh.
  if (s.stagedAt !== null && now >= s.stagedAt) {
    const fresh = minuteOf(now) === minuteOf(s.stagedAt) && now - s.stagedAt < STAGE_USE_MS;
    return fresh ? plan('flip', nextTick) : plan('publish', nextTick, true);
  }
  // No publish since the minute began: rows came due with it (a publish at the boundary itself holds them).
  if (now >= dueInstant && s.lastPublishAt < dueInstant - MINUTE_SLACK_MS)
    return plan('publish', nextTick, s.stagedAt !== null);

  if (s.stagedAt !== null) {
    // Staged ahead of its boundary. An early publish takes the slot now (the boundary then walks
    // afresh); a periodic one waits for the flip, only the heartbeat is written.
    if (s.soon && now >= earlyAt) return plan('publish', nextTick, true);
    const next = Math.min(
      s.stagedAt,
      nextTick,
      now < dueInstant ? dueInstant : Infinity,
      s.soon ? earlyAt : Infinity,
    );
    return plan(tick ? 'heartbeat' : 'wait', next);
  }

  // One try per boundary; not while an early publish waits for its spacing (it would drop the stage).
  const stageDue = s.loadComplete && s.stageTriedFor !== ahead.boundary && !s.soon;
  const next = Math.min(
    nextTick,
    now < dueInstant ? dueInstant : ahead.at,
    stageDue ? ahead.stageAt : Infinity,
    s.soon ? earlyAt : Infinity,
  );
  if (s.soon && now >= earlyAt) return plan('publish', next);
  if (tick && (s.changed || now - s.lastPublishAt >= FORCED_PUBLISH_MS)) return plan('publish', next);
  if (stageDue && now >= ahead.stageAt) return plan('stage', Math.min(nextTick, ahead.at), false, ahead.at);
  return plan(tick ? 'heartbeat' : 'wait', next);
}
