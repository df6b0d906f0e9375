// What the keeper service is given and what it reports (services/keeper/service.ts is the lifecycle).
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { Counts, DutyScheduler } from '../../util/duties/scheduler.js';
import type { DueSummary, HeldFields, KeeperCore } from '../../util/keeper/core.js';
import type { KeeperSignal } from '../../util/sharedMemory/keeperSignal.js';
import type { ReadySet } from '../../util/sharedMemory/readySet.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import type { StateDoc } from '../../util/sharedMemory/stateDoc.js';
import type { RepairRound } from '../../util/cluster/repair.js';

export interface ScheduleEvent {
  id: unknown;
  type: string;
  value?: Record<string, unknown>;
}

export interface EventStream extends AsyncIterable<ScheduleEvent> {
  end?: () => void;
  return?: () => unknown;
}

export interface WalkRange {
  start?: string;
  end?: string;
  reverse?: boolean;
  limit?: number;
  exclusiveStart?: boolean;
}

export interface ScheduleSource {
  subscribe(): Promise<EventStream>;
  walk(opts: WalkRange): Iterable<{
    key: string;
    row: ScheduleRow | undefined;
  }>;
  /**
   * The load's walk: `walk`'s keys in its order, each handed to `visit` with the held fields of its
   * row (undefined where `walk` yields no row), possibly in one object reused for every key. Without
   * it the load reads `walk`.
   */
  walkHeld?(opts: WalkRange, visit: (key: string, fields: HeldFields | undefined) => void): void;
  read(key: string): ScheduleRow | undefined;
  /**
   * Whether the store holds a live value under `key` (bytes that are no deletion's marker), whether or not
   * it decodes. A read that finds no row where this is true met a value it could not decode, not a
   * deleted row.
   */
  present?(key: string): boolean;
  /** Roughly how many rows the table holds (a hint the load sizes its held-row table by), 0 if unknown. */
  estimateRows?(): number;
  /** Start a fresh read snapshot so point reads see the latest commits. */
  refreshReads?(): void;
}

export interface KeeperLog {
  info(...a: unknown[]): void;
  warn(...a: unknown[]): void;
  error(...a: unknown[]): void;
}

export interface KeeperDeps {
  source: ScheduleSource;
  ready: ReadySet;
  signal: KeeperSignal;
  state: StateDoc<unknown>;
  config: () => QueueKeeperConfig;
  /** `queue.keeper.publishInterval`: the publish tick, the load's publish spacing, the early publishes' cap. */
  publishInterval: () => number;
  /** `queue.keeper.stateInterval`: the state document's tick. */
  stateInterval: () => number;
  isLeased: (key: string, now: number) => boolean;
  /**
   * isLeased by the row's stored keyHash (publish uses it: no re-hash of each candidate), answering the
   * instant (ms) the block it found ends, or 0 when the key is free: publish parks a leased row until
   * then (or 30 s) instead of asking the lease table again every publish.
   */
  leasedUntilHash?: (hi: number, lo: number, now: number) => number;
  /** Live leases right now (a reconciled scan). */
  inFlight: (now: number) => number;
  /** Pause and status as the node reports them, for the state document. */
  nodeView: () => { paused: boolean; status: string };
  owns?: (key: string) => boolean;
  /**
   * The share of the table's rows this node holds (1 alone, about 1/n among n nodes), to size the held
   * rows before a load. Without it a node with `owns` grows its table as the load goes.
   */
  ownedShare?: () => number;
  log: KeeperLog;
  metric?: (
    name: 'keeper_load_ms' | 'keeper_publish_ms' | 'keeper_verify_ms' | 'keeper_live',
    value: number,
  ) => void;
  countRepaired?: (n: number) => void;
  countRecovered?: RowCheckDeps['countRecovered'];
  /** Called on every publish tick with the per-queue due summary (the notify `created` edge reads it). */
  onDue?: (summary: DueSummary, now: number) => void;
  /** Yield to the event loop between chunks (tests pass a no-op). */
  yieldLoop?: () => Promise<void>;
  /** Real time in ms for slice budgets (default performance.now); tests hand in a fake. */
  sliceClock?: () => number;
  /** Runs the keeper's duties (publish, minute and early publish, state, verify, resubscribe, load). */
  scheduler: DutyScheduler;
  /** The clock (Date.now by default). */
  clock?: () => number;
  /** Follows config changes (a `reclassify` key re-sorts the held rows); stop() unsubscribes. */
  onConfigChange?: (
    l: (next: QueueKeeperConfig, prev: QueueKeeperConfig, changed: string[]) => void,
  ) => () => void;
  /** Each publish tick first: false when this keeper no longer holds the leader slot. */
  holdLeadership?: (now: number) => boolean;
  /** Each publish tick after the publish (the requeued pass, the status sync). */
  afterPublish?: (now: number) => Promise<Counts> | Counts;
  /** Before each state document (the lease gauge is reconciled there, in slices: awaited). */
  beforeState?: (now: number) => Promise<void> | void;
}

