// The ready set: worker 0 publishes the best due rows into a shared buffer; every worker takes from it
// with one atomic add and no lock. Two slots flip so a publish never writes the slot readers are using.
// This file holds the publish and the global take (entries 0..count, the only part an unscoped take
// reads); the per-queue sections a scoped claim takes from are in util/handoff/readySections.ts, and
// the byte layout (RDY3), the entry codec and the seqlock slot read both use in
// util/handoff/readyLayout.ts.
import { Buffer } from 'node:buffer';
import { nameHash } from '../leases/token.js';
import { fromSharedSeconds, sharedSecondsAtOrBefore } from '../time.js';
import {
  DUE_UNKNOWN,
  H_ACTIVE,
  H_CURSOR,
  H_GENERATION,
  MAX_KEY_BYTES,
  META_INTS,
  READ_ATTEMPTS,
  ReadyBuffer,
  type ReadyEntry,
  type ReadyEntryInput,
  RETRY,
  SLOT_HEADER,
  S_COUNT,
  S_EXTRAS,
  S_GENERATION,
  S_PUBLISHED_AT,
  S_SECTIONS,
  S_SEQ,
  type SlotRead,
  type TakeStep,
  acquireSlot,
  flagsOf,
  pick,
  readActiveSlot,
  unchanged,
} from './readyLayout.js';
import { ReadySections, type ReadyExtras, type SectionView } from './readySections.js';
import { runToEnd } from './steps.js';

export {
  MAX_SECTIONS,
  MIN_KEY_BYTES_PER_SLOT,
  extraCapacityFor,
  type ReadyEntry,
  type ReadyEntryInput,
  type ReadyMark,
  type TakeStep,
} from './readyLayout.js';
export type { ReadyExtras, SectionView } from './readySections.js';

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

/** Step names of the interleavable publish; tests pause between them. */
export type PublishStep = 'acquired' | 'written' | 'flipped' | 'released';

const CLAMP_ATTEMPTS = 4;

export class ReadySet {
  readonly capacity: number;
  readonly keyBytesPerSlot: number;
  /** Extra rows a slot holds for the sections, past the global top. */
  readonly extraCapacity: number;
  private readonly buf: ReadyBuffer;
  private readonly sections: ReadySections;
  /** Queue name → nameHash, for the publisher (routes are few). */
  private readonly queueHashes = new Map<string, number>();

  static byteLength(capacity: number, keyBytesPerSlot: number): number {
    return ReadyBuffer.byteLength(capacity, keyBytesPerSlot);
  }

  /** The capacity and key region a buffer was first laid out with, or null if it is still blank. */
  static storedLayout(buf: ArrayBuffer): { capacity: number; keyBytesPerSlot: number } | null {
    return ReadyBuffer.storedLayout(buf);
  }

  constructor(buf: ArrayBuffer, capacity: number, keyBytesPerSlot: number) {
    this.buf = new ReadyBuffer(buf, capacity, keyBytesPerSlot);
    this.sections = new ReadySections(this.buf);
    this.capacity = capacity;
    this.keyBytesPerSlot = keyBytesPerSlot;
    this.extraCapacity = this.buf.extraCapacity;
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
    return runToEnd(this.sections.takeSteps(queue, n));
  }

  /** takeSection() as resumable steps; see publishSteps. */
  takeSectionSteps(queue: number, n: number): Generator<TakeStep, ReadyEntry[], void> {
    return this.sections.takeSteps(queue, n);
  }

  /** The active set's section of `queue` (a nameHash), or null when the queue has none. */
  section(queue: number): SectionView | null {
    return this.sections.view(queue);
  }

