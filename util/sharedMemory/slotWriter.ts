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

/**
 * Takes one publish row by row, as the keeper's selection walks (no entry objects): the global top
 * best first, then the extras, each queue's best first. `flags` is flagBits(fromSitemap, verified, mark).
 */
export interface ReadyWriter {
  top(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void;
  extra(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void;
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
    if (!this.holds()) return;
    const queue = route === undefined ? 0 : this.queueHash(route);
    if (!this.topClosed && this.count < this.buf.capacity) {
      const length = this.fits(key, this.used, this.buf.keyBytesPerSlot);
      if (length >= 0) {
        this.put(this.count, key, length, this.used, score, dueMs, flags, queue);
        this.used += length;
        this.count++;
        return;
      }
      this.topClosed = true;
    }
    this.cut.add(queue);
  }

  extra(key: string, score: number, dueMs: number, flags: number, route: string | undefined): void {
    if (!this.holds() || this.extraCount >= this.buf.extraCapacity) return;
    const queue = route === undefined ? 0 : this.queueHash(route);
    if (this.cut.has(queue)) return;
    const length = this.fits(key, this.extraUsed, this.buf.extraKeyBytes);
    if (length < 0) {
      this.cut.add(queue);
      return;
    }
    const at = this.buf.capacity + this.extraCount;
    this.put(at, key, length, this.buf.keyBytesPerSlot + this.extraUsed, score, dueMs, flags, queue);
    this.extraUsed += length;
    this.extraCount++;
  }

  /** A writer that stalled past WRITER_STALL_SEC was replaced; it must stop writing the moment it notices. */
  private holds(): boolean {
    if (!this.lost && Atomics.load(this.buf.header, this.seqAt) !== this.lock) this.lost = true;
    return !this.lost;
  }

  /** The key's UTF-8 length when it fits in `keyBytes` after `used`, else -1 (never truncated). */
  private fits(key: string, used: number, keyBytes: number): number {
    const length = Buffer.byteLength(key, 'utf8');
    return length > MAX_KEY_BYTES || used + length > keyBytes ? -1 : length;
  }

  private put(
    p: number,
    key: string,
    length: number,
    keyAt: number,
    score: number,
    dueMs: number,
    flags: number,
    queue: number,
  ): void {
    // Byte length equal to string length means pure ASCII, which latin1 copies without UTF-8 encoding
    // (~25% faster on 5,000 URL-sized keys) and which reads back identically as UTF-8.
    this.keys.write(key, keyAt, length, length === key.length ? 'latin1' : 'utf8');
    this.scores[p] = score;
    const m = p * META_INTS;
    this.meta[m] = Number.isFinite(dueMs) ? sharedSecondsAtOrBefore(dueMs) : DUE_UNKNOWN;
    this.meta[m + 1] = keyAt;
    this.meta[m + 2] = length | flags;
    this.meta[m + 3] = queue;
  }
}
