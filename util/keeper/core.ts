// The keeper's in-memory structure (SPEC §2): every row this node owns, grouped into classes and
// bucketed by due minute, so the best K due rows come from a heap merge over class heads. Pure: no
// Harper import, the clock is an argument. The lifecycle that feeds it lives in the keeper service.
import { CHUNK, HeldRows } from './heldRows.js';
import type { Bucket, KeeperClass } from './class.js';
import { HeadHeap, KeeperClasses, MARK_INDEX } from './classes.js';
import { FlowLedger } from './flow.js';
import { queueState, type QueueStateCounts } from './stateCounts.js';
import type {
  Classify,
  DueRow,
  DueSummary,
  HeldClass,
  HeldDescription,
  HeldValue,
  KeeperOptions,
  PublishSelection,
  ScheduleRow,
  TopEntry,
  TopK,
  TopSkip,
  TopVisitor,
  TopWalk,
} from './types.js';
import { markOf, type ScoreOptions, scoreAt } from './score.js';
import { type QueueShare, sectionQuotas } from './sections.js';
import { MINUTE_MS, minuteOf } from '../time.js';

export type * from './types.js';
export type { Mark, ScoreOptions } from './score.js';

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

  constructor(options: KeeperOptions) {
    this.classifier = options.classify;
    this.scoreOptions = options.score;
    this.rows = new HeldRows<Bucket>(options.hashSeed);
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

  /** Every held key, snapshotted: the caller may apply and delete while iterating. */
  keys(): IterableIterator<string> {
    return this.rows.snapshotKeys().values();
  }

  has(key: string): boolean {
    return this.rows.locate(key, this.rows.hash(key)) >= 0;
  }

  /**
   * Upserts (row) or deletes (null) one row; idempotent. Returns whether anything held changed.
   * A row without a finite nextRenderTime is held as due in the minute of `now`: it is then claimed
   * with its lateness climbing from 0 rather than silently never coming due.
   */
  apply(key: string, row: ScheduleRow | null, now: number): boolean {
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
    );
    if (index >= 0) {
      const from = this.rows.bucketOf(this.rows.slotAt(index));
      if (from.owner === target && from.minute === minute) return false;
      this.countMove(from, target, minute, nowMinute);
      const to = target.bucketFor(minute);
      // The row keeps the URL string it was first stored with; the caller's copy is not retained.
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

  /** The best `k` due rows by score, best first. `skip` (leased rows) costs no place. */
  topK(k: number, now: number, skip?: TopSkip): TopK {
    const entries: TopEntry[] = [];
    const walk = this.walkTop(
      k,
      now,
      (key, score, dueMs, held) => entries.push(topEntry(key, score, dueMs, held)),
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
  walkTop(k: number, now: number, visit: TopVisitor, skip?: TopSkip): TopWalk {
    if (!Number.isFinite(minuteOf(now))) return { visited: 0, complete: true, skipped: 0 };
    return this.walkHeap(this.dueHeads(now), k, now, visit, skip);
  }

  /**
   * What one publish writes (issue 16): the best `k` due rows (exactly `topK`), then up to `extraBudget`
   * more rows for the queues the top under-represents, each queue's next best rows after its rows of
   * the top (shares: util/keeper/sections.ts). Each queue's extras come from a merge of its own class
   * heads, resumed where the top's walk stopped, so no row is read twice and no row is left out of the
   * middle of a queue's order. The cost is bounded by k + extraBudget rows plus one pass over the classes.
   */
  publishSelection(k: number, extraBudget: number, now: number, skip?: TopSkip): PublishSelection {
    const entries: TopEntry[] = [];
    const extras: TopEntry[] = [];
    const completeQueues = new Set<string>();
    const nowMinute = minuteOf(now);
    if (!Number.isFinite(nowMinute)) return { entries, complete: true, skipped: 0, extras, completeQueues };
    const have = new Map<string, number>();
    const heads = this.dueHeads(now);
    const top = this.walkHeap(
      heads,
      k,
      now,
      (key, score, dueMs, held) => {
        entries.push(topEntry(key, score, dueMs, held));
        have.set(held.route, (have.get(held.route) ?? 0) + 1);
      },
      skip,
    );
    let skipped = top.skipped;
    // Every class still in the heap has due rows left; the others were walked to their end.
    const rest = new Map<string, HeadHeap>();
    heads.forEach((cls, at, score, offset) => {
      let heap = rest.get(cls.route);
      if (heap === undefined) rest.set(cls.route, (heap = new HeadHeap()));
      heap.push(cls, at, score, offset);
    });
    for (const route of have.keys()) if (!rest.has(route)) completeQueues.add(route);
    if (rest.size > 0 && extraBudget > 0) {
      this.classes.syncDue(now, this.flow);
      const shares = new Map<string, QueueShare>();
      for (const cls of this.classes.list) {
        if (!rest.has(cls.route)) continue;
        const share = shares.get(cls.route) ?? { due: 0, have: have.get(cls.route) ?? 0 };
        share.due += cls.dueRows;
        shares.set(cls.route, share);
      }
      for (const [route, quota] of sectionQuotas(shares, extraBudget)) {
        const walk = this.walkHeap(
          rest.get(route)!,
          quota,
          now,
          (key, score, dueMs, held) => extras.push(topEntry(key, score, dueMs, held)),
          skip,
        );
        skipped += walk.skipped;
        if (walk.complete) completeQueues.add(route);
      }
    }
    return { entries, complete: top.complete, skipped, extras, completeQueues };
  }

  /** A heap of every class's first due bucket. */
  private dueHeads(now: number): HeadHeap {
    const nowMinute = minuteOf(now);
    const heap = new HeadHeap();
    for (const cls of this.classes.list) {
      const at = cls.firstLive();
      const order = cls.order;
      if (at < order.length && order[at]!.minute <= nowMinute) {
        heap.push(cls, at, this.bucketScore(cls, order[at]!.minute, now));
      }
    }
    return heap;
  }

  /**
   * Merges the heads in `heap` best first, handing up to `k` unskipped rows to `visit`. Stopping early
   * leaves the heap holding every class with rows left, the top one at the row where it stopped, so a
   * later walk over (part of) it resumes exactly there.
   */
  private walkHeap(heap: HeadHeap, k: number, now: number, visit: TopVisitor, skip?: TopSkip): TopWalk {
    let visited = 0;
    let skipped = 0;
    const nowMinute = minuteOf(now);
    const rows = this.rows;
    while (heap.size > 0) {
      const cls = heap.topClass();
      const at = heap.topAt();
      const value = heap.topScore();
      const bucket = cls.order[at]!;
      const dueMs = bucket.minute * MINUTE_MS;
      let chunk = bucket.head;
      let fill = HeldRows.headFill(bucket);
      let passed = heap.topOffset();
      // Resuming mid-bucket: step over the rows an earlier walk passed, a whole chunk at a time.
      let from = passed;
      while (chunk !== -1 && from >= fill) {
        from -= fill;
        chunk = rows.nextChunk(chunk);
        fill = CHUNK;
      }
      for (; chunk !== -1; fill = CHUNK, from = 0) {
        const base = chunk * CHUNK;
        for (let i = from; i < fill; i++, passed++) {
          const slot = base + i;
          const key = rows.keyAt(slot);
          if (skip !== undefined && skip(key, rows.leaseHi(slot), rows.leaseLo(slot))) {
            skipped++;
            continue;
          }
          if (visited >= k) {
            heap.setTopOffset(passed);
            return { visited, complete: false, skipped };
          }
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
    if (!Number.isFinite(minuteOf(now))) return summary;
    this.classes.syncDue(now, this.flow);
    for (const cls of this.classes.list) {
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
    const nowMinute = minuteOf(now);
    let best: DueRow | null = null;
    for (const cls of this.classes.list) {
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
    this.classes.syncDue(now, this.flow);
    return queueState(this.classes.list, now, this.flow);
  }

  /** Closes the flow minute: counts rows whose due minute passed since the last call. Returns that count. */
  tick(now: number): number {
    return this.classes.syncDue(now, this.flow);
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
      (!Number.isFinite(row.nextRenderTime) || minuteOf(row.nextRenderTime) === bucket.minute) &&
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
        this.forEachRow(bucket, (key) => {
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

  /** Calls `visit` for each row of `bucket` until it returns false. */
  private forEachRow(bucket: Bucket, visit: (key: string) => boolean): void {
    const rows = this.rows;
    for (let chunk = bucket.head, fill = HeldRows.headFill(bucket); chunk !== -1; fill = CHUNK) {
      for (let i = 0; i < fill; i++) if (!visit(rows.keyAt(chunk * CHUNK + i))) return;
      chunk = rows.nextChunk(chunk);
    }
  }

  private bucketScore(cls: KeeperClass, minute: number, now: number): number {
    return scoreAt(minute * MINUTE_MS, cls.cadenceMs, cls.fromSitemap, cls.mark, now, this.scoreOptions);
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
}

function topEntry(key: string, score: number, dueMs: number, held: HeldClass): TopEntry {
  return {
    key,
    score,
    dueMs,
    fromSitemap: held.fromSitemap,
    verified: held.verified,
    route: held.route,
    mark: held.mark,
  };
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Does `key` come back unchanged from UTF-8 (no lone surrogate)? Only such keys can be claimed. */
function roundTrips(key: string): boolean {
  return !LONE_SURROGATE.test(key);
}
