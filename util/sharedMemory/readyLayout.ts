// The ready set's shared memory: the byte layout both the global set (util/sharedMemory/readySet.ts) and
// the per-queue sections (util/sharedMemory/readySections.ts) read and write, the entry codec, the slot
// writer's lock and the seqlock read of the active slot that every take goes through.
//
// The buffer is an ordinary ArrayBuffer shared by all workers (Harper's getUserSharedBuffer):
// Atomics.load/store/add/ compareExchange work on it but Atomics.wait does not, so nothing here ever blocks.
// A reader that meets a slot being rewritten retries a few times and then gives up on that take.
//
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
import { Buffer } from 'node:buffer';
import { fromSharedSeconds } from '../time.js';

const INT32_MAX = 0x7fffffff;
const INT32_MIN = -0x80000000;
// The key region and its extra half must stay within one Buffer's Int32 offsets.
const MAX_KEY_REGION = Math.floor(INT32_MAX / 2);

/** One mark per row: urgent wins over changed, and their head starts are never summed. */
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

/** Step names of the interleavable take forms; tests pause between them. */
export type TakeStep = 'reserved' | 'slotRead' | 'retry' | 'entriesRead' | 'clamping';

/** At most this many queues get a section: above the 1,000 routes config allows, plus `unrouted`. */
export const MAX_SECTIONS = 1024;

/**
 * The longest key a row can have (1,900 bytes) must always fit at the head, or one long URL would empty
 * every set.
 */
export const MIN_KEY_BYTES_PER_SLOT = 2048;
const MAX_CAPACITY = 1 << 20;
export const MAX_KEY_BYTES = (1 << 24) - 1; // the length field is 24 bits; flags sit above it
const FLAG_SITEMAP = 1 << 24;
const FLAG_VERIFIED = 1 << 25;
const FLAG_URGENT = 1 << 26;
const FLAG_CHANGED = 1 << 27;
export const DUE_UNKNOWN = INT32_MIN;

// A slot writer silent this long is presumed dead (a thread killed mid-publish would otherwise leave its
// slot locked forever). A real publish takes milliseconds, and a second keeper only starts after the
// leader slot in the keeper signal went stale (≥ 30 s), so this never steps on a live writer.
const WRITER_STALL_SEC = 10;
// Readers give up after this many tries; each failure means a newer publish is already out, so the
// dropped positions belong to a superseded set.
export const READ_ATTEMPTS = 3;

const MAGIC = 0x52445933;
const H_MAGIC = 0;
const H_CAPACITY = 1;
const H_KEY_BYTES = 2;
export const H_ACTIVE = 3;
export const H_GENERATION = 4;
export const H_CURSOR = 16; // its own 64-byte line: every take hammers it
export const SLOT_HEADER = [32, 40] as const;
export const S_SEQ = 0; // odd while a writer holds the slot
export const S_COUNT = 1;
export const S_GENERATION = 2;
export const S_PUBLISHED_AT = 3;
const S_WRITER_SINCE = 4;
export const S_EXTRAS = 5; // extra entries, at capacity..capacity+extras
export const S_SECTIONS = 6; // sections in the slot's table
export const H_SECTION_CURSORS = 48;
const HEADER_INTS = H_SECTION_CURSORS + MAX_SECTIONS;
const HEADER_BYTES = HEADER_INTS * 4;
export const META_INTS = 4; // due seconds, key offset, key length | flags, queue hash
export const SECTION_INTS = 4; // queue hash, start in order, count, flags
/** The sections' extra rows, as a share of the capacity (and of the key region). */
const EXTRA_SHARE = 0.5;

/** Extra rows a set of `capacity` holds for its sections. */
export function extraCapacityFor(capacity: number): number {
  return Math.ceil(capacity * EXTRA_SHARE);
}

function extraKeyBytesFor(keyBytesPerSlot: number): number {
  return Math.max(MIN_KEY_BYTES_PER_SLOT, Math.ceil(keyBytesPerSlot * EXTRA_SHARE));
}

/** The typed views of one ready-set buffer, a pair per region (slot 0, slot 1). */
export class ReadyBuffer {
  readonly capacity: number;
  readonly keyBytesPerSlot: number;
  /** Extra rows a slot holds for the sections, past the global top. */
  readonly extraCapacity: number;
  readonly extraKeyBytes: number;
  readonly header: Int32Array;
  readonly scores: [Float64Array, Float64Array];
  readonly meta: [Int32Array, Int32Array];
  readonly order: [Int32Array, Int32Array];
  readonly sections: [Int32Array, Int32Array];
  readonly keys: [Buffer, Buffer];

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
    const need = ReadyBuffer.byteLength(capacity, keyBytesPerSlot);
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

