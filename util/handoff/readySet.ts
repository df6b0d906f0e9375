// The ready set: worker 0 publishes the best due rows into a shared buffer; every worker takes from it
// with one atomic add and no lock. Two slots flip so a publish never writes the slot readers are using.
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

export interface PublishResult {
  /** Entries written: stops at capacity or at the first key that does not fit in the key region. */
  published: number;
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

const MAGIC = 0x52445932; // 'RDY2': a dev reload with another layout must not reinterpret the bytes
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
const HEADER_INTS = 48;
const HEADER_BYTES = HEADER_INTS * 4;
const META_INTS = 4; // due seconds, key offset, key length | flags, queue hash

export class ReadySet {
  readonly capacity: number;
  readonly keyBytesPerSlot: number;
  private readonly header: Int32Array;
  private readonly scores: [Float64Array, Float64Array];
  private readonly meta: [Int32Array, Int32Array];
  private readonly keys: [Buffer, Buffer];
  /** Queue name → nameHash, for the publisher (routes are few). */
  private readonly queueHashes = new Map<string, number>();

  static byteLength(capacity: number, keyBytesPerSlot: number): number {
    const raw = HEADER_BYTES + 2 * capacity * (8 + META_INTS * 4) + 2 * keyBytesPerSlot;
    return Math.ceil(raw / 8) * 8;
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
      keyBytesPerSlot > INT32_MAX
    )
      throw new RangeError(
        `ready set key region must be at least ${MIN_KEY_BYTES_PER_SLOT} bytes, got ${keyBytesPerSlot}`,
      );
    const need = ReadySet.byteLength(capacity, keyBytesPerSlot);
    if (buf.byteLength < need)
      throw new RangeError(
        `ready set needs ${need} bytes; the shared buffer has ${buf.byteLength} (sized by an earlier caller?)`,
      );
    this.capacity = capacity;
    this.keyBytesPerSlot = keyBytesPerSlot;
    this.header = new Int32Array(buf, 0, HEADER_INTS);
    claimLayout(this.header, capacity, keyBytesPerSlot);
    const scoresAt = HEADER_BYTES;
    const metaAt = scoresAt + 2 * capacity * 8;
    const keysAt = metaAt + 2 * capacity * META_INTS * 4;
    this.scores = [
      new Float64Array(buf, scoresAt, capacity),
      new Float64Array(buf, scoresAt + capacity * 8, capacity),
    ];
    this.meta = [
      new Int32Array(buf, metaAt, capacity * META_INTS),
      new Int32Array(buf, metaAt + capacity * META_INTS * 4, capacity * META_INTS),
    ];
    this.keys = [
      Buffer.from(buf, keysAt, keyBytesPerSlot),
      Buffer.from(buf, keysAt + keyBytesPerSlot, keyBytesPerSlot),
    ];
  }

  /** Writes `entries` (best first) as the next generation. Only the keeper (worker 0) calls this. */
  publish(entries: readonly ReadyEntryInput[], now: number): PublishResult {
    return runToEnd(this.publishSteps(entries, now));
  }

  /** Hands out up to `n` entries from the cursor. May repeat an entry across a publish; never skips the head. */
  take(n: number): ReadyEntry[] {
    return runToEnd(this.takeSteps(n));
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

  /**
   * Reads the active set from the cursor to its end without taking anything, handing `visit` each entry
   * whose queue `accept`s (read from the entry's meta: no key is decoded for the others) until `visit`
   * returns true. A scoped claim uses it so entries of other queues are left for the claims that want
   * them. Nothing is reserved: the lease table decides who gets an entry, and an entry read across a
   * publish is re-checked against its row like every other. Returns how many entries were looked at.
   */
  scan(accept: (queue: number) => boolean, visit: (entry: ReadyEntry) => boolean): number {
    const h = this.header;
    const slot = Atomics.load(h, H_ACTIVE);
    const at = SLOT_HEADER[slot]!;
    const seq = Atomics.load(h, at + S_SEQ);
    if ((seq & 1) === 1) return 0;
    const count = Atomics.load(h, at + S_COUNT);
    const generation = Atomics.load(h, at + S_GENERATION);
    const meta = pick(this.meta, slot);
    let i = Math.max(0, Math.min(count, Atomics.load(h, H_CURSOR)));
    let looked = 0;
    for (; i < count; i++) {
      looked++;
      if (!accept(meta[i * META_INTS + 3]!)) continue;
      const entry = this.readEntry(slot, i, generation);
      if (entry === null || Atomics.load(h, at + S_SEQ) !== seq) break; // rewritten: a newer set is out
      if (visit(entry)) break;
    }
    return looked;
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
  ): Generator<PublishStep, PublishResult, void> {
    const h = this.header;
    const nowSec = sharedSecondsAtOrBefore(now);
    const slot = 1 - Atomics.load(h, H_ACTIVE);
    const at = SLOT_HEADER[slot]!;
    const lock = acquireSlot(h, at, nowSec);
    const busy = (): PublishResult => ({ published: 0, generation: this.activeGeneration(), busy: true });
    if (lock < 0) return busy();
    yield 'acquired';

    const scores = pick(this.scores, slot);
    const meta = pick(this.meta, slot);
    const keys = pick(this.keys, slot);
    const limit = Math.min(entries.length, this.capacity);
    let used = 0;
    let count = 0;
    for (; count < limit; count++) {
      // A writer that stalled past WRITER_STALL_SEC was replaced; it must stop writing the moment it notices.
      if (Atomics.load(h, at + S_SEQ) !== lock) return busy();
      const e = entries[count]!;
      const length = Buffer.byteLength(e.key, 'utf8');
      // The generation ends at the first key that does not fit: a key is never truncated or skipped,
      // so the set stays a prefix of the keeper's order.
      if (length > MAX_KEY_BYTES || used + length > this.keyBytesPerSlot) break;
      // Byte length equal to string length means pure ASCII, which latin1 copies without UTF-8 encoding
      // (~25% faster on 5,000 URL-sized keys) and which reads back identically as UTF-8.
      keys.write(e.key, used, length, length === e.key.length ? 'latin1' : 'utf8');
      scores[count] = e.score;
      const m = count * META_INTS;
      meta[m] = Number.isFinite(e.dueMs) ? sharedSecondsAtOrBefore(e.dueMs) : DUE_UNKNOWN;
      meta[m + 1] = used;
      meta[m + 2] = length | flagsOf(e);
      meta[m + 3] = e.route === undefined ? 0 : this.queueHash(e.route);
      used += length;
    }
    yield 'written';

    if (Atomics.load(h, at + S_SEQ) !== lock) return busy();
    const generation = (Atomics.add(h, H_GENERATION, 1) + 1) | 0;
    Atomics.store(h, at + S_COUNT, count);
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
    return { published: count, generation, busy: false };
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
    if (offset < 0 || offset + length > this.keyBytesPerSlot) return null; // torn; the seq check will agree
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
