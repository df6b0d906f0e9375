// The keeper's public shapes: what callers hand it and what it hands back. `util/keeper/core.ts` re-exports
// all of them, so callers import from one place.
import type { ScheduleRow as FullScheduleRow } from '../schedule/rules.js';
import type { Mark, ScoreOptions } from './score.js';
import type { RowState } from '../schedule/rowState.js';

/**
 * The fields of a `RenderSchedule` row the keeper places it by, normalised as `toScheduleRow` does.
 * `KeeperCore.apply` and `matches` read them during the call only: a caller may hand one reused object.
 */
export type HeldFields = Pick<
  FullScheduleRow,
  'nextRenderTime' | 'fromSitemap' | 'effectiveInterval' | 'verified' | 'urgentAt' | 'changedAt'
> & {
  /** The row's verdict state (docs/feeding.md); absent reads as active. */
  state?: RowState;
};

/** The scheduling fields of a `RenderSchedule` row: all the keeper needs to place it. */
export type ScheduleRow = HeldFields & Pick<FullScheduleRow, 'cacheKey'>;

export interface Classification {
  /** The queue name: the matching route's name, `unrouted` when none matches. */
  route: string;
  cadenceMs: number;
}

/** Must be a function of its arguments only: the keeper calls it again for every row on reclassify. */
export type Classify = (url: string, effectiveInterval: number | null) => Classification;

export interface KeeperOptions {
  classify: Classify;
  score: ScoreOptions;
  /** Fixes the URL hash seed (tests); random by default. */
  hashSeed?: number;
}

/** What a publish walk reports besides its rows (they went to a `PublishSink`). */
export interface PublishWalk {
  /** True only when every due row that was not skipped is in the top. */
  complete: boolean;
  /** Due rows passed over because `skip` said so (top and extras). */
  skipped: number;
  /** As TopWalk's, over the top and the extras. */
  skipEndsAt: number;
  /** Queues with a row in the selection and no due, unskipped row left out of it. */
  completeQueues: Set<string>;
}

/** Receives a publish's rows as they are selected: the top best first, then each queue's extras. */
export interface PublishSink {
  top: TopVisitor;
  extra: TopVisitor;
}

/** What every row of one keeper class shares. */
export interface HeldClass {
  readonly route: string;
  readonly cadenceMs: number;
  readonly fromSitemap: boolean;
  readonly verified: boolean;
  readonly mark: Mark;
}

/**
 * Receives the best rows in order; for callers that copy them straight out (no entry objects). A row
 * comes as its slot in the held rows, valid while the keeper is unchanged: `KeeperCore.keyAt` reads its
 * key as a string, `KeeperCore.keyBytes` copies its UTF-8 bytes without one.
 */
export type TopVisitor = (slot: number, score: number, dueMs: number, heldClass: HeldClass) => void;

/** The UTF-8 bytes of a held row's key, by slot (util/keeper/heldRows.ts keeps them off the JS heap). */
export interface KeyBytes {
  keyLength(slot: number): number;
  /** Copies the key's keyLength bytes into `into` from index `at`. */
  copyKey(slot: number, into: Uint8Array, at: number): void;
}

export interface TopWalk {
  visited: number;
  complete: boolean;
  skipped: number;
  /**
   * The earliest instant (ms) a row this walk skipped as leased is free again with nothing else changing:
   * its lease, hold or release grace ends within the PARK_MAX_MS it is parked for. Infinity when no
   * skipped row's block ends that soon (a longer one is asked about again when its park runs out).
   */
  skipEndsAt: number;
}

export interface DueRow {
  key: string;
  dueMs: number;
  fromSitemap: boolean;
  verified: boolean;
  mark: Mark;
}

export interface QueueDue {
  due: number;
  dueVerified: number;
  oldestVerifiedDue: DueRow | null;
}

export interface DueSummary {
  due: number;
  dueVerified: number;
  /** Every queue with held rows, due or not. */
  byQueue: Map<string, QueueDue>;
}

export interface HeldDescription {
  route: string;
  cadenceMs: number;
  fromSitemap: boolean;
  verified: boolean;
  mark: Mark;
  dueMs: number;
  score: number;
  due: boolean;
}

/** What the keeper holds for a key, in table terms, for repair logs and `explain`. */
export interface HeldValue {
  /** Minute-floored, as every writer stores it. */
  nextRenderTime: number;
  route: string;
  cadenceMs: number;
  effectiveInterval: number | null;
  fromSitemap: boolean;
  verified: boolean;
  mark: Mark;
}

/**
 * The publish's skip test (leased rows cost no place). It gets the row's rowHash halves as the lease
 * table computes them, stored with the row, so a skip need not hash the URL again. It answers whether
 * to skip the row: `true`, or the instant (ms, after `now`) until which the row is known leased — the
 * walk then parks the row and passes it without asking again until then (util/keeper/heldRows.ts) —
 * or `false` / 0 to take it.
 */
export type TopSkip = (slot: number, leaseHashHi: number, leaseHashLo: number) => boolean | number;
