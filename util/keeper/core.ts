// The keeper's in-memory structure (docs/architecture.md): every row this node owns, grouped into classes and
// bucketed by due minute, so the best K due rows come from a heap merge over class heads. Pure: no
// Harper import, the clock is an argument. The lifecycle that feeds it lives in the keeper service.
//
// This file applies row events (upsert, delete, reclassify, drop on an ownership move) to the held-row
// index and answers per-key questions; the publish walk (top K and section extras) is in
// util/keeper/selection.ts and the due counts and oldest-due reads in util/keeper/dueReads.ts, both
// over the same rows and classes.
import { HeldRows } from './heldRows.js';
import type { KeyWalk } from './keyWalks.js';
import type { Bucket, KeeperClass } from './keeperClass.js';
import { KeeperClasses, MARK_INDEX } from './classSet.js';
import { DueReads } from './dueReads.js';
import { FlowLedger } from './flow.js';
import { TopSelection } from './selection.js';
import type { QueueStateCounts } from './stateCounts.js';
import type {
  Classify,
  DueRow,
  KeyBytes,
  DueSummary,
  HeldDescription,
  HeldFields,
  HeldValue,
  KeeperOptions,
} from './types.js';
import { markOf, type ScoreOptions, scoreAt } from './score.js';
import { MINUTE_MS, minuteOf } from '../time.js';

export type * from './types.js';
export type { Mark, ScoreOptions } from './score.js';
export type { KeyWalk } from './keyWalks.js';

// Gaining a stronger mark is a trigger; urgent outranks changed as it does in the score.
const MARK_RANK = MARK_INDEX;

/** A row's own interval as the classifier sees it: anything but a finite number means "none". */
function ownInterval(value: number | null): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

export class KeeperCore {
  private readonly rows: HeldRows<Bucket>;
  private readonly classes = new KeeperClasses();
  private readonly flow = new FlowLedger();
  private classifier: Classify;
  private scoreOptions: ScoreOptions;
  private changes = 0;
  /**
   * What one publish writes (`selection.publishWalk`): the best due rows by score, best first, then the
   * section extras (util/keeper/selection.ts). Callers walk it directly.
   */
  readonly selection: TopSelection;
  private readonly reads: DueReads;

  constructor(options: KeeperOptions) {
    this.classifier = options.classify;
    this.scoreOptions = options.score;
    this.rows = new HeldRows<Bucket>(options.hashSeed);
    this.selection = new TopSelection(this.rows, this.classes, this.flow, (cls, minute, now) =>
      this.bucketScore(cls, minute, now),
    );
    this.reads = new DueReads(this.rows, this.classes, this.flow);
  }

  /** Bumped by every change to what is held (and by reclassify), so publish can skip idle rounds. */
  get version(): number {
    return this.changes;
  }

  /** Rows refused because their key does not survive UTF-8 (see apply); never held. */
  unclaimable = 0;
  lastUnclaimable: string | null = null;

  get size(): number {
    return this.rows.size;
  }

  get classCount(): number {
    return this.classes.list.length;
  }

  /**
   * Every held key in slices, for a walk that yields between them (no whole-set copy: at 10M rows one
   * costs seconds of the event loop). The caller may apply and delete meanwhile; see KeyWalk.
   */
  keyWalk(): KeyWalk {
    return this.rows.keyWalk();
  }

  /** Room for about `rows` held rows in all (a load's estimate), so the load does not regrow the table. */
  reserve(rows: number): void {
    this.rows.reserve(rows);
  }

  /**
   * The key of the row at `slot`, as a publish walk hands rows over (valid while the keeper is unchanged):
   * a new string each call, since rows hold their keys as bytes.
   */
  keyAt(slot: number): string {
    return this.rows.keyAt(slot);
  }

  /** The held keys' UTF-8 bytes by slot, for a writer that copies a walked row's key without a string. */
  get keyBytes(): KeyBytes {
    return this.rows;
  }

  has(key: string): boolean {
    return this.rows.locate(key, this.rows.hash(key)) >= 0;
  }

  /** A new verification walk's sightings begin: no held row counts as seen until `sight` marks it. */
  startSighting(): void {
    this.rows.startSighting();
  }

  /** Marks `key` as seen in the table by the current verification walk; false when it is not held. */
  sight(key: string): boolean {
    const index = this.rows.locate(key, this.rows.hash(key));
    if (index < 0) return false;
    this.rows.sight(index);
    return true;
  }

