// The ready set: worker 0 publishes the best due rows into a shared buffer; every worker takes from it
// with one atomic add and no lock. Two slots flip so a publish never writes the slot readers are using.
//
// Sections (issue 16): besides the global top (entries 0..count, the only part an unscoped take reads),
// a slot holds extra rows of queues the global top under-represents, and one section per queue: an index
// list of that queue's entries, global ones first, best first, with its own cursor. A scoped claim takes
// from its queues' sections, so a queue with 1 % of the due rows still gets full claims. An entry may be
// reachable from the global cursor and from its section: the lease table grants it once.
//
// The buffer is an ordinary ArrayBuffer shared by all workers (HARPER.md §5): Atomics.load/store/add/
// compareExchange work on it but Atomics.wait does not, so nothing here ever blocks. A reader that
// meets a slot being rewritten retries a few times and then gives up on that take.
import { Buffer } from 'node:buffer';
import { nameHash } from '../leases/token.js';
import { fromSharedSeconds, sharedSecondsAtOrBefore } from '../time.js';
import { runToEnd } from './steps.js';

const INT32_MAX = 0x7fffffff;
const INT32_MIN = -0x80000000;
// The key region and its extra half must stay within one Buffer's Int32 offsets.
const MAX_KEY_REGION = Math.floor(INT32_MAX / 2);

/** One mark per row, never summed (SPEC §2). */
export type ReadyMark = 'none' | 'urgent' | 'changed';

export interface ReadyEntryInput {
  key: string;
  score: number;
  /** Kept to the second (floored): row due times are minute-floored, so nothing is lost. */
  dueMs: number;
  fromSitemap: boolean;
  verified: boolean;
  mark: ReadyMark;
  /** The row's queue (its route's name); stored as its nameHash so a scoped claim can filter cheaply. */
  route?: string;
}

export interface ReadyEntry extends ReadyEntryInput {
  /** The publish this entry came from; a take that straddles a publish may mix two. */
  generation: number;
  /** nameHash of the entry's queue (0 when the publisher gave none). */
  queue: number;
}

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

export interface PublishResult {
  /** Entries written: stops at capacity or at the first key that does not fit in the key region. */
  published: number;
  /** Extra rows written for the sections (past the global top). */
  extras: number;
  /** Queues with a section. */
  sections: number;
  /** The generation now active (unchanged when busy). */
  generation: number;
  /** Another writer holds the inactive slot; nothing was published. */
  busy: boolean;
}

export interface ReadySnapshot {
  capacity: number;
  count: number;
  consumed: number;
  remaining: number;
  generation: number;
  /** Whole seconds (floored), so an age computed from it reads up to 999 ms high; null before any publish. */
  publishedAt: number | null;
}

/** Step names of the interleavable forms below; tests pause between them. */
export type PublishStep = 'acquired' | 'written' | 'flipped' | 'released';
export type TakeStep = 'reserved' | 'slotRead' | 'retry' | 'entriesRead' | 'clamping';

/** At most this many queues get a section: above the 1,000 routes config allows, plus `unrouted`. */
export const MAX_SECTIONS = 1024;

/** A 1,900-byte key (SPEC §1) must always fit at the head, or one long URL would empty every set. */
export const MIN_KEY_BYTES_PER_SLOT = 2048;
const MAX_CAPACITY = 1 << 20;
const MAX_KEY_BYTES = (1 << 24) - 1; // the length field is 24 bits; flags sit above it
const FLAG_SITEMAP = 1 << 24;
const FLAG_VERIFIED = 1 << 25;
const FLAG_URGENT = 1 << 26;
const FLAG_CHANGED = 1 << 27;
const DUE_UNKNOWN = INT32_MIN;

// A slot writer silent this long is presumed dead (a thread killed mid-publish would otherwise leave its
// slot locked forever). A real publish takes milliseconds, and a second keeper only starts after the
// leader slot in the keeper signal went stale (≥ 30 s), so this never steps on a live writer.
const WRITER_STALL_SEC = 10;
// Readers give up after this many tries; each failure means a newer publish is already out, so the
// dropped positions belong to a superseded set.
const READ_ATTEMPTS = 3;
const CLAMP_ATTEMPTS = 4;

