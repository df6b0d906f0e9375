// One keeper class and its minute buckets: the storage under `KeeperCore`. Every row of a class shares
// route, cadence, sitemap flag, verified flag and mark, so its score depends only on its due minute;
// that is what lets the core merge classes by their heads instead of scoring rows.
import type { Mark } from './score.js';

// Departed copies are tolerated until they outnumber the live rows (and pass a floor, so tiny buckets
// are not rebuilt on every move). Rebuilding then costs no more than the departures that caused it.
const COMPACT_FLOOR = 32;
// Empty buckets are kept listed for the same reason: a minute often refills soon after it drains, and
// dropping it eagerly would splice the ordered list on every drain.
const SHELL_FLOOR = 32;
const LEADING_SHELLS_CUT = 64;

/**
 * The rows of one class due in one minute. They all score the same, so their order inside is free.
 * Removal is lazy: a departing row usually leaves its copy behind (noted in `departed`) because finding
 * it would cost a scan, and the map that holds the row has room for one value only.
 */
export class Bucket {
  /** Keys in arrival order. Copies before `head`, and copies whose key is in `departed`, are stale. */
  items: string[] = [];
  head = 0;
  live = 0;
  departed: Set<string> | null = null;

  constructor(
    readonly owner: KeeperClass,
    readonly minute: number,
  ) {}

  isStale(key: string): boolean {
    return this.departed !== null && this.departed.has(key);
  }

  add(key: string): void {
    // A key may return to a bucket it left. Pushing it again would leave two copies, one of them
    // marked departed by key — and both would then read as stale, or both as live. Rebuild first.
    if (this.departed !== null && this.departed.has(key)) this.compact();
    this.items.push(key);
    this.live++;
  }

  remove(key: string): void {
    this.live--;
    if (this.live === 0) {
      this.items = [];
      this.head = 0;
      this.departed = null;
      return;
    }
    const last = this.items.length - 1;
    // Only one copy of a key lives past `head`, so an equal string at either end is this row's own copy.
    if (last >= this.head && this.items[last] === key) {
      this.items.pop();
    } else if (this.items[this.head] === key) {
      this.head++;
      if (this.head > COMPACT_FLOOR && this.head * 2 > this.items.length) this.compact();
    } else {
      this.departed ??= new Set();
      this.departed.add(key);
      if (this.departed.size > COMPACT_FLOOR && this.departed.size > this.live) this.compact();
    }
  }

  /** Steps `head` over stale copies so readers that start at the front do not meet them again. */
  trimFront(): void {
    const departed = this.departed;
    if (departed === null) return;
    while (this.head < this.items.length && departed.delete(this.items[this.head]!)) this.head++;
    if (departed.size === 0) this.departed = null;
  }

  compact(): void {
    const departed = this.departed;
    const kept: string[] = [];
    for (let i = this.head; i < this.items.length; i++) {
      const key = this.items[i]!;
      if (departed === null || !departed.has(key)) kept.push(key);
    }
    this.items = kept;
    this.head = 0;
    this.departed = null;
  }

  /** Calls `visit` for each live key in front-to-back order until it returns false. */
  forEachLive(visit: (key: string) => boolean): void {
    this.trimFront();
    const { items, departed } = this;
    for (let i = this.head; i < items.length; i++) {
      const key = items[i]!;
      if (departed !== null && departed.has(key)) continue;
      if (!visit(key)) return;
    }
  }
}

export class KeeperClass {
  /** Live rows held in this class. */
  rows = 0;
  /** Live rows whose minute is at or before the core's due cursor (see `KeeperCore`). */
  dueRows = 0;
  readonly buckets = new Map<number, Bucket>();
  /** Every bucket of `buckets`, by ascending minute once `ensureOrder` has run. Includes empty shells. */
  order: Bucket[] = [];
  private sorted = true;
  private shells = 0;
  /** Index in the core's class list, kept so a class that empties can be unlisted in O(1). */
  slot = -1;

  constructor(
    readonly route: string,
    /** The rows' own interval (null: none). Kept because reclassifying must ask the classifier again. */
    readonly effectiveInterval: number | null,
    readonly cadenceMs: number,
    readonly fromSitemap: boolean,
    readonly verified: boolean,
    readonly mark: Mark,
  ) {}

  insert(key: string, minute: number, dueCursor: number | null): Bucket {
    let bucket = this.buckets.get(minute);
    if (bucket === undefined) {
      bucket = new Bucket(this, minute);
      this.buckets.set(minute, bucket);
      const order = this.order;
      // Loads arrive in key order, so minutes come in random order: appending and sorting once on the
      // next read (TimSort on a nearly sorted list is linear) beats a splice per new minute.
      if (this.sorted && order.length > 0 && order[order.length - 1]!.minute > minute) this.sorted = false;
      order.push(bucket);
    } else if (bucket.live === 0) {
      this.shells--;
    }
    bucket.add(key);
    this.rows++;
    if (dueCursor !== null && minute <= dueCursor) this.dueRows++;
    return bucket;
  }

  remove(key: string, bucket: Bucket, dueCursor: number | null): void {
    bucket.remove(key);
    this.rows--;
    if (dueCursor !== null && bucket.minute <= dueCursor) this.dueRows--;
    if (bucket.live === 0) {
      this.shells++;
      if (this.shells > SHELL_FLOOR && this.shells * 2 > this.order.length) this.sweepShells();
    }
  }

  ensureOrder(): Bucket[] {
    if (!this.sorted) {
      this.order.sort((a, b) => a.minute - b.minute);
      this.sorted = true;
    }
    return this.order;
  }

  /** Index of the first bucket with a live row at or after `from` in `order`; order.length if none. */
  nextLive(from: number): number {
    const order = this.order;
    let i = from;
    while (i < order.length && order[i]!.live === 0) i++;
    return i;
  }

  /**
   * Index of the first bucket with a live row. Drained minutes pile up at the front (the oldest rows
   * are claimed first), so a long run of them is cut off here instead of being stepped over on every
   * read; the sweep in `remove` only fires once shells are half the list.
   */
  firstLive(): number {
    const order = this.ensureOrder();
    const at = this.nextLive(0);
    if (at < LEADING_SHELLS_CUT) return at;
    for (let i = 0; i < at; i++) this.buckets.delete(order[i]!.minute);
    order.splice(0, at);
    this.shells -= at;
    return 0;
  }

  /** Index of the first bucket whose minute is after `minute`. Needs `ensureOrder` first. */
  firstAfter(minute: number): number {
    const order = this.order;
    let lo = 0;
    let hi = order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (order[mid]!.minute <= minute) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Live rows with a minute in (after, through]. */
  liveBetween(after: number, through: number): number {
    const order = this.ensureOrder();
    let count = 0;
    for (let i = this.firstAfter(after); i < order.length && order[i]!.minute <= through; i++) {
      count += order[i]!.live;
    }
    return count;
  }

  /** Recomputes `dueRows` from the buckets, for when the core first sets its due cursor. */
  recountDue(dueCursor: number | null): void {
    this.dueRows = dueCursor === null ? 0 : this.liveBetween(-Infinity, dueCursor);
  }

  private sweepShells(): void {
    const kept: Bucket[] = [];
    for (const bucket of this.order) {
      if (bucket.live > 0) kept.push(bucket);
      else this.buckets.delete(bucket.minute);
    }
    this.order = kept;
    this.shells = 0;
  }
}
