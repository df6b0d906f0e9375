// Per-node bounds over words of shared memory every worker sees (resources.ts hands in the words): a
// counter of things running at once (origin fetches, render-now waiters) and a per-minute budget (the
// discover filings). Pure over an Int32Array (a getter: the shared words are obtained at first use), clock
// passed in; Atomics make them exact across workers.

/** At most `max` at once across the node: take() before, release() after (exactly once per take). */
export class NodeSlots {
  constructor(
    private readonly words: () => Int32Array,
    private readonly index: number,
  ) {}

  /** Takes a slot when fewer than `max` are taken. */
  take(max: number): boolean {
    const before = Atomics.add(this.words(), this.index, 1);
    if (before < max) return true;
    Atomics.sub(this.words(), this.index, 1);
    return false;
  }

  release(): void {
    Atomics.sub(this.words(), this.index, 1);
  }

  inUse(): number {
    return Atomics.load(this.words(), this.index);
  }
}

/**
 * At most `limit` takes per wall-clock minute across the node. Two words: the minute the count belongs
 * to and the count. The worker that first sees a new minute swaps it in and resets the count; a take
 * racing that swap may count toward either minute, so a minute's boundary can admit one extra take per
 * worker, never an unbounded number.
 */
export class MinuteBudget {
  constructor(
    private readonly words: () => Int32Array,
    private readonly index: number,
  ) {}

  take(limit: number, now: number): boolean {
    if (limit <= 0) return false;
    const minute = Math.floor(now / 60_000) | 0;
    const seen = Atomics.load(this.words(), this.index);
    if (seen !== minute && Atomics.compareExchange(this.words(), this.index, seen, minute) === seen)
      Atomics.store(this.words(), this.index + 1, 0);
    const before = Atomics.add(this.words(), this.index + 1, 1);
    if (before < limit) return true;
    Atomics.sub(this.words(), this.index + 1, 1);
    return false;
  }
}