// Layout 'RDY3' (a dev reload with another layout must not reinterpret the bytes, so it is refused):
//   header (HEADER_INTS Int32): magic, capacity, key bytes, active slot, generation; the global cursor on
//     its own 64-byte line; the two slot headers; then MAX_SECTIONS section cursors.
//   per slot, slot 0 then slot 1 for each region:
//     scores   Float64 × entryCapacity   (global top at 0..count, extras at capacity..capacity+extras)
//     meta     Int32 × 4 × entryCapacity (due seconds, key offset, key length | flags, queue hash)
//     order    Int32 × entryCapacity     (section index lists: entry positions, section after section)
//     sections Int32 × 4 × MAX_SECTIONS  (queue hash, start in order, count, flags), sorted by hash
//     keys     keyBytesPerSlot + extraKeyBytes (the global top's keys, then the extras' keys)
//   entryCapacity = capacity + extraCapacity, extraCapacity = ceil(capacity / 2) (EXTRA_SHARE).
// A section cursor is (generation & TAG_MASK) << POS_BITS | position: a take moves it by CAS only while
// its tag is the generation it read, so a take can never spend positions of a set it did not read.
// Tags wrap at 2,048 generations; only a take stalled for 1,024 publishes between reading the slot and
// reserving could misread one, and the worst it could do is make a section look used up until the next
// publish resets its cursor.
const MAGIC = 0x52445933;
const H_MAGIC = 0;
const H_CAPACITY = 1;
const H_KEY_BYTES = 2;
const H_ACTIVE = 3;
const H_GENERATION = 4;
const H_CURSOR = 16; // its own 64-byte line: every take hammers it
const SLOT_HEADER = [32, 40] as const;
const S_SEQ = 0; // odd while a writer holds the slot
const S_COUNT = 1;
const S_GENERATION = 2;
const S_PUBLISHED_AT = 3;
const S_WRITER_SINCE = 4;
const S_EXTRAS = 5; // extra entries, at capacity..capacity+extras
const S_SECTIONS = 6; // sections in the slot's table
const H_SECTION_CURSORS = 48;
const HEADER_INTS = H_SECTION_CURSORS + MAX_SECTIONS;
const HEADER_BYTES = HEADER_INTS * 4;
const META_INTS = 4; // due seconds, key offset, key length | flags, queue hash
const SECTION_INTS = 4; // queue hash, start in order, count, flags
const SECTION_COMPLETE = 1;
/** The sections' extra rows, as a share of the capacity (and of the key region). */
const EXTRA_SHARE = 0.5;
const POS_BITS = 21; // a position up to 2^21 - 1 ≥ 1.5 × MAX_CAPACITY
const POS_MASK = (1 << POS_BITS) - 1;
const TAG_MASK = (1 << (32 - POS_BITS)) - 1;
const HALF_TAGS = (TAG_MASK + 1) / 2;
const CURSOR_ATTEMPTS = 8;

/** Extra rows a set of `capacity` holds for its sections. */
export function extraCapacityFor(capacity: number): number {
  return Math.ceil(capacity * EXTRA_SHARE);
}

function extraKeyBytesFor(keyBytesPerSlot: number): number {
  return Math.max(MIN_KEY_BYTES_PER_SLOT, Math.ceil(keyBytesPerSlot * EXTRA_SHARE));
}

const tagOf = (generation: number): number => generation & TAG_MASK;
const cursorWord = (tag: number, pos: number): number => (tag << POS_BITS) | pos | 0;

