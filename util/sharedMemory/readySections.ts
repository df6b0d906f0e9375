// The ready set's per-queue sections. Besides the global top (entries 0..count, the only
// part an unscoped take reads), a slot holds extra rows of queues the global top under-represents, and
// one section per queue: an index list of that queue's entries, global ones first, best first, with its
// own cursor. A scoped claim takes from its queues' sections, so a queue with 1 % of the due rows still
// gets full claims. An entry may be reachable from the global cursor and from its section: the lease
// table grants it once. The layout (RDY3) is in util/sharedMemory/readyLayout.ts; the publish that writes the
// sections and the global take are in util/sharedMemory/readySet.ts.
//
// A section cursor is (generation & TAG_MASK) << POS_BITS | position: a take moves it by CAS only while
// its tag is the generation it read, so a take can never spend positions of a set it did not read.
// Tags wrap at 2,048 generations; only a take stalled for 1,024 publishes between reading the slot and
// reserving could misread one, and the worst it could do is make a section look used up until the next
// publish resets its cursor.
import {
  H_SECTION_CURSORS,
  MAX_SECTIONS,
  META_INTS,
  READ_ATTEMPTS,
  type ReadyBuffer,
  type ReadyEntry,
  type ReadyEntryInput,
  RETRY,
  SECTION_INTS,
  S_SECTIONS,
  type SlotRead,
  type TakeStep,
  openActiveSlot,
  pick,
  readActiveSlot,
  unchanged,
} from './readyLayout.js';

/** What a publish adds for the queues' sections (see the file header). */
export interface ReadyExtras {
  /**
   * Rows past the global top, each queue's best first (queues may interleave). A queue's section is its
   * rows of the global top, then these; a queue's extras end at its first key that does not fit.
   */
  entries: readonly ReadyEntryInput[];
  /** Queues whose every due, unleased row is in the set: an exhausted section of theirs needs no publish. */
  complete: ReadonlySet<string>;
}

/** One queue's section of the active set, as a scoped claim sees it. */
export interface SectionView {
  /** Entries in the section (its rows of the global top plus its extras). */
  count: number;
  /** Positions handed out by section takes (the global cursor does not move this). */
  taken: number;
  remaining: number;
  /** The queue had no due, unleased row left out of the set when it was published. */
  complete: boolean;
  /** Score of the next entry a section take would hand out; -Infinity when none is left. */
  headScore: number;
}

const SECTION_COMPLETE = 1;
const POS_BITS = 21; // a position up to 2^21 - 1 ≥ 1.5 × MAX_CAPACITY (readyLayout.ts)
const POS_MASK = (1 << POS_BITS) - 1;
const TAG_MASK = (1 << (32 - POS_BITS)) - 1;
const HALF_TAGS = (TAG_MASK + 1) / 2;
const CURSOR_ATTEMPTS = 8;

const tagOf = (generation: number): number => generation & TAG_MASK;
const cursorWord = (tag: number, pos: number): number => (tag << POS_BITS) | pos | 0;

/** A queue's section as a slot read found it: its index in the table and its run of the order list. */
interface Located {
  s: number;
  start: number;
  count: number;
  flags: number;
}

export class ReadySections {
  constructor(private readonly buf: ReadyBuffer) {}

  /**
   * Groups the written entries by queue into the slot's section table (sorted by queue hash, so a take
   * finds its section by binary search) and index lists (global entries first, in order, then extras).
   * Entries of no queue (hash 0) get no section; queues past MAX_SECTIONS neither (config allows fewer).
   * Only the publisher calls this, while it holds the slot. Returns the number of sections.
   */
  write(slot: number, count: number, extraCount: number, complete: Set<number>): number {
    const capacity = this.buf.capacity;
    const meta = pick(this.buf.meta, slot);
    const order = pick(this.buf.order, slot);
    const table = pick(this.buf.sections, slot);
    const sizes = new Map<number, number>();
    const positions = (visit: (p: number) => void) => {
      for (let p = 0; p < count; p++) visit(p);
      for (let p = capacity; p < capacity + extraCount; p++) visit(p);
    };
    positions((p) => {
      const q = meta[p * META_INTS + 3]!;
      if (q !== 0 && (sizes.has(q) || sizes.size < MAX_SECTIONS)) sizes.set(q, (sizes.get(q) ?? 0) + 1);
    });
    const hashes = [...sizes.keys()].sort((a, b) => a - b);
    const next = new Map<number, number>();
    let start = 0;
    hashes.forEach((q, s) => {
      const size = sizes.get(q)!;
      const t = s * SECTION_INTS;
      table[t] = q;
      table[t + 1] = start;
      table[t + 2] = size;
      table[t + 3] = complete.has(q) ? SECTION_COMPLETE : 0;
      next.set(q, start);
      start += size;
    });
    positions((p) => {
      const at = next.get(meta[p * META_INTS + 3]!);
      if (at === undefined) return;
      order[at] = p;
      next.set(meta[p * META_INTS + 3]!, at + 1);
    });
    return hashes.length;
  }

