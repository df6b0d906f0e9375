// The ready set: worker 0 publishes the best due rows into a shared buffer; every worker takes from it
// with one atomic add and no lock. Two slots flip so a publish never writes the slot readers are using.
// This file holds the publish (slot, flip, stage) and the global take (entries 0..count, the only part
// an unscoped take reads). The row-by-row write of a slot is util/sharedMemory/slotWriter.ts; the
// per-queue sections a scoped claim takes from are in util/sharedMemory/readySections.ts, and the byte
// layout (RDY3), the entry codec and the seqlock slot read all three use in
// util/sharedMemory/readyLayout.ts.
import { nameHash } from '../leases/token.js';
import { fromSharedSeconds, sharedSecondsAtOrBefore } from '../time.js';
import {
  H_ACTIVE,
  H_CURSOR,
  H_GENERATION,
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
  readActiveSlot,
  unchanged,
} from './readyLayout.js';
import { ReadySections, type ReadyExtras, type SectionView } from './readySections.js';
import { SlotWriter, type ReadyWriter } from './slotWriter.js';
import { runToEnd } from './steps.js';

export {
  flagBits,
  MAX_SECTIONS,
  MIN_KEY_BYTES_PER_SLOT,
  extraCapacityFor,
  type ReadyEntry,
  type ReadyEntryInput,
  type ReadyMark,
  type TakeStep,
} from './readyLayout.js';
export type { ReadyExtras, SectionView } from './readySections.js';
export type { ReadyWriter } from './slotWriter.js';

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

/**
 * A publish written ahead into the inactive slot (stageWith), which holds that slot's write side until
 * it is flipped active or let go. Takes keep reading the active set meanwhile. The holder must end it:
 * another publish meets a held slot as busy (and after WRITER_STALL_SEC may take it over, which the
 * flip then answers as busy).
 */
export interface StagedSlot {
  /** Makes the staged slot the active set, stamped `now`; busy when the slot was taken over. */
  flip(now: number): PublishResult;
  /** Lets the slot go unpublished; the active set stays as it is. */
  abandon(): void;
}

const CLAMP_ATTEMPTS = 4;