export class ReadySet {
  readonly capacity: number;
  readonly keyBytesPerSlot: number;
  /** Extra rows a slot holds for the sections, past the global top. */
  readonly extraCapacity: number;
  private readonly extraKeyBytes: number;
  private readonly header: Int32Array;
  private readonly scores: [Float64Array, Float64Array];
  private readonly meta: [Int32Array, Int32Array];
  private readonly order: [Int32Array, Int32Array];
  private readonly sections: [Int32Array, Int32Array];
  private readonly keys: [Buffer, Buffer];
  /** Queue name → nameHash, for the publisher (routes are few). */
  private readonly queueHashes = new Map<string, number>();

  static byteLength(capacity: number, keyBytesPerSlot: number): number {
    const entries = capacity + extraCapacityFor(capacity);
    const perSlot =
      entries * (8 + META_INTS * 4 + 4) +
      MAX_SECTIONS * SECTION_INTS * 4 +
      keyBytesPerSlot +
      extraKeyBytesFor(keyBytesPerSlot);
    return Math.ceil((HEADER_BYTES + 2 * perSlot) / 8) * 8;
  }

  /** The capacity and key region a buffer was first laid out with, or null if it is still blank. */
  static storedLayout(buf: ArrayBuffer): { capacity: number; keyBytesPerSlot: number } | null {
    const h = new Int32Array(buf, 0, HEADER_INTS);
    const capacity = Atomics.load(h, H_CAPACITY);
    const keyBytesPerSlot = Atomics.load(h, H_KEY_BYTES);
    return capacity > 0 && keyBytesPerSlot > 0 ? { capacity, keyBytesPerSlot } : null;
  }

  constructor(buf: ArrayBuffer, capacity: number, keyBytesPerSlot: number) {
    if (!Number.isInteger(capacity) || capacity < 1 || capacity > MAX_CAPACITY)
      throw new RangeError(`ready set capacity must be an integer in 1..${MAX_CAPACITY}, got ${capacity}`);
    if (
      !Number.isInteger(keyBytesPerSlot) ||
      keyBytesPerSlot < MIN_KEY_BYTES_PER_SLOT ||
      keyBytesPerSlot > MAX_KEY_REGION
    )
      throw new RangeError(
        `ready set key region must be at least ${MIN_KEY_BYTES_PER_SLOT} bytes (and at most ${MAX_KEY_REGION}), got ${keyBytesPerSlot}`,
      );
    const need = ReadySet.byteLength(capacity, keyBytesPerSlot);
    if (buf.byteLength < need)
      throw new RangeError(
        `ready set needs ${need} bytes; the shared buffer has ${buf.byteLength} (sized by an earlier caller?)`,
      );
    this.capacity = capacity;
    this.keyBytesPerSlot = keyBytesPerSlot;
    this.extraCapacity = extraCapacityFor(capacity);
    this.extraKeyBytes = extraKeyBytesFor(keyBytesPerSlot);
    this.header = new Int32Array(buf, 0, HEADER_INTS);
    claimLayout(this.header, capacity, keyBytesPerSlot);
    const entries = capacity + this.extraCapacity;
    const keyRegion = keyBytesPerSlot + this.extraKeyBytes;
    const scoresAt = HEADER_BYTES;
    const metaAt = scoresAt + 2 * entries * 8;
    const orderAt = metaAt + 2 * entries * META_INTS * 4;
    const sectionsAt = orderAt + 2 * entries * 4;
    const keysAt = sectionsAt + 2 * MAX_SECTIONS * SECTION_INTS * 4;
    this.scores = [
      new Float64Array(buf, scoresAt, entries),
      new Float64Array(buf, scoresAt + entries * 8, entries),
    ];
    this.meta = [
      new Int32Array(buf, metaAt, entries * META_INTS),
      new Int32Array(buf, metaAt + entries * META_INTS * 4, entries * META_INTS),
    ];
    this.order = [new Int32Array(buf, orderAt, entries), new Int32Array(buf, orderAt + entries * 4, entries)];
    this.sections = [
      new Int32Array(buf, sectionsAt, MAX_SECTIONS * SECTION_INTS),
      new Int32Array(buf, sectionsAt + MAX_SECTIONS * SECTION_INTS * 4, MAX_SECTIONS * SECTION_INTS),
    ];
    this.keys = [Buffer.from(buf, keysAt, keyRegion), Buffer.from(buf, keysAt + keyRegion, keyRegion)];
  }

