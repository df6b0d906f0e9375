// The keeper's in-memory structure (SPEC §2): every row this node owns, grouped into classes and
// bucketed by due minute, so the best K due rows come from a heap merge over class heads. Pure: no
// Harper import, the clock is an argument. The lifecycle that feeds it lives in the keeper service.
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
  // One entry per held row: URL → its bucket. The bucket names both the class and the minute, and a
  // reference costs a map slot like a small integer would, where a packed double would cost a 16-byte
  // heap number per row (minute and class id do not fit in a 31-bit small integer together).
  private readonly held = new Map<string, Bucket>();
  private classes: KeeperClass[] = [];
  // route → own interval (NaN for none) → cadence → 12 flavours
  private registry = new Map<string, Map<number, Map<number, (KeeperClass | undefined)[]>>>();
  // Minute through which every class's `dueRows` is counted. Moving it forward is what counts cameDue.
  private dueCursor: number | null = null;
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
    return this.held.size;
  }

  get classCount(): number {
    return this.classes.length;
  }

  keys(): IterableIterator<string> {
    return this.held.keys();
  }

  has(key: string): boolean {
    return this.held.has(key);
  }

  /**
   * Upserts (row) or deletes (null) one row; idempotent. Returns whether anything held changed.
   * A row without a finite nextRenderTime is held as due in the minute of `now`: it is then claimed
   * with its lateness climbing from 0 rather than silently never coming due.
   */
  apply(key: string, row: ScheduleRow | null, now: number): boolean {
    const nowMinute = floorMinute(now);
    const held = this.held.get(key);
    if (row === null) {
      if (held === undefined) return false;
      this.unplace(key, held);
      this.held.delete(key);
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
    if (held !== undefined) {
      if (held.owner === target && held.minute === minute) return false;
      this.countMove(held, target, minute, nowMinute);
      held.owner.remove(key, held, this.dueCursor);
      // Re-inserting (not just overwriting) makes the map key the very string the new bucket holds;
      // otherwise a moved row would keep two copies of its URL alive, one per structure.
      this.held.delete(key);
    } else {
      this.flow.count(nowMinute, 'added');
    }
    this.held.set(key, target.insert(key, minute, this.dueCursor));
    if (held !== undefined && held.owner.rows === 0) this.dropClass(held.owner);
    this.changes++;
    return true;
  }

  /**
   * The best `k` due rows by score. `skip` (leased rows) costs no place. Must not change the keeper.
   * Within a class an earlier minute never scores lower, so each class is read front to back and the
   * classes are merged by the score of their current bucket.
   */
  topK(k: number, now: number, skip?: (key: string) => boolean): TopK {
    const entries: TopEntry[] = [];
    let skipped = 0;
    const nowMinute = floorMinute(now);
    if (!Number.isFinite(nowMinute)) return { entries, complete: true, skipped };
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
      bucket.trimFront();
      const { items, departed } = bucket;
      const dueMs = bucket.minute * MINUTE_MS;
      for (let i = bucket.head; i < items.length; i++) {
        const key = items[i]!;
        if (departed !== null && departed.has(key)) continue;
        if (skip !== undefined && skip(key)) {
          skipped++;
          continue;
        }
        if (entries.length >= k) return { entries, complete: false, skipped };
        entries.push({
          key,
          score: value,
          dueMs,
          fromSitemap: cls.fromSitemap,
          verified: cls.verified,
          route: cls.route,
          mark: cls.mark,
        });
      }
      const next = cls.nextLive(at + 1);
      if (next < cls.order.length && cls.order[next]!.minute <= nowMinute) {
        heap.replaceTop(next, this.bucketScore(cls, cls.order[next]!.minute, now));
      } else {
        heap.pop();
      }
    }
    return { entries, complete: true, skipped };
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
      const head = cls.order[cls.firstLive()]!; // dueRows > 0, so the first live bucket is due
      if (queue.oldestVerifiedDue === null || head.minute * MINUTE_MS < queue.oldestVerifiedDue.dueMs) {
        queue.oldestVerifiedDue = this.firstRow(cls, head, undefined);
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
        const found = this.firstRow(cls, bucket, options.skip);
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
    const bucket = this.held.get(key);
    if (bucket === undefined) return null;
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
    const bucket = this.held.get(key);
    if (bucket === undefined) return null;
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
    const bucket = this.held.get(key);
    if (row === null || bucket === undefined) return row === null && bucket === undefined;
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
      for (const bucket of cls.ensureOrder()) {
        if (bucket.live === 0) continue;
        bucket.forEachLive((key) => {
          const { route, cadenceMs } = classify(key, cls.effectiveInterval);
          const target = this.classFor(route, cls.effectiveInterval, cadenceMs, cls.fromSitemap, cls.verified, cls.mark);
          // `key` is the map's own key string (apply keeps them identical), so this only swaps the value.
          this.held.set(key, target.insert(key, bucket.minute, this.dueCursor));
          return true;
        });
        // Release as we go, so the rebuild peaks near one copy of the bucket membership, not two.
        bucket.items = [];
      }
    }
    this.changes++;
  }

  /** Drops every held row whose key `shouldDrop` names (ownership moved). Not counted as flow. */
  dropWhere(shouldDrop: (key: string) => boolean): number {
    let dropped = 0;
    for (const [key, bucket] of this.held) {
      if (!shouldDrop(key)) continue;
      this.unplace(key, bucket);
      this.held.delete(key);
      dropped++;
    }
    if (dropped > 0) this.changes++;
    return dropped;
  }

  private bucketScore(cls: KeeperClass, minute: number, now: number): number {
    return score(
      { dueMs: minute * MINUTE_MS, cadenceMs: cls.cadenceMs, fromSitemap: cls.fromSitemap, mark: cls.mark },
      now,
      this.scoreOptions,
    );
  }

  private firstRow(cls: KeeperClass, bucket: Bucket, skip: ((key: string) => boolean) | undefined): DueRow | null {
    let found: string | null = null;
    bucket.forEachLive((key) => {
      if (skip !== undefined && skip(key)) return true;
      found = key;
      return false;
    });
    if (found === null) return null;
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
    // Minutes up to the high-water mark were counted as cameDue already, before the clock stepped back.
    const newFrom = Math.max(cursor, this.cameDueThrough ?? cursor);
    let cameDue = 0;
    for (const cls of this.classes) {
      if (nowMinute > cursor) {
        const passed = cls.liveBetween(cursor, nowMinute);
        cls.dueRows += passed;
        if (newFrom === cursor) cameDue += passed;
        else if (nowMinute > newFrom) cameDue += cls.liveBetween(newFrom, nowMinute);
      } else {
        cls.dueRows -= cls.liveBetween(nowMinute, cursor);
      }
    }
    this.cameDueThrough = Math.max(nowMinute, this.cameDueThrough ?? nowMinute);
    this.flow.count(nowMinute, 'cameDue', cameDue);
    return cameDue;
  }

  private unplace(key: string, bucket: Bucket): void {
    const cls = bucket.owner;
    cls.remove(key, bucket, this.dueCursor);
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
