// The queue-state document (docs/monitoring.md) in shared memory: worker 0 writes it every stateInterval and
// any worker serves GET /prerender_admin/queue-state from it without touching the database.
//
// Two slots flip like the ready set's: the writer fills the inactive slot, then flips. A reader copies
// the active slot out, checks the slot's write counter did not move, and only then decodes — decoding
// bytes a writer is overwriting could throw or, worse, return a plausible wrong document.
import { Buffer } from 'node:buffer';
import { Packr } from 'msgpackr';
import { fromSharedSeconds, sharedSecondsAtOrBefore } from '../time.js';
import { runToEnd } from './steps.js';

// Encoding: msgpackr with records. bench/state-doc-encoding.ts on a realistic document (200 classes,
// 200 byRoute, 60 flow minutes; node 20, 2-core VM), median encode + decode per document:
//   JSON                          61.8 KB   encode 0.46–0.52 ms  decode 0.44–0.54 ms  total 0.89–1.08 ms
//   msgpackr, useRecords: false   46.3 KB   encode 0.47–0.50 ms  decode 0.61–0.64 ms  total 1.10–1.15 ms
//   msgpackr, records             22.4 KB   encode 0.28–0.40 ms  decode 0.20–0.27 ms  total 0.48–0.68 ms
// Records win on both sides and shrink the slot threefold. With no shared `structures` option every
// message carries its own record definitions, so a packr on another thread decodes it cold (checked).
// Differences from JSON a reader may meet: undefined survives, a Date stays a Date.
const packr = new Packr({ useRecords: true });

export interface StateDocRead<T> {
  doc: T;
  /** Whole seconds (floored). */
  writtenAt: number;
  generation: number;
}

export type StateDocWriteStep = 'acquired' | 'flipped';
export type StateDocReadStep = 'headerRead';

const READ_ATTEMPTS = 4;
// See ready set: a writer silent this long died mid-write; a real write takes about a millisecond.
const WRITER_STALL_SEC = 10;

const MAGIC = 0x53444331; // 'SDC1'
const H_MAGIC = 0;
const H_SLOT_BYTES = 1;
const H_ACTIVE = 2;
const H_GENERATION = 3;
const SLOT_HEADER = [8, 16] as const;
const S_SEQ = 0; // odd while a writer holds the slot
const S_LENGTH = 1;
const S_GENERATION = 2;
const S_WRITTEN_AT = 3;
const S_WRITER_SINCE = 4;
const HEADER_INTS = 24;
const HEADER_BYTES = HEADER_INTS * 4;

export class StateDoc<T = unknown> {
  readonly maxDocBytes: number;
  private readonly header: Int32Array;
  private readonly slots: [Buffer, Buffer];

  static byteLength(maxDocBytes: number): number {
    return HEADER_BYTES + 2 * Math.ceil(maxDocBytes / 8) * 8;
  }

  constructor(buf: ArrayBuffer, maxDocBytes: number) {
    if (!Number.isInteger(maxDocBytes) || maxDocBytes < 1 || maxDocBytes > 0x7fffffff)
      throw new RangeError(`state document size must be a positive integer, got ${maxDocBytes}`);
    const need = StateDoc.byteLength(maxDocBytes);
    if (buf.byteLength < need)
      throw new RangeError(`state document needs ${need} bytes; the shared buffer has ${buf.byteLength}`);
    this.maxDocBytes = maxDocBytes;
    this.header = new Int32Array(buf, 0, HEADER_INTS);
    const magic = Atomics.compareExchange(this.header, H_MAGIC, 0, MAGIC);
    if (magic !== 0 && magic !== MAGIC)
      throw new Error('shared buffer holds another structure, not a state document');
    const size = Atomics.compareExchange(this.header, H_SLOT_BYTES, 0, maxDocBytes);
    if (size !== 0 && size !== maxDocBytes)
      throw new Error(`state document was laid out for ${size} bytes, asked for ${maxDocBytes}`);
    const slotStride = Math.ceil(maxDocBytes / 8) * 8;
    this.slots = [
      Buffer.from(buf, HEADER_BYTES, maxDocBytes),
      Buffer.from(buf, HEADER_BYTES + slotStride, maxDocBytes),
    ];
  }