  /**
   * Writes `entries` (best first) as the next generation's global top, and `extras` for the queues'
   * sections. Only the keeper (worker 0) calls this.
   */
  publish(entries: readonly ReadyEntryInput[], now: number, extras?: ReadyExtras): PublishResult {
    return runToEnd(this.publishSteps(entries, now, extras));
  }

  /** Hands out up to `n` entries from the cursor. May repeat an entry across a publish; never skips the head. */
  take(n: number): ReadyEntry[] {
    return runToEnd(this.takeSteps(n));
  }

  /**
   * Hands out up to `n` entries of one queue (its nameHash) from its section's cursor, best first. The
   * global cursor does not move: the entries of other queues are left for the claims that want them.
   * An empty answer means the section is used up (see `section`) or a publish got in the way.
   */
  takeSection(queue: number, n: number): ReadyEntry[] {
    return runToEnd(this.takeSectionSteps(queue, n));
  }

  snapshot(): ReadySnapshot {
    const h = this.header;
    let slot = 0;
    let count = 0;
    let generation = 0;
    let publishedSec = 0;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      slot = Atomics.load(h, H_ACTIVE);
      const at = SLOT_HEADER[slot]!;
      const seq = Atomics.load(h, at + S_SEQ);
      count = Atomics.load(h, at + S_COUNT);
      generation = Atomics.load(h, at + S_GENERATION);
      publishedSec = Atomics.load(h, at + S_PUBLISHED_AT);
      if ((seq & 1) === 0 && Atomics.load(h, at + S_SEQ) === seq) break;
    }
    const consumed = Math.min(count, Math.max(0, Atomics.load(h, H_CURSOR)));
    return {
      capacity: this.capacity,
      count,
      consumed,
      remaining: count - consumed,
      generation,
      publishedAt: generation === 0 ? null : fromSharedSeconds(publishedSec),
    };
  }

  /** The active set's section of `queue` (a nameHash), or null when the queue has none. */
  section(queue: number): SectionView | null {
    const h = this.header;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const slot = Atomics.load(h, H_ACTIVE);
      const at = SLOT_HEADER[slot]!;
      const seq = Atomics.load(h, at + S_SEQ);
      if ((seq & 1) === 1) continue;
      const generation = Atomics.load(h, at + S_GENERATION);
      const s = this.findSection(slot, Atomics.load(h, at + S_SECTIONS), queue);
      if (s < 0) {
        if (Atomics.load(h, at + S_SEQ) === seq) return null;
        continue;
      }
      const table = pick(this.sections, slot);
      const start = table[s * SECTION_INTS + 1]!;
      const count = table[s * SECTION_INTS + 2]!;
      const complete = (table[s * SECTION_INTS + 3]! & SECTION_COMPLETE) !== 0;
      const word = Atomics.load(h, H_SECTION_CURSORS + s);
      // A cursor not yet reset for this generation has handed out nothing of it.
      const taken = word >>> POS_BITS === tagOf(generation) ? Math.min(count, word & POS_MASK) : 0;
      const headScore =
        taken < count ? pick(this.scores, slot)[pick(this.order, slot)[start + taken]!]! : -Infinity;
      if (Atomics.load(h, at + S_SEQ) !== seq) continue;
      return { count, taken, remaining: count - taken, complete, headScore };
    }
    return null;
  }

  private queueHash(route: string): number {
    let h = this.queueHashes.get(route);
    if (h === undefined) {
      h = nameHash(route);
      if (this.queueHashes.size < 10_000) this.queueHashes.set(route, h);
    }
    return h;
  }

  /** The raw shared cursor (for the overview and for tests that check it never runs away). */
  cursorPosition(): number {
    return Atomics.load(this.header, H_CURSOR);
  }

  /**
   * publish() as resumable steps. Production code calls publish(); tests drive this to interleave a
   * publish with takes step by step.
   */
  *publishSteps(
    entries: readonly ReadyEntryInput[],
    now: number,
    extras?: ReadyExtras,
  ): Generator<PublishStep, PublishResult, void> {
    const h = this.header;
    const nowSec = sharedSecondsAtOrBefore(now);
    const slot = 1 - Atomics.load(h, H_ACTIVE);
    const at = SLOT_HEADER[slot]!;
    const lock = acquireSlot(h, at, nowSec);
    const busy = (): PublishResult => ({
      published: 0,
      extras: 0,
      sections: 0,
      generation: this.activeGeneration(),
      busy: true,
    });
    if (lock < 0) return busy();
    yield 'acquired';

    const limit = Math.min(entries.length, this.capacity);
    const count = this.writeEntries(slot, entries, 0, limit, 0, this.keyBytesPerSlot, lock, null);
    if (count < 0) return busy();
    // Queues with a row of the global top left unpublished (the key region ran out) get no extras: a
    // section stays a prefix of its queue's order, as the global top is of the keeper's.
    const cut = new Set<number>();
    for (let i = count; i < entries.length; i++) cut.add(this.queueOf(entries[i]!));
    const extraCount =
      extras === undefined
        ? 0
        : this.writeEntries(
            slot,
            extras.entries,
            this.capacity,
            this.extraCapacity,
            this.keyBytesPerSlot,
            this.extraKeyBytes,
            lock,
            cut,
          );
    if (extraCount < 0) return busy();
    const complete = new Set<number>();
    if (extras !== undefined)
      for (const q of extras.complete) if (!cut.has(this.queueHash(q))) complete.add(this.queueHash(q));
    const sectionCount = this.writeSections(slot, count, extraCount, complete);
    yield 'written';

    if (Atomics.load(h, at + S_SEQ) !== lock) return busy();
    const generation = (Atomics.add(h, H_GENERATION, 1) + 1) | 0;
    Atomics.store(h, at + S_COUNT, count);
    Atomics.store(h, at + S_EXTRAS, extraCount);
    Atomics.store(h, at + S_SECTIONS, sectionCount);
    Atomics.store(h, at + S_GENERATION, generation);
    Atomics.store(h, at + S_PUBLISHED_AT, nowSec);
    // Flip while still holding the slot: a reader landing between flip and release sees an odd counter
    // and retries rather than trusting a slot whose write it cannot vouch for.
    Atomics.store(h, H_ACTIVE, slot);
    yield 'flipped';
    if (Atomics.compareExchange(h, at + S_SEQ, lock, lock + 1) !== lock) return busy();
    yield 'released';
    // The cursor resets only AFTER the flip. A take reserves its positions first and reads the active
    // slot second, so a take that straddles this publish either reserved before the reset (its positions
    // are re-issued from 0: it may repeat an entry, which the lease refuses) or after it (it reads the
    // new slot from the head). Resetting before the flip would let a take reserve position 0 and then
    // read the OLD slot, and the new head would never be handed out.
    Atomics.store(h, H_CURSOR, 0);
    // Every section cursor moves to this generation's tag at position 0 (a take may already have done
    // it). Section takes CAS against the tag they read, so no reset can skip or re-issue a position.
    const tag = tagOf(generation);
    for (let s = 0; s < MAX_SECTIONS; s++) resetCursor(h, H_SECTION_CURSORS + s, tag);
    return { published: count, extras: extraCount, sections: sectionCount, generation, busy: false };
  }

  /**
   * Writes `list` into the slot at positions from..from+limit, keys from `keysFrom` within `keyBytes`.
   * Without `cut` (the global top) it stops at the first key that does not fit; with it, such a key
   * ends its queue's run (its queue joins `cut`) and later queues go on. Returns the count written,
   * or -1 when the slot was taken over by another writer.
   */
  private writeEntries(
    slot: number,
    list: readonly ReadyEntryInput[],
    from: number,
    limit: number,
    keysFrom: number,
    keyBytes: number,
    lock: number,
    cut: Set<number> | null,
  ): number {
    const h = this.header;
    const seqAt = SLOT_HEADER[slot]! + S_SEQ;
    const scores = pick(this.scores, slot);
    const meta = pick(this.meta, slot);
    const keys = pick(this.keys, slot);
    let used = 0;
    let count = 0;
    for (let i = 0; i < list.length && count < limit; i++) {
      // A writer that stalled past WRITER_STALL_SEC was replaced; it must stop writing the moment it notices.
      if (Atomics.load(h, seqAt) !== lock) return -1;
      const e = list[i]!;
      const queue = this.queueOf(e);
      if (cut !== null && cut.has(queue)) continue;
      const length = Buffer.byteLength(e.key, 'utf8');
      // A key is never truncated or skipped: the global top ends at the first key that does not fit, so
      // the set stays a prefix of the keeper's order; an extra that does not fit ends its queue's run.
      if (length > MAX_KEY_BYTES || used + length > keyBytes) {
        if (cut === null) break;
        cut.add(queue);
        continue;
      }
      // Byte length equal to string length means pure ASCII, which latin1 copies without UTF-8 encoding
      // (~25% faster on 5,000 URL-sized keys) and which reads back identically as UTF-8.
      keys.write(e.key, keysFrom + used, length, length === e.key.length ? 'latin1' : 'utf8');
      const p = from + count;
      scores[p] = e.score;
      const m = p * META_INTS;
      meta[m] = Number.isFinite(e.dueMs) ? sharedSecondsAtOrBefore(e.dueMs) : DUE_UNKNOWN;
      meta[m + 1] = keysFrom + used;
      meta[m + 2] = length | flagsOf(e);
      meta[m + 3] = queue;
      used += length;
      count++;
    }
    return count;
  }

  /**
   * Groups the written entries by queue into the slot's section table (sorted by queue hash, so a take
   * finds its section by binary search) and index lists (global entries first, in order, then extras).
   * Entries of no queue (hash 0) get no section; queues past MAX_SECTIONS neither (config allows fewer).
   */
  private writeSections(slot: number, count: number, extraCount: number, complete: Set<number>): number {
    const meta = pick(this.meta, slot);
    const order = pick(this.order, slot);
    const table = pick(this.sections, slot);
    const sizes = new Map<number, number>();
    const positions = (visit: (p: number) => void) => {
      for (let p = 0; p < count; p++) visit(p);
      for (let p = this.capacity; p < this.capacity + extraCount; p++) visit(p);
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

  private queueOf(e: ReadyEntryInput): number {
    return e.route === undefined ? 0 : this.queueHash(e.route);
  }

  /** Index of `queue`'s section in the slot's table (binary search by hash), or -1. */
  private findSection(slot: number, sectionCount: number, queue: number): number {
    const table = pick(this.sections, slot);
    let lo = 0;
    let hi = Math.min(Math.max(0, sectionCount), MAX_SECTIONS);
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const q = table[mid * SECTION_INTS]!;
      if (q === queue) return mid;
      if (q < queue) lo = mid + 1;
      else hi = mid;
    }
    return -1;
  }

  /**
   * Reserves up to `wanted` positions of section `s` for `generation`. Returns [from, to), or null when
   * the cursor already belongs to a newer generation (the slot read is superseded).
   */
  private reserveInSection(
    s: number,
    generation: number,
    count: number,
    wanted: number,
  ): [number, number] | null {
    const h = this.header;
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

  /** takeSection() as resumable steps; see publishSteps. */
  *takeSectionSteps(queue: number, n: number): Generator<TakeStep, ReadyEntry[], void> {
    const wanted = Math.floor(n);
    if (!(wanted >= 1)) return [];
    const h = this.header;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const slot = Atomics.load(h, H_ACTIVE);
      const at = SLOT_HEADER[slot]!;
      const seq = Atomics.load(h, at + S_SEQ);
      if ((seq & 1) === 1) {
        yield 'retry';
        continue;
      }
      const generation = Atomics.load(h, at + S_GENERATION);
      const s = this.findSection(slot, Atomics.load(h, at + S_SECTIONS), queue);
      yield 'slotRead';
      if (s < 0) {
        if (Atomics.load(h, at + S_SEQ) === seq) return [];
        yield 'retry';
        continue;
      }
      const table = pick(this.sections, slot);
      const start = table[s * SECTION_INTS + 1]!;
      const count = table[s * SECTION_INTS + 2]!;
      // Positions are reserved against the generation read: a cursor of a newer set refuses, so a take
      // never spends a newer set's head on the rows of an older one.
      const range =
        Atomics.load(h, at + S_SEQ) === seq ? this.reserveInSection(s, generation, count, wanted) : null;
      if (range === null) {
        yield 'retry';
        continue;
      }
      yield 'reserved';
      const order = pick(this.order, slot);
      const out: ReadyEntry[] = [];
      let torn = false;
      for (let i = range[0]; i < range[1] && !torn; i++) {
        const entry = this.readEntry(slot, order[start + i]!, generation);
        if (entry) out.push(entry);
        else torn = true;
      }
      yield 'entriesRead';
      // The slot was rewritten while we copied: the positions reserved belonged to a superseded set.
      if (torn || Atomics.load(h, at + S_SEQ) !== seq) {
        yield 'retry';
        continue;
      }
      return out;
    }
    return [];
  }

  /** take() as resumable steps; see publishSteps. */
  *takeSteps(n: number): Generator<TakeStep, ReadyEntry[], void> {
    const wanted = Math.floor(n);
    if (!(wanted >= 1)) return [];
    const h = this.header;
    // Reserve BEFORE looking at the active slot: a take that read the slot first could be overtaken by a
    // whole publish, then reserve the new set's head and serve it from the old slot — a skipped head.
    const start = Atomics.add(h, H_CURSOR, wanted);
    yield 'reserved';
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const slot = Atomics.load(h, H_ACTIVE);
      const at = SLOT_HEADER[slot]!;
      const seq = Atomics.load(h, at + S_SEQ);
      if ((seq & 1) === 1) {
        yield 'retry';
        continue;
      }
      const count = Atomics.load(h, at + S_COUNT);
      const generation = Atomics.load(h, at + S_GENERATION);
      yield 'slotRead';
      const out: ReadyEntry[] = [];
      const end = start < 0 ? start : Math.min(start + wanted, count);
      let torn = false;
      for (let i = start; i < end && !torn; i++) {
        const entry = this.readEntry(slot, i, generation);
        if (entry) out.push(entry);
        else torn = true;
      }
      yield 'entriesRead';
      // Seqlock check: if a later publish rewrote this slot while we copied, what we hold may mix two
      // generations, so it is dropped and re-read from whatever is active now.
      if (torn || Atomics.load(h, at + S_SEQ) !== seq) {
        yield 'retry';
        continue;
      }
      if (start < 0 || start + wanted > count) {
        yield 'clamping';
        this.clampCursor(count, slot, generation);
      }
      return out;
    }
    return [];
  }

  private readEntry(slot: number, i: number, generation: number): ReadyEntry | null {
    const meta = pick(this.meta, slot);
    const m = i * META_INTS;
    const due = meta[m]!;
    const offset = meta[m + 1]!;
    const lengthFlags = meta[m + 2]!;
    const length = lengthFlags & MAX_KEY_BYTES;
    if (offset < 0 || offset + length > this.keyBytesPerSlot + this.extraKeyBytes) return null; // torn; the seq check will agree
    return {
      key: pick(this.keys, slot).toString('utf8', offset, offset + length),
      score: pick(this.scores, slot)[i]!,
      dueMs: due === DUE_UNKNOWN ? NaN : fromSharedSeconds(due),
      fromSitemap: (lengthFlags & FLAG_SITEMAP) !== 0,
      verified: (lengthFlags & FLAG_VERIFIED) !== 0,
      mark: lengthFlags & FLAG_URGENT ? 'urgent' : lengthFlags & FLAG_CHANGED ? 'changed' : 'none',
      generation,
      queue: meta[m + 3]!,
    };
  }

  /**
   * Pulls a cursor that ran past the end back to the end, so takes on an exhausted set cannot push it
   * towards Int32 overflow. It only ever LOWERS the cursor, so a clamp that races a publish can cause a
   * repeat but never a skip; it still steps aside when it sees a newer set.
   */
  private clampCursor(count: number, slot: number, generation: number): void {
    const h = this.header;
    for (let attempt = 0; attempt < CLAMP_ATTEMPTS; attempt++) {
      const cursor = Atomics.load(h, H_CURSOR);
      if (cursor >= 0 && cursor <= count) return;
      if (
        Atomics.load(h, H_ACTIVE) !== slot ||
        Atomics.load(h, SLOT_HEADER[slot]! + S_GENERATION) !== generation
      )
        return;
      if (Atomics.compareExchange(h, H_CURSOR, cursor, count) === cursor) return;
    }
  }

  private activeGeneration(): number {
    return Atomics.load(this.header, SLOT_HEADER[Atomics.load(this.header, H_ACTIVE)]! + S_GENERATION);
  }
}

