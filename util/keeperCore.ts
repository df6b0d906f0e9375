// The keeper's in-memory structure (SPEC §2): every row this node owns, grouped into classes and
// bucketed by due minute, so the best K due rows come from a heap merge over class heads. Pure: no
// Harper import, the clock is an argument. The lifecycle that feeds it lives in the keeper service.
import { CHUNK, hashUrl, HeldRows } from './heldRows.js';
import { type Bucket, KeeperClass } from './keeperClass.js';
import { FlowLedger } from './keeperFlow.js';
import { queueState, type QueueStateCounts } from './keeperState.js';
import { floorMinute, type Mark, markOf, MINUTE_MS, score, type ScoreOptions } from './score.js';

/** The scheduling fields of a `RenderSchedule` row: all the keeper needs to place it. */
export interface ScheduleRow {
  cacheKey: string;
  nextRenderTime: number;
  fromSitemap: boolean;
  effectiveInterval: number | null;
  verified: boolean;
  urgentAt: number | null;
  changedAt: number | null;
}

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
}

export interface TopEntry {
  key: string;
  score: number;
  dueMs: number;
  fromSitemap: boolean;
  verified: boolean;
  route: string;
  mark: Mark;
}

export interface TopK {
  /** Best first. Rows of equal score come in no promised order. */
  entries: TopEntry[];
  /** True only when every due row that was not skipped is in `entries`. */
  complete: boolean;
  /** Due rows passed over because `skip` said so (including any met while checking `complete`). */
  skipped: number;
}

/** What every row of one keeper class shares. */
export interface HeldClass {
  readonly route: string;
  readonly cadenceMs: number;
  readonly fromSitemap: boolean;
  readonly verified: boolean;
  readonly mark: Mark;
}

/** Receives the best rows in order; for callers that copy them straight out (no entry objects). */
export type TopVisitor = (key: string, score: number, dueMs: number, heldClass: HeldClass) => void;

export interface TopWalk {
  visited: number;
  complete: boolean;
  skipped: number;
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

const FLAVOURS = 12; // fromSitemap × verified × mark
const MARK_INDEX: Record<Mark, number> = { none: 0, changed: 1, urgent: 2 };
// Gaining a stronger mark is a trigger; urgent outranks changed as it does in the score.
const MARK_RANK = MARK_INDEX;

/** A row's own interval as the classifier sees it: anything but a finite number means "none". */
function ownInterval(value: number | null): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

export class KeeperCore {
  private readonly rows = new HeldRows<Bucket>();
  private classes: KeeperClass[] = [];
  // route → own interval (NaN for none) → cadence → 12 flavours
  private registry = new Map<string, Map<number, Map<number, (KeeperClass | undefined)[]>>>();
  // Minute through which every class's `dueRows` is counted. Moving it forward is what counts cameDue.
  private dueCursor: number | null = null;
  // Highest minute already counted as cameDue, so a clock that steps back and forward counts nothing twice.
  private cameDueThrough: number | null = null;
  private readonly flow = new FlowLedger();
  private classifier: Classify;
  private scoreOptions: ScoreOptions;
  private changes = 0;

  constructor(options: KeeperOptions) {
    this.classifier = options.classify;
    this.scoreOptions = options.score;
  }

  /** Bumped by every change to what is held (and by reclassify), so publish can skip idle rounds. */
  get version(): number {
    return this.changes;
  }

  get size(): number {
    return this.rows.size;
  }

  get classCount(): number {
    return this.classes.length;
  }

  /** Every held key, snapshotted: the caller may apply and delete while iterating. */
  keys(): IterableIterator<string> {
    return this.rows.snapshotKeys().values();
  }

  has(key: string): boolean {
    return this.rows.locate(key, hashUrl(key)) >= 0;
  }