/** Rows per chunk of a table walk (load and verification); the walk yields to the event loop between. */
export const WALK_CHUNK = 1000;
/**
 * The verification walk also ends a slice once it has run this long (ms), so a slice of slow reads (cold
 * pages of a large table) does not hold worker 0 for the whole chunk.
 */
export const SLICE_BUDGET_MS = 10;
/** A clustered node's share of the rows is about 1/n: the load reserves a tenth more (KeeperDeps.ownedShare). */
export const RESERVE_SLACK = 1.1;

export interface KeeperStats {
  loadMs: number | null;
  loadRows: number;
  lastPublish: {
    at: number;
    ms: number;
    published: number;
    skippedLeased: number;
    complete: boolean;
    /** It flipped a set staged before its minute boundary (no walk at the instant). */
    staged: boolean;
    /** The staged walk and write that flipped set took before the boundary (ms); 0 for a walk. */
    stageMs: number;
  } | null;
  headCheck: { at: number; checked: number; repaired: number } | null;
  lastVerify: {
    at: number;
    ms: number;
    missing: number;
    mismatched: number;
    phantom: number;
    unowned: number;
    /**
     * Every row the walk saw in this node's table, held or not: the same on every node of a cluster once
     * writes are quiet, so a node short of rows (a write Harper's join copy skipped) shows here.
     */
    rows: number;
    /** Rows picked up because the cluster membership changed (not repairs). */
    gained: number;
    /** Rows the walk once the membership settled took up: owned, held by no keeper (expected 0). */
    recovered: number;
    /** What the walk ran for (services/keeper/verification.ts WalkPurpose). */
    purpose: 'verification' | 'membership' | 'settled';
    repaired: number;
    /** The longest the walk held the event loop between two yields (ms). */
    longestSliceMs: number;
  } | null;
  repairedTotal: number;
  /**
   * Reads since the keeper started that found a stored row whose value did not decode; the keeper kept
   * what it held of those rows instead of dropping them (expected 0).
   */
  unreadableTotal: number;
  /**
   * Rows of a device no longer in render.deviceTypes, of URLs this node owns, as the last load or walk
   * counted them (docs/feeding.md "Devices"): never claimed, until DELETE /prerender_admin/devices/{name}.
   */
  orphaned: { rows: number; countedAt: number } | null;
  /**
   * The last walk once a membership change settled (docs/clusters.md): rows it saw, and rows this node
   * owned that no keeper held, which it took up (expected 0).
   */
  lastSettledWalk?: { at: number; ms: number; rows: number; recovered: number } | null;
  /** Owned rows no keeper held, taken up by a settled walk since the keeper started. */
  recoveredTotal: number;
  /** Replica repair's last round on this node (clustered only; util/cluster/repair.ts). */
  lastRepair?: RepairRound | null;
  lastError: string | null;
  /** Time spent applying subscription events (decode + classify + move), for the per-write cost. */
  apply: { events: number; ms: number };
}

/** The held rows and what they are checked against: what the verification walk and head check need. */
export interface RowCheckDeps {
  /** Reads (has, matches, keys) and the verification walk's sightings; every change goes through `repair`. */
  core: KeeperCore;
  /**
   * Applies a repaired row (null: hold nothing) through the keeper's one apply path, which also lets a
   * staged minute publish go when the row is due by its instant (the stage's selection lacks it).
   */
  repair: (key: string, row: ScheduleRow | null, now: number) => void;
  source: ScheduleSource;
  /**
   * A read of `key` found no row: true when the store still holds a live value there (it did not decode),
   * so what the keeper holds of the key stays as it is; counted and logged.
   */
  unreadable: (key: string, now: number) => boolean;
  /**
   * A walk met `key` stored but unreadable and holds nothing of it: the keeper reads it again later
   * (KeeperService.retryUnreadable) and takes it up once it reads.
   */
  unreadableUnheld: (key: string, now: number) => void;
  owns: (key: string) => boolean;
  /** A row of a URL this node owns whose device is not configured (render.deviceTypes): orphaned. */
  orphan?: (key: string) => boolean;
  stats: KeeperStats;
  log: KeeperLog;
  yieldLoop: () => Promise<void>;
  /** Real time in ms (performance.now) for the walk's slice budget; tests hand in their own. */
  sliceClock: () => number;
  metric?: KeeperDeps['metric'];
  countRepaired?: (n: number) => void;
  /** Counts owned rows taken up that no keeper held, by what found them (queue_keeper_rows_recovered_total). */
  countRecovered?: (cause: 'membership' | 'verification', n: number) => void;
}