  snapshot(): ReadySnapshot {
    const h = this.buf.header;
    let count = 0;
    let generation = 0;
    let publishedSec = 0;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const at = SLOT_HEADER[Atomics.load(h, H_ACTIVE)]!;
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

  private queueHash(route: string): number {
    let h = this.queueHashes.get(route);
    if (h === undefined) {
      h = nameHash(route);
      if (this.queueHashes.size < 10_000) this.queueHashes.set(route, h);
    }
    return h;
  }

  private queueOf(e: ReadyEntryInput): number {
    return e.route === undefined ? 0 : this.queueHash(e.route);
  }

  /** The raw shared cursor (for the overview and for tests that check it never runs away). */
  cursorPosition(): number {
    return Atomics.load(this.buf.header, H_CURSOR);
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
    const h = this.buf.header;
    const nowSec = sharedSecondsAtOrBefore(now);
    const slot = 1 - Atomics.load(h, H_ACTIVE);
    const at = SLOT_HEADER[slot]!;
    const lock = acquireSlot(h, at, nowSec);
    const busy = (): PublishResult => ({
      published: 0,
      extras: 0,
      sections: 0,
      generation: this.buf.activeGeneration(),
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
            this.buf.extraKeyBytes,
            lock,
            cut,
          );
    if (extraCount < 0) return busy();
    const complete = new Set<number>();
    if (extras !== undefined)
      for (const q of extras.complete) if (!cut.has(this.queueHash(q))) complete.add(this.queueHash(q));
    const sectionCount = this.sections.write(slot, count, extraCount, complete);
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
    // Every section cursor moves to this generation's tag at position 0 (a take may already have done it).
    this.sections.resetCursors(generation);
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
    const h = this.buf.header;
    const seqAt = SLOT_HEADER[slot]! + S_SEQ;
    const scores = pick(this.buf.scores, slot);
    const meta = pick(this.buf.meta, slot);
    const keys = pick(this.buf.keys, slot);
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

  /** take() as resumable steps; see publishSteps. */
  *takeSteps(n: number): Generator<TakeStep, ReadyEntry[], void> {
    const wanted = Math.floor(n);
    if (!(wanted >= 1)) return [];
    // Reserve BEFORE looking at the active slot: a take that read the slot first could be overtaken by a
    // whole publish, then reserve the new set's head and serve it from the old slot — a skipped head.
    const start = Atomics.add(this.buf.header, H_CURSOR, wanted);
    yield 'reserved';
    const out = yield* readActiveSlot(this.buf.header, (read) => this.takeAttempt(read, start, wanted));
    return out ?? [];
  }

  private *takeAttempt(
    read: SlotRead,
    start: number,
    wanted: number,
  ): Generator<TakeStep, ReadyEntry[] | typeof RETRY, void> {
    const count = Atomics.load(this.buf.header, read.at + S_COUNT);
    yield 'slotRead';
    const out = this.buf.readEntries(
      read,
      start,
      start < 0 ? start : Math.min(start + wanted, count),
      (i) => i,
    );
    yield 'entriesRead';
    // Seqlock check: if a later publish rewrote this slot while we copied, what we hold may mix two
    // generations, so it is dropped and re-read from whatever is active now.
    if (out === null || !unchanged(this.buf.header, read)) return RETRY;
    if (start < 0 || start + wanted > count) {
      yield 'clamping';
      this.clampCursor(count, read);
    }
    return out;
  }

  /**
   * Pulls a cursor that ran past the end back to the end, so takes on an exhausted set cannot push it
   * towards Int32 overflow. It only ever LOWERS the cursor, so a clamp that races a publish can cause a
   * repeat but never a skip; it still steps aside when it sees a newer set.
   */
  private clampCursor(count: number, read: SlotRead): void {
    const h = this.buf.header;
    for (let attempt = 0; attempt < CLAMP_ATTEMPTS; attempt++) {
      const cursor = Atomics.load(h, H_CURSOR);
      if (cursor >= 0 && cursor <= count) return;
      if (
        Atomics.load(h, H_ACTIVE) !== read.slot ||
        Atomics.load(h, read.at + S_GENERATION) !== read.generation
      )
        return;
      if (Atomics.compareExchange(h, H_CURSOR, cursor, count) === cursor) return;
    }
  }
}