  /** Whether `key` is held and the current verification walk has not seen it in the table. */
  unseen(key: string): boolean {
    const index = this.rows.locate(key, this.rows.hash(key));
    return index >= 0 && !this.rows.sighted(index);
  }

  /**
   * Upserts (row) or deletes (null) one row; idempotent. Returns whether anything held changed.
   * A row without a finite nextRenderTime is held as due in the minute of `now`: it is then claimed
   * with its lateness climbing from 0 rather than silently never coming due. `row` is read during the
   * call only (a load walk hands one reused object for every row).
   */
  apply(key: string, row: HeldFields | null, now: number): boolean {
    if (row !== null && !roundTrips(key)) {
      // Claims read keys back from the ready set's UTF-8 bytes, where a lone surrogate became U+FFFD:
      // such a row can never be read, leased or granted, and held it would top every set forever.
      this.unclaimable++;
      this.lastUnclaimable = key;
      row = null;
    }
    const nowMinute = minuteOf(now);
    const hash = this.rows.hash(key);
    const index = this.rows.locate(key, hash);
    if (row === null) {
      if (index < 0) return false;
      const from = this.rows.bucketOf(this.rows.slotAt(index));
      this.rows.delete(index);
      this.classes.removed(from);
      this.changes++;
      this.flow.count(nowMinute, 'removed');
      return true;
    }
    if (this.classes.dueCursor === null) this.classes.syncDue(now, this.flow);
    const minute = Number.isFinite(row.nextRenderTime) ? minuteOf(row.nextRenderTime) : nowMinute;
    if (!Number.isFinite(minute)) throw new RangeError(`keeper: no finite due minute for ${key}`);
    const own = ownInterval(row.effectiveInterval);
    const { route, cadenceMs } = this.classifier(key, own);
    const mark = markOf(row.urgentAt, row.changedAt);
    const target = this.classes.classFor(
      route,
      own,
      cadenceMs,
      row.fromSitemap === true,
      row.verified === true,
      mark,
      row.state ?? 'active',
    );
    if (index >= 0) {
      const from = this.rows.bucketOf(this.rows.slotAt(index));
      if (from.owner === target && from.minute === minute) {
        // Nothing held moves, but the stored row changed (a result, say): its park no longer holds.
        this.rows.touch(index);
        return false;
      }
      this.countMove(from, target, minute, nowMinute);
      const to = target.bucketFor(minute);
      // The row keeps the key bytes it was first stored with; the caller's string is not retained.
      this.rows.move(index, to);
      this.classes.added(to);
      this.classes.removed(from);
    } else {
      const to = target.bucketFor(minute);
      this.rows.insert(index, to, key, hash);
      this.classes.added(to);
      this.flow.count(nowMinute, 'added');
    }
    this.changes++;
    return true;
  }

  /** Held rows whose due minute is after `now`'s and no later than `at`'s (what comes due by then). */
  rowsComingDue(now: number, at: number): number {
    const from = minuteOf(now);
    const through = minuteOf(at);
    if (!(through > from)) return 0;
    let n = 0;
    for (const cls of this.classes.list) n += cls.rowsBetween(from, through);
    return n;
  }

  /** Due counts per queue and each queue's oldest due verified row; walks class heads, not rows. */
  dueSummary(now: number): DueSummary {
    return this.reads.dueSummary(now);
  }

  /** The earliest-due row of `queue` that is due at `now`, optionally verified only and not skipped. */
  oldestDue(
    queue: string,
    now: number,
    options: { verifiedOnly?: boolean; skip?: (key: string) => boolean } = {},
  ): DueRow | null {
    return this.reads.oldestDue(queue, now, options);
  }

  /** The counting parts of the queue-state document (docs/monitoring.md). Also advances the cameDue count. */
  state(now: number): QueueStateCounts {
    return this.reads.state(now);
  }

  /** Closes the flow minute: counts rows whose due minute passed since the last call. Returns that count. */
  tick(now: number): number {
    return this.reads.tick(now);
  }

  describe(key: string, now: number): HeldDescription | null {
    const bucket = this.bucketOfKey(key);
    if (bucket === null) return null;
    const cls = bucket.owner;
    const dueMs = bucket.minute * MINUTE_MS;
    return {
      route: cls.route,
      cadenceMs: cls.cadenceMs,
      fromSitemap: cls.fromSitemap,
      verified: cls.verified,
      mark: cls.mark,
      dueMs,
      score: this.bucketScore(cls, bucket.minute, now),
      due: dueMs <= now,
    };
  }