/** What a staged publish keeps of its slot: the counter it holds and the flip's clock. */
interface StageHold {
  seqAt: number;
  lock: number;
  flipAt: number | undefined;
}

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

  /**
   * The active set's global top from position `from` (0 is the best) to `to`, without taking anything:
   * no cursor moves, so claims are not affected (the rows view lists due rows by it). Null when every
   * read was overtaken by a publish.
   */
  peek(from: number, to: number): { generation: number; entries: ReadyEntry[] } | null {
    return runToEnd(readActiveSlot(this.buf.header, (read) => this.peekAttempt(read, from, to)));
  }

  // A generator only to share readActiveSlot's retry loop with the takes; it has no step of its own.
  private *peekAttempt(
    read: SlotRead,
    from: number,
    to: number,
  ): Generator<TakeStep, { generation: number; entries: ReadyEntry[] } | typeof RETRY, void> {
    const count = Atomics.load(this.buf.header, read.at + S_COUNT);
    const out = this.buf.readEntries(read, Math.max(0, from), Math.min(to, count), (i) => i);
    if (out === null || !unchanged(this.buf.header, read)) return RETRY;
    return { generation: read.generation, entries: out };
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

  /** The raw shared cursor (for the overview and for tests that check it never runs away). */
  cursorPosition(): number {
    return Atomics.load(this.buf.header, H_CURSOR);
  }

  /**
   * publish() without the entry arrays: `fill` hands the rows to the writer (the global top first,
   * then the extras) and returns the queues whose section is complete. `fill` always runs, also when
   * another writer holds the slot (then nothing is written and the result says busy).
   */
  publishWith(now: number, fill: (w: ReadyWriter) => Iterable<string>): PublishResult {
    return runToEnd(this.publishFilled(now, fill));
  }

  /**
   * publishWith() up to the flip: `fill` writes the inactive slot now, and the returned StagedSlot makes
   * it active later in one step (a few atomic stores), or lets it go. Null when another writer holds the
   * slot (`fill` still runs, writing nothing) or took it over meanwhile.
   */
  stageWith(now: number, fill: (w: ReadyWriter) => Iterable<string>): StagedSlot | null {
    const held: StageHold = { seqAt: -1, lock: 0, flipAt: undefined };
    const steps = this.publishFilled(now, fill, held);
    if (steps.next().done === true || steps.next().done === true) return null;
    const h = this.buf.header;
    let open = true;
    return {
      flip: (flipNow) => {
        if (!open) return this.busyResult();
        open = false;
        held.flipAt = flipNow;
        return runToEnd(steps);
      },
      abandon: () => {
        if (!open) return;
        open = false;
        // Back to even without a flip. Its header still counted the slot's older generation over what the
        // stage wrote, so it is emptied first: a reader that loaded the active-slot index before that
        // generation was replaced, and the counter only now, then finds nothing rather than a mix.
        const at = held.seqAt - S_SEQ;
        if (Atomics.load(h, held.seqAt) === held.lock) {
          Atomics.store(h, at + S_COUNT, 0);
          Atomics.store(h, at + S_EXTRAS, 0);
          Atomics.store(h, at + S_SECTIONS, 0);
        }
        Atomics.compareExchange(h, held.seqAt, held.lock, (held.lock + 1) | 0);
      },
    };
  }

  /**
   * publish() as resumable steps. Production code calls publish(); tests drive this to interleave a
   * publish with takes step by step.
   */
  publishSteps(
    entries: readonly ReadyEntryInput[],
    now: number,
    extras?: ReadyExtras,
  ): Generator<PublishStep, PublishResult, void> {
    return this.publishFilled(now, (w) => {
      for (const e of entries) w.top(e.key, e.score, e.dueMs, flagsOf(e), e.route);
      if (extras === undefined) return [];
      for (const e of extras.entries) w.extra(e.key, e.score, e.dueMs, flagsOf(e), e.route);
      return extras.complete;
    });
  }

  private busyResult(): PublishResult {
    return { published: 0, extras: 0, sections: 0, generation: this.buf.activeGeneration(), busy: true };
  }

  /**
   * The publish's steps. `held` (a staged publish) learns the slot's counter once written,
   * and the set is stamped with its `flipAt` when set by the time the flip runs, instead of `now`.
   */
  private *publishFilled(
    now: number,
    fill: (w: ReadyWriter) => Iterable<string>,
    held?: StageHold,
  ): Generator<PublishStep, PublishResult, void> {
    const h = this.buf.header;
    const nowSec = sharedSecondsAtOrBefore(now);
    const slot = 1 - Atomics.load(h, H_ACTIVE);
    const at = SLOT_HEADER[slot]!;
    const lock = acquireSlot(h, at, nowSec);
    const busy = (): PublishResult => this.busyResult();
    const writer = new SlotWriter(this.buf, (route) => this.queueHash(route), slot, lock);
    if (lock < 0) {
      fill(writer); // writes nothing: the caller's walk still runs, as it does for a publish that lands
      return busy();
    }
    yield 'acquired';

    let completeQueues: Iterable<string>;
    try {
      completeQueues = fill(writer);
    } catch (e) {
      // A fill that throws (the keeper's walk) must not leave the slot held until the stall limit.
      Atomics.compareExchange(h, at + S_SEQ, lock, (lock + 1) | 0);
      throw e;
    }
    if (writer.lost) return busy();
    const { count, extraCount, cut } = writer;
    const complete = new Set<number>();
    for (const q of completeQueues) if (!cut.has(this.queueHash(q))) complete.add(this.queueHash(q));
    const sectionCount = this.sections.write(slot, count, extraCount, complete);
    if (held !== undefined) {
      held.seqAt = at + S_SEQ;
      held.lock = lock;
    }
    yield 'written';
    const flipAt = held?.flipAt;
    const stampSec = flipAt === undefined ? nowSec : sharedSecondsAtOrBefore(flipAt);

    if (Atomics.load(h, at + S_SEQ) !== lock) return busy();
    const generation = (Atomics.add(h, H_GENERATION, 1) + 1) | 0;
    Atomics.store(h, at + S_COUNT, count);
    Atomics.store(h, at + S_EXTRAS, extraCount);
    Atomics.store(h, at + S_SECTIONS, sectionCount);
    Atomics.store(h, at + S_GENERATION, generation);
    Atomics.store(h, at + S_PUBLISHED_AT, stampSec);
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