  /**
   * Upserts (row) or deletes (null) one row; idempotent. Returns whether anything held changed.
   * A row without a finite nextRenderTime is held as due in the minute of `now`: it is then claimed
   * with its lateness climbing from 0 rather than silently never coming due.
   */
  apply(key: string, row: ScheduleRow | null, now: number): boolean {
    const nowMinute = floorMinute(now);
    const hash = hashUrl(key);
    const index = this.rows.locate(key, hash);
    if (row === null) {
      if (index < 0) return false;
      const from = this.rows.bucketOf(this.rows.slotAt(index));
      this.rows.delete(index);
      this.afterRemoval(from);
      this.changes++;
      this.flow.count(nowMinute, 'removed');
      return true;
    }
    if (this.dueCursor === null) this.syncDue(now);
    const minute = Number.isFinite(row.nextRenderTime) ? floorMinute(row.nextRenderTime) : nowMinute;
    if (!Number.isFinite(minute)) throw new RangeError(`keeper: no finite due minute for ${key}`);
    const own = ownInterval(row.effectiveInterval);
    const { route, cadenceMs } = this.classifier(key, own);
    const mark = markOf(row.urgentAt, row.changedAt);
    const target = this.classFor(route, own, cadenceMs, row.fromSitemap === true, row.verified === true, mark);
    if (index >= 0) {
      const from = this.rows.bucketOf(this.rows.slotAt(index));
      if (from.owner === target && from.minute === minute) return false;
      this.countMove(from, target, minute, nowMinute);
      const to = target.bucketFor(minute);
      // The row keeps the URL string it was first stored with; the caller's copy is not retained.
      this.rows.move(index, to);
      target.added(to, this.dueCursor);
      this.afterRemoval(from);
    } else {
      const to = target.bucketFor(minute);
      this.rows.insert(index, to, key, hash);
      target.added(to, this.dueCursor);
      this.flow.count(nowMinute, 'added');
    }
    this.changes++;
    return true;
  }

  /** The best `k` due rows by score, best first. `skip` (leased rows) costs no place. */
  topK(k: number, now: number, skip?: (key: string) => boolean): TopK {
    const entries: TopEntry[] = [];
    const walk = this.walkTop(
      k,
      now,
      (key, score, dueMs, held) => {
        entries.push({
          key,
          score,
          dueMs,
          fromSitemap: held.fromSitemap,
          verified: held.verified,
          route: held.route,
          mark: held.mark,
        });
      },
      skip,
    );
    return { entries, complete: walk.complete, skipped: walk.skipped };
  }

  /**
   * `topK` without the entry objects: hands each of the best `k` due rows to `visit`, best first.
   * Within a class an earlier minute never scores lower, so each class is read front to back and the
   * classes are merged by the score of their current bucket: no row is scored, nothing is sorted.
   * `skip` and `visit` must not change the keeper.
   */
  walkTop(k: number, now: number, visit: TopVisitor, skip?: (key: string) => boolean): TopWalk {
    let visited = 0;
    let skipped = 0;
    const nowMinute = floorMinute(now);
    if (!Number.isFinite(nowMinute)) return { visited, complete: true, skipped };
    const rows = this.rows;
    const heap = new HeadHeap();
    for (const cls of this.classes) {
      const at = cls.firstLive();
      const order = cls.order;
      if (at < order.length && order[at]!.minute <= nowMinute) {
        heap.push(cls, at, this.bucketScore(cls, order[at]!.minute, now));
      }
    }
    while (heap.size > 0) {
      const cls = heap.topClass();
      const at = heap.topAt();
      const value = heap.topScore();
      const bucket = cls.order[at]!;
      const dueMs = bucket.minute * MINUTE_MS;
      for (let chunk = bucket.head, fill = HeldRows.headFill(bucket); chunk !== -1; fill = CHUNK) {
        const base = chunk * CHUNK;
        for (let i = 0; i < fill; i++) {
          const key = rows.keyAt(base + i);
          if (skip !== undefined && skip(key)) {
            skipped++;
            continue;
          }
          if (visited >= k) return { visited, complete: false, skipped };
          visit(key, value, dueMs, cls);
          visited++;
        }
        chunk = rows.nextChunk(chunk);
      }
      const next = cls.nextLive(at + 1);
      if (next < cls.order.length && cls.order[next]!.minute <= nowMinute) {
        heap.replaceTop(next, this.bucketScore(cls, cls.order[next]!.minute, now));
      } else {
        heap.pop();
      }
    }
    return { visited, complete: true, skipped };
  }