  heldValue(key: string): HeldValue | null {
    const bucket = this.bucketOfKey(key);
    if (bucket === null) return null;
    const cls = bucket.owner;
    return {
      nextRenderTime: bucket.minute * MINUTE_MS,
      route: cls.route,
      cadenceMs: cls.cadenceMs,
      effectiveInterval: cls.effectiveInterval,
      fromSitemap: cls.fromSitemap,
      verified: cls.verified,
      mark: cls.mark,
    };
  }

  /**
   * Whether the held entry equals what `apply(key, row)` would store (null: whether nothing is held).
   * A row without a finite due time matches any held minute, since apply places it by its own clock.
   */
  matches(key: string, row: HeldFields | null): boolean {
    const bucket = this.bucketOfKey(key);
    if (row === null || bucket === null) return row === null && bucket === null;
    const cls = bucket.owner;
    const own = ownInterval(row.effectiveInterval);
    const { route, cadenceMs } = this.classifier(key, own);
    return (
      (!Number.isFinite(row.nextRenderTime) || minuteOf(row.nextRenderTime) === bucket.minute) &&
      cls.route === route &&
      Object.is(cls.cadenceMs, cadenceMs) &&
      Object.is(cls.effectiveInterval, own) &&
      cls.fromSitemap === (row.fromSitemap === true) &&
      cls.verified === (row.verified === true) &&
      cls.mark === markOf(row.urgentAt, row.changedAt) &&
      cls.state === (row.state ?? 'active')
    );
  }

  /**
   * Re-asks the classifier for every held row (routes or the default cadence changed) and adopts new
   * score options. Keeps every row and its minute; rows may change class. Always bumps the version:
   * scores may have moved even when no row did.
   */
  reclassify(classify: Classify, scoreOptions: ScoreOptions): void {
    this.classifier = classify;
    this.scoreOptions = scoreOptions;
    for (const cls of this.classes.takeAll()) {
      for (const bucket of cls.order) {
        // Draining from the newest row: a moved row's place is never refilled from behind the walk.
        while (bucket.count > 0) {
          const slot = HeldRows.lastSlot(bucket);
          const { route, cadenceMs } = classify(this.rows.keyAt(slot), cls.effectiveInterval);
          const target = this.classes.classFor(
            route,
            cls.effectiveInterval,
            cadenceMs,
            cls.fromSitemap,
            cls.verified,
            cls.mark,
            cls.state,
          );
          const to = target.bucketFor(bucket.minute);
          this.rows.moveSlot(slot, to);
          this.classes.added(to);
        }
      }
    }
    this.changes++;
  }

  /** Drops every held row whose key `shouldDrop` names (ownership moved). Not counted as flow. */
  dropWhere(shouldDrop: (key: string) => boolean): number {
    const doomed: string[] = [];
    for (const cls of this.classes.list) {
      for (const bucket of cls.order) {
        this.rows.eachKey(bucket, (key) => {
          if (shouldDrop(key)) doomed.push(key);
          return true;
        });
      }
    }
    for (const key of doomed) {
      const index = this.rows.locate(key, this.rows.hash(key));
      const from = this.rows.bucketOf(this.rows.slotAt(index));
      this.rows.delete(index);
      this.classes.removed(from);
    }
    if (doomed.length > 0) this.changes++;
    return doomed.length;
  }

  private bucketOfKey(key: string): Bucket | null {
    const index = this.rows.locate(key, this.rows.hash(key));
    return index < 0 ? null : this.rows.bucketOf(this.rows.slotAt(index));
  }

  private bucketScore(cls: KeeperClass, minute: number, now: number): number {
    return scoreAt(minute * MINUTE_MS, cls.cadenceMs, cls.fromSitemap, cls.mark, now, this.scoreOptions);
  }

  private countMove(from: Bucket, to: KeeperClass, minute: number, nowMinute: number): void {
    const cameDueNow = from.minute > nowMinute && minute <= nowMinute;
    if (MARK_RANK[to.mark] > MARK_RANK[from.owner.mark] || cameDueNow) {
      this.flow.count(nowMinute, 'triggered');
    } else if (minute > from.minute) {
      this.flow.count(nowMinute, 'rescheduled');
    }
  }
}

/** Does `key` come back unchanged from UTF-8 (no lone surrogate)? Only such keys can be claimed. */
function roundTrips(key: string): boolean {
  return (key as unknown as { isWellFormed(): boolean }).isWellFormed();
}
