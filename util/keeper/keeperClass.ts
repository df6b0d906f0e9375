// One keeper class and its minute buckets. Every row of a class shares route, cadence, sitemap flag,
// verified flag and mark, so its score depends only on its due minute: that is what lets the core merge
// classes by their heads instead of scoring rows. The rows themselves live in `HeldRows`.
import type { ChunkList } from './heldRows.js';
import type { Mark } from './score.js';
import type { RowState } from '../schedule/rowState.js';

// Drained buckets stay listed (as shells) until they are half the list: a minute often refills soon,
// and dropping each one eagerly would splice the ordered list on every drain.
const SHELL_FLOOR = 32;
// Drained minutes pile up at the front (the oldest rows are claimed first); a run this long is cut off
// when a reader meets it, instead of being stepped over on every read.
const LEADING_SHELLS_CUT = 64;

/** The rows of one class due in one minute. They all score the same, so their order inside is free. */
export class Bucket implements ChunkList {
  count = 0;
  head = -1;

  constructor(
    readonly owner: KeeperClass,
    readonly minute: number,
  ) {}
}

export class KeeperClass {
  /** Rows held in this class. */
  rows = 0;
  /** Rows whose minute is at or before the core's due cursor (see `KeeperCore`). */
  dueRows = 0;
  /** Index in the core's class list, kept so a class that empties can be unlisted in O(1). */
  slot = -1;
  private readonly buckets = new Map<number, Bucket>();
  /** Every bucket of `buckets`, by ascending minute once `ensureOrder` has run. Includes shells. */
  order: Bucket[] = [];
  private sorted = true;
  private shells = 0;

  constructor(
    readonly route: string,
    /** The rows' own interval (null: none). Kept because reclassifying must ask the classifier again. */
    readonly effectiveInterval: number | null,
    readonly cadenceMs: number,
    readonly fromSitemap: boolean,
    readonly verified: boolean,
    readonly mark: Mark,
    /** The rows' verdict state: queue-state counts rows by it (docs/feeding.md). */
    readonly state: RowState = 'active',
  ) {}

  /** The bucket for `minute`, listed (as an empty shell) if it was not. Follow with `added`. */
  bucketFor(minute: number): Bucket {
    let bucket = this.buckets.get(minute);
    if (bucket === undefined) {
      bucket = new Bucket(this, minute);
      this.buckets.set(minute, bucket);
      const order = this.order;
      // Loads arrive in key order, so minutes come in random order: appending and sorting once on the
      // next read (TimSort on a nearly sorted list is linear) beats a splice per new minute.
      if (this.sorted && order.length > 0 && order[order.length - 1]!.minute > minute) this.sorted = false;
      order.push(bucket);
      this.shells++;
    }
    return bucket;
  }

  /** Bookkeeping after one row entered `bucket`. */
  added(bucket: Bucket, dueCursor: number | null): void {
    if (bucket.count === 1) this.shells--;
    this.rows++;
    if (dueCursor !== null && bucket.minute <= dueCursor) this.dueRows++;
  }

  /** Bookkeeping after one row left `bucket`. */
  removed(bucket: Bucket, dueCursor: number | null): void {
    this.rows--;
    if (dueCursor !== null && bucket.minute <= dueCursor) this.dueRows--;
    if (bucket.count === 0) {
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

  /** Index of the first bucket holding rows at or after `from` in `order`; order.length if none. */
  nextLive(from: number): number {
    const order = this.order;
    let i = from;
    while (i < order.length && order[i]!.count === 0) i++;
    return i;
  }

  /** Index of the first bucket holding rows (sorting first if needed). */
  firstLive(): number {
    const order = this.ensureOrder();
    const at = this.nextLive(0);
    if (at < LEADING_SHELLS_CUT) return at;
    for (let i = 0; i < at; i++) this.buckets.delete(order[i]!.minute);
    order.splice(0, at);
    this.shells -= at;
    return 0;
  }

  /** Rows with a minute in (after, through]. */
  rowsBetween(after: number, through: number): number {
    const order = this.ensureOrder();
    let lo = 0;
    let hi = order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (order[mid]!.minute <= after) lo = mid + 1;
      else hi = mid;
    }
    let count = 0;
    for (let i = lo; i < order.length && order[i]!.minute <= through; i++) count += order[i]!.count;
    return count;
  }

  /** Recomputes `dueRows` from the buckets, for when the core first sets its due cursor. */
  recountDue(dueCursor: number): void {
    this.dueRows = this.rowsBetween(-Infinity, dueCursor);
  }

  private sweepShells(): void {
    const kept: Bucket[] = [];
    for (const bucket of this.order) {
      if (bucket.count > 0) kept.push(bucket);
      else this.buckets.delete(bucket.minute);
    }
    this.order = kept;
    this.shells = 0;
  }
}