/** One of a slot pair by slot number (0 or 1), typed without an index that could miss. */
function pick<T>(pair: readonly [T, T], slot: number): T {
  return slot === 0 ? pair[0] : pair[1];
}

/** Moves a section cursor to `tag` at position 0 unless it is there already (a take may have helped). */
function resetCursor(h: Int32Array, at: number, tag: number): void {
  for (;;) {
    const word = Atomics.load(h, at);
    if (word >>> POS_BITS === tag) return;
    if (Atomics.compareExchange(h, at, word, cursorWord(tag, 0)) === word) return;
  }
}

function flagsOf(e: ReadyEntryInput): number {
  return (
    (e.fromSitemap ? FLAG_SITEMAP : 0) |
    (e.verified ? FLAG_VERIFIED : 0) |
    (e.mark === 'urgent' ? FLAG_URGENT : e.mark === 'changed' ? FLAG_CHANGED : 0)
  );
}

/**
 * Takes the write side of a slot: even → odd by CAS. An odd counter whose writer has been silent for
 * WRITER_STALL_SEC is taken over (odd → odd + 2), which the old writer notices on its next check.
 * Returns the odd counter value this writer owns, or -1 when another writer holds the slot.
 */
function acquireSlot(h: Int32Array, at: number, nowSec: number): number {
  const seq = Atomics.load(h, at + S_SEQ);
  const stalled = (seq & 1) === 1 && nowSec - Atomics.load(h, at + S_WRITER_SINCE) >= WRITER_STALL_SEC;
  if ((seq & 1) === 1 && !stalled) return -1;
  const mine = (seq + (stalled ? 2 : 1)) | 0;
  if (Atomics.compareExchange(h, at + S_SEQ, seq, mine) !== seq) return -1;
  Atomics.store(h, at + S_WRITER_SINCE, nowSec);
  return mine;
}

/** The first instance over a blank buffer records its layout; a later one with another layout is refused. */
function claimLayout(h: Int32Array, capacity: number, keyBytesPerSlot: number): void {
  const magic = Atomics.compareExchange(h, H_MAGIC, 0, MAGIC);
  if (magic !== 0 && magic !== MAGIC)
    throw new Error('shared buffer holds another structure, not a ready set');
  const cap = Atomics.compareExchange(h, H_CAPACITY, 0, capacity);
  const keyBytes = Atomics.compareExchange(h, H_KEY_BYTES, 0, keyBytesPerSlot);
  if ((cap !== 0 && cap !== capacity) || (keyBytes !== 0 && keyBytes !== keyBytesPerSlot))
    throw new Error(
      `ready set was laid out for capacity ${cap || capacity} / ${keyBytes || keyBytesPerSlot} key bytes; ` +
        `asked for ${capacity} / ${keyBytesPerSlot} (use ReadySet.storedLayout)`,
    );
}
