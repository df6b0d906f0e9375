// The set of keeper classes: finding a row's class, unlisting classes that empty, and the due cursor
// that keeps every class's due count exact as the clock moves. Also the heap that merges class heads.
import { type Bucket, KeeperClass } from './keeperClass.js';
import type { FlowLedger } from './flow.js';
import type { Mark } from './score.js';
import { minuteOf } from '../time.js';
import type { RowState } from '../schedule/rowState.js';

const FLAVOURS = 36; // state × fromSitemap × verified × mark
export const MARK_INDEX: Record<Mark, number> = { none: 0, changed: 1, urgent: 2 };
const STATE_INDEX: Record<RowState, number> = { active: 0, suppressed: 1, gone: 2 };

const flavourOf = (fromSitemap: boolean, verified: boolean, mark: Mark, state: RowState): number =>
  STATE_INDEX[state] * 12 + (fromSitemap ? 6 : 0) + (verified ? 3 : 0) + MARK_INDEX[mark];

export class KeeperClasses {
  /** Every class holding rows, in no order. */
  list: KeeperClass[] = [];
  // route → own interval (NaN for none) → cadence → 36 flavours
  private registry = new Map<string, Map<number, Map<number, (KeeperClass | undefined)[]>>>();
  /** Minute through which every class's `dueRows` is counted; null until a clock is first seen. */
  dueCursor: number | null = null;
  // Highest minute already counted as cameDue, so a clock that steps back and forward counts nothing twice.
  private cameDueThrough: number | null = null;

  classFor(
    route: string,
    own: number | null,
    cadenceMs: number,
    fromSitemap: boolean,
    verified: boolean,
    mark: Mark,
    state: RowState = 'active',
  ): KeeperClass {
    let byOwn = this.registry.get(route);
    if (byOwn === undefined) this.registry.set(route, (byOwn = new Map()));
    const ownKey = own ?? NaN; // Map keys compare NaN equal to NaN, and no finite interval is NaN
    let byCadence = byOwn.get(ownKey);
    if (byCadence === undefined) byOwn.set(ownKey, (byCadence = new Map()));
    let flavours = byCadence.get(cadenceMs);
    if (flavours === undefined) byCadence.set(cadenceMs, (flavours = new Array(FLAVOURS).fill(undefined)));
    const index = flavourOf(fromSitemap, verified, mark, state);
    let cls = flavours[index];
    if (cls === undefined) {
      cls = new KeeperClass(route, own, cadenceMs, fromSitemap, verified, mark, state);
      cls.slot = this.list.length;
      this.list.push(cls);
      flavours[index] = cls;
    }
    return cls;
  }

  /** Bookkeeping after a row entered `bucket`. */
  added(bucket: Bucket): void {
    bucket.owner.added(bucket, this.dueCursor);
  }

  /** Bookkeeping after a row left `bucket`; a class left empty is unlisted. */
  removed(bucket: Bucket): void {
    const cls = bucket.owner;
    cls.removed(bucket, this.dueCursor);
    if (cls.rows === 0) this.unlist(cls);
  }

  /** Empties the set (for a rebuild) and returns the classes it held. */
  takeAll(): KeeperClass[] {
    const previous = this.list;
    this.list = [];
    this.registry = new Map();
    return previous;
  }

  /**
   * Moves the due cursor to `now`'s minute, keeping each class's `dueRows` exact. Forward moves count
   * the rows passed as cameDue (returned, and recorded in `flow`); a clock stepping back only
   * un-counts them.
   */
  syncDue(now: number, flow: FlowLedger, countFlow = true): number {
    const nowMinute = minuteOf(now);
    if (!Number.isFinite(nowMinute)) return 0;
    const cursor = this.dueCursor;
    this.dueCursor = nowMinute;
    if (cursor === null) {
      for (const cls of this.list) cls.recountDue(nowMinute);
      if (countFlow) this.cameDueThrough = nowMinute;
      return 0;
    }
    if (nowMinute === cursor) return 0;
    const newFrom = Math.max(cursor, this.cameDueThrough ?? cursor);
    let cameDue = 0;
    for (const cls of this.list) {
      if (nowMinute > cursor) {
        const passed = cls.rowsBetween(cursor, nowMinute);
        cls.dueRows += passed;
        if (newFrom === cursor) cameDue += passed;
        else if (nowMinute > newFrom) cameDue += cls.rowsBetween(newFrom, nowMinute);
      } else {
        cls.dueRows -= cls.rowsBetween(nowMinute, cursor);
      }
    }
    // A look ahead (a staged publish's walk) moves the counts only: the minute's flow is counted once the
    // clock itself gets there, with the rows it then holds.
    if (!countFlow) return 0;
    this.cameDueThrough = Math.max(nowMinute, this.cameDueThrough ?? nowMinute);
    flow.count(nowMinute, 'cameDue', cameDue);
    return cameDue;
  }

  /** An empty class leaves the list, so the publish walk and state never walk classes that hold nothing. */
  private unlist(cls: KeeperClass): void {
    const last = this.list.pop()!;
    if (last !== cls) {
      this.list[cls.slot] = last;
      last.slot = cls.slot;
    }
    const flavours = this.registry
      .get(cls.route)
      ?.get(cls.effectiveInterval ?? NaN)
      ?.get(cls.cadenceMs);
    if (flavours !== undefined)
      flavours[flavourOf(cls.fromSitemap, cls.verified, cls.mark, cls.state)] = undefined;
  }
}

/**
 * A binary max-heap of class heads (class, bucket index, score, rows already passed in that bucket) on
 * parallel arrays. A walk stopped mid-bucket leaves its offset, so a later walk resumes at the next row.
 */
export class HeadHeap {
  private readonly classes: KeeperClass[] = [];
  private readonly at: number[] = [];
  private readonly scores: number[] = [];
  private readonly offsets: number[] = [];

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

  topOffset(): number {
    return this.offsets[0]!;
  }

  /** Records where the walk of the top bucket stopped (rows passed); the order of the heap is unchanged. */
  setTopOffset(offset: number): void {
    this.offsets[0] = offset;
  }

  /** Calls `visit` for every head still in the heap, in no order. */
  forEach(visit: (cls: KeeperClass, at: number, score: number, offset: number) => void): void {
    for (let i = 0; i < this.classes.length; i++)
      visit(this.classes[i]!, this.at[i]!, this.scores[i]!, this.offsets[i]!);
  }

  push(cls: KeeperClass, at: number, value: number, offset = 0): void {
    this.classes.push(cls);
    this.at.push(at);
    this.scores.push(value);
    this.offsets.push(offset);
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
    this.offsets[0] = 0;
    this.siftDown(0);
  }

  pop(): void {
    const last = this.classes.length - 1;
    this.swap(0, last);
    this.classes.pop();
    this.at.pop();
    this.scores.pop();
    this.offsets.pop();
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
    const offset = this.offsets[a]!;
    this.offsets[a] = this.offsets[b]!;
    this.offsets[b] = offset;
  }
}
