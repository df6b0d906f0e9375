// "Logged once" across every worker of a node (an unknown key logs once). Each worker applies
// and answers config on its own, so a per-worker memory logged an unknown key once per worker. This is
// a fixed set of 32-bit hashes of the things already logged, over a buffer every worker shares: the
// first worker to insert a hash logs, the others see it there. Lock-free: an insert is one
// compare-and-swap into an empty slot. Pure: the buffer comes from the caller.
import { keyHash } from '../keyHash.js';

/** Slots in the set; past SLOTS / 2 entries nothing new is logged (the caller's overflow line says so). */
const SLOTS = 4096;
const FULL_AT = SLOTS / 2;
/** Slot 0 counts the entries; the hashes follow. */
const COUNT = 0;

/** The text's keyHash folded to 32 bits, never 0 (0 marks an empty slot). */
function hashOf(text: string): number {
  const { hi, lo } = keyHash(text);
  const h = hi ^ lo;
  return h === 0 ? 1 : h;
}

export class WarnedOnce {
  private readonly words: Int32Array;

  static byteLength(): number {
    return (SLOTS + 1) * 4;
  }

  constructor(buffer: ArrayBufferLike) {
    if (buffer.byteLength < WarnedOnce.byteLength())
      throw new RangeError(`WarnedOnce needs ${WarnedOnce.byteLength()} bytes, got ${buffer.byteLength}`);
    this.words = new Int32Array(buffer, 0, SLOTS + 1);
  }

  /**
   * True for the first caller on any worker to ask about `text` (which should log), false afterwards and
   * once the set is full. Two different texts with one hash count as one: a rare missed log line.
   */
  first(text: string): boolean {
    const a = this.words;
    const h = hashOf(text);
    let i = (h >>> 0) % SLOTS;
    for (let probes = 0; probes < SLOTS; probes++) {
      const slot = 1 + i;
      const seen = Atomics.load(a, slot);
      if (seen === h) return false;
      if (seen === 0) {
        if (Atomics.load(a, COUNT) >= FULL_AT) return false;
        const was = Atomics.compareExchange(a, slot, 0, h);
        if (was === 0) {
          Atomics.add(a, COUNT, 1);
          return true;
        }
        if (was === h) return false;
        // Another text took this slot meanwhile: probe on.
      }
      i = (i + 1) % SLOTS;
    }
    return false;
  }

  /** How many texts have been logged through this set, on all workers. */
  get size(): number {
    return Atomics.load(this.words, COUNT);
  }
}