  /** Decodes entry `i` of a slot, or null when its key bytes lie out of range (torn; the seq check will agree). */
  readEntry(slot: number, i: number, generation: number): ReadyEntry | null {
    const meta = pick(this.meta, slot);
    const m = i * META_INTS;
    const due = meta[m]!;
    const offset = meta[m + 1]!;
    const lengthFlags = meta[m + 2]!;
    const length = lengthFlags & MAX_KEY_BYTES;
    if (offset < 0 || offset + length > this.keyBytesPerSlot + this.extraKeyBytes) return null;
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
   * Copies the entries at `positionOf(i)` for i in [from, to) of the slot a take read. Null when one is
   * torn: the caller then drops the whole copy, as it does when the slot's counter moved.
   */
  readEntries(
    read: SlotRead,
    from: number,
    to: number,
    positionOf: (i: number) => number,
  ): ReadyEntry[] | null {
    const out: ReadyEntry[] = [];
    for (let i = from; i < to; i++) {
      const entry = this.readEntry(read.slot, positionOf(i), read.generation);
      if (entry === null) return null;
      out.push(entry);
    }
    return out;
  }

  /** The generation of the active slot, read without the seqlock (a figure for a busy publish's answer). */
  activeGeneration(): number {
    return Atomics.load(this.header, SLOT_HEADER[Atomics.load(this.header, H_ACTIVE)]! + S_GENERATION);
  }
}

/** One of a slot pair by slot number (0 or 1), typed without an index that could miss. */
export function pick<T>(pair: readonly [T, T], slot: number): T {
  return slot === 0 ? pair[0] : pair[1];
}

/** Encodes an entry's flags above its key length in its meta word. */
export function flagsOf(e: ReadyEntryInput): number {
  return flagBits(e.fromSitemap, e.verified, e.mark);
}

/** flagsOf from the three fields themselves (a publish that streams rows has no entry object). */
export function flagBits(fromSitemap: boolean, verified: boolean, mark: ReadyMark): number {
  return (
    (fromSitemap ? FLAG_SITEMAP : 0) |
    (verified ? FLAG_VERIFIED : 0) |
    (mark === 'urgent' ? FLAG_URGENT : mark === 'changed' ? FLAG_CHANGED : 0)
  );
}

/** The active slot as a reader found it: an even counter (no writer) and the generation under it. */
export interface SlotRead {
  slot: number;
  /** Index of the slot's header in the buffer header. */
  at: number;
  seq: number;
  generation: number;
}

/** What a take's attempt returns when the slot moved under it: the read is dropped and made again. */
export const RETRY: unique symbol = Symbol('ready set retry');

/** Does the slot still carry the counter the reader started with (nothing rewrote it meanwhile)? */
export function unchanged(h: Int32Array, read: SlotRead): boolean {
  return Atomics.load(h, read.at + S_SEQ) === read.seq;
}

/** The active slot, or null while a writer holds it (odd counter). */
export function openActiveSlot(h: Int32Array): SlotRead | null {
  const slot = Atomics.load(h, H_ACTIVE);
  const at = SLOT_HEADER[slot]!;
  const seq = Atomics.load(h, at + S_SEQ);
  if ((seq & 1) === 1) return null;
  return { slot, at, seq, generation: Atomics.load(h, at + S_GENERATION) };
}

/**
 * The seqlock read every take goes through: opens the active slot (skipping it while a writer holds
 * it), runs `attempt` against it, and starts over when the attempt answers RETRY, at most READ_ATTEMPTS
 * times. An attempt must check `unchanged` after its last read of the slot and answer RETRY when it
 * fails: what it copied may then mix two generations. Null when every attempt was overtaken.
 */
export function* readActiveSlot<T>(
  h: Int32Array,
  attempt: (read: SlotRead) => Generator<TakeStep, T | typeof RETRY, void>,
): Generator<TakeStep, T | null, void> {
  for (let n = 0; n < READ_ATTEMPTS; n++) {
    const read = openActiveSlot(h);
    if (read !== null) {
      const result = yield* attempt(read);
      if (result !== RETRY) return result;
    }
    yield 'retry';
  }
  return null;
}

/**
 * Takes the write side of a slot: even → odd by CAS. An odd counter whose writer has been silent for
 * WRITER_STALL_SEC is taken over (odd → odd + 2), which the old writer notices on its next check.
 * Returns the odd counter value this writer owns, or -1 when another writer holds the slot.
 */
export function acquireSlot(h: Int32Array, at: number, nowSec: number): number {
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