  /**
   * Publishes `doc`. False when it encodes larger than the slot, or another writer holds the slot; the
   * previous document then stays readable.
   */
  write(doc: T, now: number): boolean {
    return runToEnd(this.writeSteps(doc, now));
  }

  /** The latest document, or null before the first write (or if every attempt met a writer mid-copy). */
  read(): StateDocRead<T> | null {
    return runToEnd(this.readSteps());
  }

  /** write() as resumable steps, so tests can stop a writer part way (or abandon it, as a crash would). */
  *writeSteps(doc: T, now: number): Generator<StateDocWriteStep, boolean, void> {
    const bytes = packr.pack(doc);
    if (bytes.length > this.maxDocBytes) return false;
    const h = this.header;
    const nowSec = sharedSecondsAtOrBefore(now);
    const slot = 1 - Atomics.load(h, H_ACTIVE);
    const at = SLOT_HEADER[slot]!;
    const seq = Atomics.load(h, at + S_SEQ);
    const stalled = (seq & 1) === 1 && nowSec - Atomics.load(h, at + S_WRITER_SINCE) >= WRITER_STALL_SEC;
    if ((seq & 1) === 1 && !stalled) return false;
    const mine = (seq + (stalled ? 2 : 1)) | 0;
    if (Atomics.compareExchange(h, at + S_SEQ, seq, mine) !== seq) return false;
    Atomics.store(h, at + S_WRITER_SINCE, nowSec);
    yield 'acquired';
    (slot === 0 ? this.slots[0] : this.slots[1]).set(bytes, 0);
    Atomics.store(h, at + S_LENGTH, bytes.length);
    Atomics.store(h, at + S_GENERATION, (Atomics.add(h, H_GENERATION, 1) + 1) | 0);
    Atomics.store(h, at + S_WRITTEN_AT, nowSec);
    // Flip while still holding the slot; readers that meet the odd counter serve the previous document,
    // which is complete and untouched until the write after this one.
    Atomics.store(h, H_ACTIVE, slot);
    yield 'flipped';
    return Atomics.compareExchange(h, at + S_SEQ, mine, mine + 1) === mine;
  }

  /** read() as resumable steps; see writeSteps. */
  *readSteps(): Generator<StateDocReadStep, StateDocRead<T> | null, void> {
    const h = this.header;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      let slot = Atomics.load(h, H_ACTIVE);
      let at = SLOT_HEADER[slot]!;
      let seq = Atomics.load(h, at + S_SEQ);
      if ((seq & 1) === 1) {
        // The writer holds the active slot between its flip and release: the other slot is the last
        // complete document.
        slot = 1 - slot;
        at = SLOT_HEADER[slot]!;
        seq = Atomics.load(h, at + S_SEQ);
        if ((seq & 1) === 1) continue;
      }
      if (seq === 0) return null; // never written
      const length = Atomics.load(h, at + S_LENGTH);
      const generation = Atomics.load(h, at + S_GENERATION);
      const writtenSec = Atomics.load(h, at + S_WRITTEN_AT);
      yield 'headerRead';
      if (length < 0 || length > this.maxDocBytes) continue;
      const copy = Buffer.from((slot === 0 ? this.slots[0] : this.slots[1]).subarray(0, length));
      // Seqlock check: a writer that came back round to this slot since we read its header may have
      // changed the bytes, the length or both; decode only a copy the counter vouches for.
      if (Atomics.load(h, at + S_SEQ) !== seq) continue;
      return { doc: packr.unpack(copy) as T, writtenAt: fromSharedSeconds(writtenSec), generation };
    }
    return null;
  }
}