  /** Due counts per queue and each queue's oldest due verified row; walks class heads, not rows. */
  dueSummary(now: number): DueSummary {
    const summary: DueSummary = { due: 0, dueVerified: 0, byQueue: new Map() };
    if (!Number.isFinite(floorMinute(now))) return summary;
    this.syncDue(now);
    for (const cls of this.classes) {
      let queue = summary.byQueue.get(cls.route);
      if (queue === undefined) {
        queue = { due: 0, dueVerified: 0, oldestVerifiedDue: null };
        summary.byQueue.set(cls.route, queue);
      }
      queue.due += cls.dueRows;
      summary.due += cls.dueRows;
      if (!cls.verified || cls.dueRows === 0) continue;
      queue.dueVerified += cls.dueRows;
      summary.dueVerified += cls.dueRows;
      const head = cls.order[cls.firstLive()]!; // dueRows > 0, so the first bucket with rows is due
      if (queue.oldestVerifiedDue === null || head.minute * MINUTE_MS < queue.oldestVerifiedDue.dueMs) {
        queue.oldestVerifiedDue = this.firstRow(head, undefined);
      }
    }
    return summary;
  }

  /** The earliest-due row of `queue` that is due at `now`, optionally verified only and not skipped. */
  oldestDue(
    queue: string,
    now: number,
    options: { verifiedOnly?: boolean; skip?: (key: string) => boolean } = {},
  ): DueRow | null {
    const nowMinute = floorMinute(now);
    let best: DueRow | null = null;
    for (const cls of this.classes) {
      if (cls.route !== queue || (options.verifiedOnly === true && !cls.verified)) continue;
      const first = cls.firstLive();
      const order = cls.order;
      for (let i = first; i < order.length; i = cls.nextLive(i + 1)) {
        const bucket = order[i]!;
        if (bucket.minute > nowMinute || (best !== null && bucket.minute * MINUTE_MS >= best.dueMs)) break;
        const found = this.firstRow(bucket, options.skip);
        if (found !== null) {
          best = found;
          break;
        }
      }
    }
    return best;
  }

  /** The counting parts of the queue-state document (SPEC §5). Also advances the cameDue count. */
  state(now: number): QueueStateCounts {
    this.syncDue(now);
    return queueState(this.classes, now, this.flow);
  }

