// Results per queue, in one buffer every worker of a node maps (services/metrics/values.ts passes a
// process-wide shared buffer): for each queue, a count per outcome and a histogram of the render time
// its fleets reported, so a result applied on any worker shows in a scrape answered by any other.
//
// A queue is kept under the hash of its name (util/leases/token.ts nameHash, the lease table's queue
// hash), in a fixed table claimed with a CAS. The scrape reads back only the names it is given — the
// configured routes and `unrouted` (util/metrics/queueSeries.ts queueNames) — so the series stay bounded
// by the configuration, and the outcome label by RESULT_OUTCOMES, never by what a caller sends. Cells
// are Int64 words changed with Atomics.add; the render-time sum is kept in nanoseconds (integers for
// Atomics; 2^63 ns is 292 years of summed render time).
import { nameHash } from '../leases/token.js';
import { RESULT_OUTCOMES, type ResultOutcome } from './catalogue.js';
import type { HistogramReading } from './store.js';

const NANO = 1e9;
const WORD = 8;
/** An empty slot's hash word: nameHash never answers 0. */
const EMPTY = 0n;

export interface QueueResultsReading {
  /** One sample per configured queue and outcome, zeros included (a rate over them needs the series). */
  results: Array<{ labels: { queue: string; outcome: string }; value: number }>;
  /** One histogram per configured queue, in seconds. */
  renderSeconds: HistogramReading[];
}

export class QueueResults {
  private readonly words: BigInt64Array;
  readonly slots: number;
  private readonly slotWords: number;

  /** Words per queue: the hash, a count per outcome, a cell per bucket and the overflow, the sum. */
  private static slotWordsFor(bounds: readonly number[]): number {
    return 1 + RESULT_OUTCOMES.length + bounds.length + 1 + 1;
  }

  static byteLength(slots: number, bounds: readonly number[]): number {
    return slots * QueueResults.slotWordsFor(bounds) * WORD;
  }

  /** `bounds`: the render-time histogram's upper bounds in seconds, ascending. */
  constructor(
    buffer: ArrayBuffer | SharedArrayBuffer,
    private readonly bounds: readonly number[],
  ) {
    if (bounds.length === 0 || bounds.some((b, i) => i > 0 && !(b > bounds[i - 1]!)))
      throw new RangeError('render-time buckets must be ascending and not empty');
    this.slotWords = QueueResults.slotWordsFor(bounds);
    this.slots = Math.floor(buffer.byteLength / (this.slotWords * WORD));
    if (this.slots < 1) throw new RangeError('the results buffer holds no queue');
    this.words = new BigInt64Array(buffer, 0, this.slots * this.slotWords);
  }

  /**
   * One applied result of `queue`, with the render time its fleet reported (ms; null when none was, and
   * a value that is not a finite number ≥ 0 is left out of the histogram). False when the table has no
   * room for another queue.
   */
  record(queue: string, outcome: ResultOutcome, renderMs: number | null): boolean {
    const o = RESULT_OUTCOMES.indexOf(outcome);
    if (o < 0) throw new RangeError(`${String(outcome)} is not one of RESULT_OUTCOMES`);
    const at = this.slotOf(queue, true);
    if (at === null) return false;
    Atomics.add(this.words, at + 1 + o, 1n);
    if (renderMs === null || !Number.isFinite(renderMs) || renderMs < 0) return true;
    const seconds = renderMs / 1000;
    let b = 0;
    while (b < this.bounds.length && seconds > this.bounds[b]!) b++;
    const cells = at + 1 + RESULT_OUTCOMES.length;
    Atomics.add(this.words, cells + b, 1n);
    Atomics.add(this.words, cells + this.bounds.length + 1, BigInt(Math.round(seconds * NANO)));
    return true;
  }

  /** The series of these queues; a queue never recorded reads as zeros. */
  read(queues: readonly string[]): QueueResultsReading {
    const out: QueueResultsReading = { results: [], renderSeconds: [] };
    for (const queue of queues) {
      const at = this.slotOf(queue, false);
      const word = (i: number) => (at === null ? 0 : Number(Atomics.load(this.words, at + i)));
      RESULT_OUTCOMES.forEach((outcome, o) =>
        out.results.push({ labels: { queue, outcome }, value: word(1 + o) }),
      );
      const cells = 1 + RESULT_OUTCOMES.length;
      const counts: number[] = [];
      for (let b = 0; b <= this.bounds.length; b++) counts.push(word(cells + b));
      out.renderSeconds.push({
        labels: { queue },
        bounds: this.bounds,
        counts,
        sum: word(cells + this.bounds.length + 1) / NANO,
      });
    }
    return out;
  }

  /** The first word of the queue's slot (linear probing from its hash); claims one when `claim`. */
  private slotOf(queue: string, claim: boolean): number | null {
    const hash = BigInt(nameHash(queue));
    const start = (Number(hash & 0x7fffffffn) >>> 0) % this.slots;
    for (let i = 0; i < this.slots; i++) {
      const at = ((start + i) % this.slots) * this.slotWords;
      const held = Atomics.load(this.words, at);
      if (held === hash) return at;
      if (held !== EMPTY) continue;
      if (!claim) return null;
      const was = Atomics.compareExchange(this.words, at, EMPTY, hash);
      // Another worker claimed this slot first: for this very queue, or for another (probe on).
      if (was === EMPTY || was === hash) return at;
    }
    return null;
  }
}
