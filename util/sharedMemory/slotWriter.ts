// One slot of a publish, written row by row as the keeper's selection walks: the global top at
// 0..count, then the extras for the queues' sections (util/sharedMemory/readySections.ts), keys packed in
// the slot's key region. util/sharedMemory/readySet.ts acquires the slot, runs the writer and flips.
import { Buffer } from 'node:buffer';
import { sharedSecondsAtOrBefore } from '../time.js';
import {
  DUE_UNKNOWN,
  MAX_KEY_BYTES,
  META_INTS,
  ReadyBuffer,
  SLOT_HEADER,
  S_SEQ,
  pick,
} from './readyLayout.js';

/** Keys held as UTF-8 bytes elsewhere (the keeper's held rows), named by a number: copied, never decoded. */
export interface KeySource {
  keyLength(ref: number): number;
  /** Copies the key's keyLength bytes into `into` from index `at`. */
  copyKey(ref: number, into: Uint8Array, at: number): void;
}

/**
 * Takes one publish row by row, as the keeper's selection walks (no entry objects): the global top
 * best first, then the extras, each queue's best first. `flags` is flagBits(fromSitemap, verified, mark).
 * `topFrom` and `extraFrom` take the key as bytes from a KeySource, which spares encoding a string.
 */
export interface ReadyWriter {
  top(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void;
  extra(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void;
  topFrom(
    keys: KeySource,
    ref: number,
    score: number,
    dueMs: number,
    flags: number,
    route: string | undefined,
  ): void;
  extraFrom(
    keys: KeySource,
    ref: number,
    score: number,
    dueMs: number,
    flags: number,
    route: string | undefined,
  ): void;
}

/**
 * Writes one slot of a publish: the global top at 0..count, extras from `capacity` on, keys packed in
 * the slot's key region. The top ends at the first key that does not fit (the set stays a prefix of
 * the keeper's order), and the queues of the top rows left out (`cut`) get no extras; an extra that
 * does not fit ends its queue's run. A writer that finds the slot taken over (its lock gone) writes
 * nothing more (`lost`).
 */
export class SlotWriter implements ReadyWriter {
  count = 0;
  extraCount = 0;
  lost: boolean;
  /** Queues with a row of the global top left unpublished. */
  readonly cut = new Set<number>();
  private used = 0;
  private extraUsed = 0;
  private topClosed = false;
  private readonly seqAt: number;
  private readonly scores: Float64Array;
  private readonly meta: Int32Array;
  private readonly keys: Buffer;
  /** Where the entry a `room*` call just made room for goes: its index and its key's byte offset. */
  private placeAt = 0;
  private keyAt = 0;
  // Rows come in runs of one queue (a bucket's rows share a class): its hash is looked up once a run.
  private lastRoute: string | undefined = undefined;
  private lastQueue = 0;

  constructor(
    private readonly buf: ReadyBuffer,
    private readonly queueHash: (route: string) => number,
    slot: number,
    private readonly lock: number,
  ) {
    this.lost = lock < 0;
    this.seqAt = SLOT_HEADER[slot]! + S_SEQ;
    this.scores = pick(buf.scores, slot);
    this.meta = pick(buf.meta, slot);
    this.keys = pick(buf.keys, slot);
  }

  top(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void {
    this.place(true, key, score, dueMs, flags, route);
  }

  extra(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void {
    this.place(false, key, score, dueMs, flags, route);
  }

  topFrom(
    keys: KeySource,
    ref: number,
    score: number,
    dueMs: number,
    flags: number,
    route: string | undefined,
  ): void {
    this.placeFrom(true, keys, ref, score, dueMs, flags, route);
  }

  extraFrom(
    keys: KeySource,
    ref: number,
    score: number,
    dueMs: number,
    flags: number,
    route: string | undefined,
  ): void {
    this.placeFrom(false, keys, ref, score, dueMs, flags, route);
  }

  /** One entry from a key string: in the top (`top`) or the extras. */
  private place(
    top: boolean,
    key: string,
    score: number,
    dueMs: number,
    flags: number,
    route: string | undefined,
  ): void {
    if (!this.holds()) return;
    const length = Buffer.byteLength(key, 'utf8');
    if (!(top ? this.roomTop(length, route) : this.roomExtra(length, route))) return;
    // Byte length equal to string length means pure ASCII, which latin1 copies without UTF-8 encoding
    // (~25% faster on 5,000 URL-sized keys) and which reads back identically as UTF-8.
    this.keys.write(key, this.keyAt, length, length === key.length ? 'latin1' : 'utf8');
    this.put(length, score, dueMs, flags);
  }

  /** One entry whose key bytes are copied from `keys`: in the top (`top`) or the extras. */
  private placeFrom(
    top: boolean,
    keys: KeySource,
    ref: number,
    score: number,
    dueMs: number,
    flags: number,
    route: string | undefined,
  ): void {
    if (!this.holds()) return;
    const length = keys.keyLength(ref);
    if (!(top ? this.roomTop(length, route) : this.roomExtra(length, route))) return;
    keys.copyKey(ref, this.keys, this.keyAt);
    this.put(length, score, dueMs, flags);
  }

  /** A writer that stalled past WRITER_STALL_SEC was replaced; it must stop writing the moment it notices. */
  private holds(): boolean {
    if (!this.lost && Atomics.load(this.buf.header, this.seqAt) !== this.lock) this.lost = true;
    return !this.lost;
  }

  private queueOf(route: string | undefined): number {
    if (route !== this.lastRoute) {
      this.lastRoute = route;
      this.lastQueue = route === undefined ? 0 : this.queueHash(route);
    }
    return this.lastQueue;
  }

  /** Makes room for a top entry whose key is `length` bytes (never truncated), or closes the top. */
  private roomTop(length: number, route: string | undefined): boolean {
    const queue = this.queueOf(route);
    if (!this.topClosed && this.count < this.buf.capacity) {
      if (length <= MAX_KEY_BYTES && this.used + length <= this.buf.keyBytesPerSlot) {
        this.placeAt = this.count++;
        this.keyAt = this.used;
        this.used += length;
        return true;
      }
      this.topClosed = true;
    }
    this.cut.add(queue);
    return false;
  }

  /** Makes room for an extra entry of `length` key bytes; one that does not fit ends its queue's run. */
  private roomExtra(length: number, route: string | undefined): boolean {
    if (this.extraCount >= this.buf.extraCapacity) return false;
    const queue = this.queueOf(route);
    if (this.cut.has(queue)) return false;
    if (length > MAX_KEY_BYTES || this.extraUsed + length > this.buf.extraKeyBytes) {
      this.cut.add(queue);
      return false;
    }
    this.placeAt = this.buf.capacity + this.extraCount++;
    this.keyAt = this.buf.keyBytesPerSlot + this.extraUsed;
    this.extraUsed += length;
    return true;
  }

  /** The entry's fields, at the place the last `room*` call made (its key bytes are written). */
  private put(length: number, score: number, dueMs: number, flags: number): void {
    const p = this.placeAt;
    this.scores[p] = score;
    const m = p * META_INTS;
    this.meta[m] = Number.isFinite(dueMs) ? sharedSecondsAtOrBefore(dueMs) : DUE_UNKNOWN;
    this.meta[m + 1] = this.keyAt;
    this.meta[m + 2] = length | flags;
    this.meta[m + 3] = this.lastQueue;
  }
}
