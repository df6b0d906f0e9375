// Labelled counters (e.g. stall_nudges_total{queue}) in one shared buffer, so an increment on any worker
// shows in a scrape answered by any other. A fixed table of slots, each holding its series key (name and
// labels, UTF-8) and an Int64 value: a new series claims an empty slot with a CAS, writes its key, then
// publishes it; increments are Atomics.add. Series are few (one per queue), so lookups scan the table.

const SLOT_BYTES = 256;
const KEY_OFFSET = 16; // state (4), key length (4), value (8)
export const MAX_SERIES_KEY_BYTES = SLOT_BYTES - KEY_OFFSET;
const EMPTY = 0;
const WRITING = 1;
const READY = 2;
/** A writer publishes a slot in a few stores; this many spins means it died mid-write. */
const SPIN_LIMIT = 1 << 14;

export class LabelledCounters {
  private readonly words: Int32Array;
  private readonly values: BigInt64Array;
  private readonly bytes: Uint8Array;
  readonly slots: number;
  private readonly encoder = new TextEncoder();
  private readonly decoder = new TextDecoder();

  static byteLength(slots: number): number {
    return slots * SLOT_BYTES;
  }

  constructor(buf: ArrayBuffer | SharedArrayBuffer) {
    this.slots = Math.floor(buf.byteLength / SLOT_BYTES);
    this.words = new Int32Array(buf, 0, (this.slots * SLOT_BYTES) / 4);
    this.values = new BigInt64Array(buf, 0, (this.slots * SLOT_BYTES) / 8);
    this.bytes = new Uint8Array(buf, 0, this.slots * SLOT_BYTES);
  }

  private keyAt(slot: number): string {
    const base = slot * SLOT_BYTES;
    const len = Atomics.load(this.words, base / 4 + 1);
    return this.decoder.decode(this.bytes.subarray(base + KEY_OFFSET, base + KEY_OFFSET + len));
  }

  private waitReady(slot: number): boolean {
    for (let i = 0; i < SPIN_LIMIT; i++)
      if (Atomics.load(this.words, (slot * SLOT_BYTES) / 4) === READY) return true;
    return false;
  }

  /** Adds `n` to the series; false when the key is too long or every slot is taken (the caller logs). */
  add(seriesKey: string, n: number): boolean {
    const key = this.encoder.encode(seriesKey);
    if (key.length > MAX_SERIES_KEY_BYTES) return false;
    for (let slot = 0; slot < this.slots; slot++) {
      const stateIndex = (slot * SLOT_BYTES) / 4;
      let state = Atomics.load(this.words, stateIndex);
      if (state === EMPTY) {
        if (Atomics.compareExchange(this.words, stateIndex, EMPTY, WRITING) === EMPTY) {
          const base = slot * SLOT_BYTES;
          this.bytes.set(key, base + KEY_OFFSET);
          Atomics.store(this.words, stateIndex + 1, key.length);
          Atomics.store(this.values, base / 8 + 1, BigInt(n));
          Atomics.store(this.words, stateIndex, READY);
          return true;
        }
        state = Atomics.load(this.words, stateIndex);
      }
      // Another worker is publishing this slot (maybe with our key): wait for it before comparing.
      if (state === WRITING && !this.waitReady(slot)) continue;
      if (this.keyAt(slot) === seriesKey) {
        Atomics.add(this.values, (slot * SLOT_BYTES) / 8 + 1, BigInt(n));
        return true;
      }
    }
    return false;
  }

  /** Every published series with its value. */
  entries(): Array<{ key: string; value: number }> {
    const out: Array<{ key: string; value: number }> = [];
    for (let slot = 0; slot < this.slots; slot++) {
      if (Atomics.load(this.words, (slot * SLOT_BYTES) / 4) !== READY) continue;
      out.push({
        key: this.keyAt(slot),
        value: Number(Atomics.load(this.values, (slot * SLOT_BYTES) / 8 + 1)),
      });
    }
    return out;
  }
}