  /**
   * Moves every section cursor to `generation`'s tag at position 0; the publisher calls it after the
   * flip. Section takes CAS against the tag they read, so no reset can skip or re-issue a position.
   */
  resetCursors(generation: number): void {
    const h = this.buf.header;
    const tag = tagOf(generation);
    for (let s = 0; s < MAX_SECTIONS; s++) resetCursor(h, H_SECTION_CURSORS + s, tag);
  }

  /** The active set's section of `queue` (a nameHash), or null when the queue has none. */
  view(queue: number): SectionView | null {
    const h = this.buf.header;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const read = openActiveSlot(h);
      if (read === null) continue;
      const found = this.locate(read, queue);
      if (found === null) {
        if (unchanged(h, read)) return null;
        continue;
      }
      const { s, start, count } = found;
      const complete = (found.flags & SECTION_COMPLETE) !== 0;
      const word = Atomics.load(h, H_SECTION_CURSORS + s);
      // A cursor not yet reset for this generation has handed out nothing of it.
      const taken = word >>> POS_BITS === tagOf(read.generation) ? Math.min(count, word & POS_MASK) : 0;
      const headScore =
        taken < count
          ? pick(this.buf.scores, read.slot)[pick(this.buf.order, read.slot)[start + taken]!]!
          : -Infinity;
      if (!unchanged(h, read)) continue;
      return { count, taken, remaining: count - taken, complete, headScore };
    }
    return null;
  }

  /** ReadySet.takeSection as resumable steps (see ReadySet.publishSteps). */
  *takeSteps(queue: number, n: number): Generator<TakeStep, ReadyEntry[], void> {
    const wanted = Math.floor(n);
    if (!(wanted >= 1)) return [];
    const out = yield* readActiveSlot(this.buf.header, (read) => this.takeAttempt(read, queue, wanted));
    return out ?? [];
  }

  private *takeAttempt(
    read: SlotRead,
    queue: number,
    wanted: number,
  ): Generator<TakeStep, ReadyEntry[] | typeof RETRY, void> {
    const h = this.buf.header;
    const found = this.locate(read, queue);
    yield 'slotRead';
    if (found === null) return unchanged(h, read) ? [] : RETRY;
    // Positions are reserved against the generation read: a cursor of a newer set refuses, so a take
    // never spends a newer set's head on the rows of an older one.
    const range = unchanged(h, read) ? this.reserve(found.s, read.generation, found.count, wanted) : null;
    if (range === null) return RETRY;
    yield 'reserved';
    const order = pick(this.buf.order, read.slot);
    const out = this.buf.readEntries(read, range[0], range[1], (i) => order[found.start + i]!);
    yield 'entriesRead';
    // The slot was rewritten while we copied: the positions reserved belonged to a superseded set.
    if (out === null || !unchanged(h, read)) return RETRY;
    return out;
  }

  /** `queue`'s section in the slot a reader opened (binary search by hash), or null. */
  private locate(read: SlotRead, queue: number): Located | null {
    const table = pick(this.buf.sections, read.slot);
    let lo = 0;
    let hi = Math.min(Math.max(0, Atomics.load(this.buf.header, read.at + S_SECTIONS)), MAX_SECTIONS);
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const t = mid * SECTION_INTS;
      const q = table[t]!;
      if (q === queue) return { s: mid, start: table[t + 1]!, count: table[t + 2]!, flags: table[t + 3]! };
      if (q < queue) lo = mid + 1;
      else hi = mid;
    }
    return null;
  }

  /**
   * Reserves up to `wanted` positions of section `s` for `generation`. Returns [from, to), or null when
   * the cursor already belongs to a newer generation (the slot read is superseded).
   */
  private reserve(s: number, generation: number, count: number, wanted: number): [number, number] | null {
    const h = this.buf.header;
    const at = H_SECTION_CURSORS + s;
    const tag = tagOf(generation);
    for (let attempt = 0; attempt < CURSOR_ATTEMPTS; attempt++) {
      const word = Atomics.load(h, at);
      const wordTag = word >>> POS_BITS;
      if (wordTag !== tag) {
        // Older: the publisher has not reset this cursor yet; do it for it. Newer: we read a stale slot.
        if (((tag - wordTag) & TAG_MASK) >= HALF_TAGS) return null;
        Atomics.compareExchange(h, at, word, cursorWord(tag, 0));
        continue;
      }
      const pos = Math.min(word & POS_MASK, count);
      const to = Math.min(count, pos + wanted);
      if (to === pos) return [pos, pos];
      if (Atomics.compareExchange(h, at, word, cursorWord(tag, to)) === word) return [pos, to];
    }
    return null;
  }
}

/** Moves a section cursor to `tag` at position 0 unless it is there already (a take may have helped). */
function resetCursor(h: Int32Array, at: number, tag: number): void {
  for (;;) {
    const word = Atomics.load(h, at);
    if (word >>> POS_BITS === tag) return;
    if (Atomics.compareExchange(h, at, word, cursorWord(tag, 0)) === word) return;
  }
}