  /** Closes the flow minute: counts rows whose due minute passed since the last call. Returns that count. */
  tick(now: number): number {
    return this.syncDue(now);
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
  matches(key: string, row: ScheduleRow | null): boolean {
    const bucket = this.bucketOfKey(key);
    if (row === null || bucket === null) return row === null && bucket === null;
    const cls = bucket.owner;
    const own = ownInterval(row.effectiveInterval);
    const { route, cadenceMs } = this.classifier(key, own);
    return (
      (!Number.isFinite(row.nextRenderTime) || floorMinute(row.nextRenderTime) === bucket.minute) &&
      cls.route === route &&
      Object.is(cls.cadenceMs, cadenceMs) &&
      Object.is(cls.effectiveInterval, own) &&
      cls.fromSitemap === (row.fromSitemap === true) &&
      cls.verified === (row.verified === true) &&
      cls.mark === markOf(row.urgentAt, row.changedAt)
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
    const previous = this.classes;
    this.classes = [];
    this.registry = new Map();
    for (const cls of previous) {
      for (const bucket of cls.order) {
        // Draining from the newest row: a moved row's place is never refilled from behind the walk.
        while (bucket.count > 0) {
          const slot = HeldRows.lastSlot(bucket);
          const { route, cadenceMs } = classify(this.rows.keyAt(slot), cls.effectiveInterval);
          const target = this.classFor(route, cls.effectiveInterval, cadenceMs, cls.fromSitemap, cls.verified, cls.mark);
          const to = target.bucketFor(bucket.minute);
          this.rows.moveSlot(slot, to);
          target.added(to, this.dueCursor);
        }
      }
    }
    this.changes++;
  }

  /** Drops every held row whose key `shouldDrop` names (ownership moved). Not counted as flow. */
  dropWhere(shouldDrop: (key: string) => boolean): number {
    const doomed: string[] = [];
    for (const cls of this.classes) {
      for (const bucket of cls.order) {
        this.forEachRow(bucket, (key) => {
          if (shouldDrop(key)) doomed.push(key);
          return true;
        });
      }
    }
    for (const key of doomed) {
      const index = this.rows.locate(key, hashUrl(key));
      const from = this.rows.bucketOf(this.rows.slotAt(index));
      this.rows.delete(index);
      this.afterRemoval(from);
    }
    if (doomed.length > 0) this.changes++;
    return doomed.length;
  }

  private bucketOfKey(key: string): Bucket | null {
    const index = this.rows.locate(key, hashUrl(key));
    return index < 0 ? null : this.rows.bucketOf(this.rows.slotAt(index));
  }

  /** Calls `visit` for each row of `bucket` until it returns false. */
  private forEachRow(bucket: Bucket, visit: (key: string) => boolean): void {
    const rows = this.rows;
    for (let chunk = bucket.head, fill = HeldRows.headFill(bucket); chunk !== -1; fill = CHUNK) {
      for (let i = 0; i < fill; i++) if (!visit(rows.keyAt(chunk * CHUNK + i))) return;
      chunk = rows.nextChunk(chunk);
    }
  }

  private bucketScore(cls: KeeperClass, minute: number, now: number): number {
    return score(
      { dueMs: minute * MINUTE_MS, cadenceMs: cls.cadenceMs, fromSitemap: cls.fromSitemap, mark: cls.mark },
      now,
      this.scoreOptions,
    );
  }

  private firstRow(bucket: Bucket, skip: ((key: string) => boolean) | undefined): DueRow | null {
    let found: string | null = null;
    this.forEachRow(bucket, (key) => {
      if (skip !== undefined && skip(key)) return true;
      found = key;
      return false;
    });
    if (found === null) return null;
    const cls = bucket.owner;
    return {
      key: found,
      dueMs: bucket.minute * MINUTE_MS,
      fromSitemap: cls.fromSitemap,
      verified: cls.verified,
      mark: cls.mark,
    };
  }

  private countMove(from: Bucket, to: KeeperClass, minute: number, nowMinute: number): void {
    const cameDueNow = from.minute > nowMinute && minute <= nowMinute;
    if (MARK_RANK[to.mark] > MARK_RANK[from.owner.mark] || cameDueNow) {
      this.flow.count(nowMinute, 'triggered');
    } else if (minute > from.minute) {
      this.flow.count(nowMinute, 'rescheduled');
    }
  }

  /**
   * Moves the due cursor to `now`'s minute, keeping each class's `dueRows` exact. Forward moves count
   * the rows passed as cameDue; a clock stepping back only un-counts them.
   */
  private syncDue(now: number): number {
    const nowMinute = floorMinute(now);
    if (!Number.isFinite(nowMinute)) return 0;
    const cursor = this.dueCursor;
    this.dueCursor = nowMinute;
    if (cursor === null) {
      for (const cls of this.classes) cls.recountDue(nowMinute);
      this.cameDueThrough = nowMinute;
      return 0;
    }
    if (nowMinute === cursor) return 0;
    const newFrom = Math.max(cursor, this.cameDueThrough ?? cursor);
    let cameDue = 0;
    for (const cls of this.classes) {
      if (nowMinute > cursor) {
        const passed = cls.rowsBetween(cursor, nowMinute);
        cls.dueRows += passed;
        if (newFrom === cursor) cameDue += passed;
        else if (nowMinute > newFrom) cameDue += cls.rowsBetween(newFrom, nowMinute);
      } else {
        cls.dueRows -= cls.rowsBetween(nowMinute, cursor);
      }
    }
    this.cameDueThrough = Math.max(nowMinute, this.cameDueThrough ?? nowMinute);
    this.flow.count(nowMinute, 'cameDue', cameDue);
    return cameDue;
  }

  private afterRemoval(bucket: Bucket): void {
    const cls = bucket.owner;
    cls.removed(bucket, this.dueCursor);
    if (cls.rows === 0) this.dropClass(cls);
  }

  private classFor(
    route: string,
    own: number | null,
    cadenceMs: number,
    fromSitemap: boolean,
    verified: boolean,
    mark: Mark,
  ): KeeperClass {
    let byOwn = this.registry.get(route);
    if (byOwn === undefined) this.registry.set(route, (byOwn = new Map()));
    const ownKey = own ?? NaN; // Map keys compare NaN equal to NaN, and no finite interval is NaN
    let byCadence = byOwn.get(ownKey);
    if (byCadence === undefined) byOwn.set(ownKey, (byCadence = new Map()));
    let flavours = byCadence.get(cadenceMs);
    if (flavours === undefined) byCadence.set(cadenceMs, (flavours = new Array(FLAVOURS).fill(undefined)));
    const index = (fromSitemap ? 6 : 0) + (verified ? 3 : 0) + MARK_INDEX[mark];
    let cls = flavours[index];
    if (cls === undefined) {
      cls = new KeeperClass(route, own, cadenceMs, fromSitemap, verified, mark);
      cls.slot = this.classes.length;
      this.classes.push(cls);
      flavours[index] = cls;
    }
    return cls;
  }

  /** An empty class leaves the list, so topK and state never walk classes that hold nothing. */
  private dropClass(cls: KeeperClass): void {
    const last = this.classes.pop()!;
    if (last !== cls) {
      this.classes[cls.slot] = last;
      last.slot = cls.slot;
    }
    const flavours = this.registry.get(cls.route)?.get(cls.effectiveInterval ?? NaN)?.get(cls.cadenceMs);
    if (flavours !== undefined) {
      flavours[(cls.fromSitemap ? 6 : 0) + (cls.verified ? 3 : 0) + MARK_INDEX[cls.mark]] = undefined;
    }
  }
}

/** A binary max-heap of class heads (class, bucket index, score) on parallel arrays. */
class HeadHeap {
  private readonly classes: KeeperClass[] = [];
  private readonly at: number[] = [];
  private readonly scores: number[] = [];

  get size(): number {
    return this.classes.length;
  }

  topClass(): KeeperClass {
    return this.classes[0]!;
  }

  topAt(): number {
    return this.at[0]!;
  }

  topScore(): number {
    return this.scores[0]!;
  }

  push(cls: KeeperClass, at: number, value: number): void {
    this.classes.push(cls);
    this.at.push(at);
    this.scores.push(value);
    let i = this.classes.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!(this.scores[parent]! < this.scores[i]!)) break;
      this.swap(i, parent);
      i = parent;
    }
  }

  replaceTop(at: number, value: number): void {
    this.at[0] = at;
    this.scores[0] = value;
    this.siftDown(0);
  }

  pop(): void {
    const last = this.classes.length - 1;
    this.swap(0, last);
    this.classes.pop();
    this.at.pop();
    this.scores.pop();
    this.siftDown(0);
  }

  private siftDown(start: number): void {
    const n = this.classes.length;
    let i = start;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) return;
      const right = left + 1;
      const child = right < n && this.scores[right]! > this.scores[left]! ? right : left;
      if (!(this.scores[child]! > this.scores[i]!)) return;
      this.swap(i, child);
      i = child;
    }
  }

  private swap(a: number, b: number): void {
    const cls = this.classes[a]!;
    this.classes[a] = this.classes[b]!;
    this.classes[b] = cls;
    const at = this.at[a]!;
    this.at[a] = this.at[b]!;
    this.at[b] = at;
    const value = this.scores[a]!;
    this.scores[a] = this.scores[b]!;
    this.scores[b] = value;
  }
}
