// The open key walks over HeldRows' hash table (heldRows.ts): each walk's place in the table, and the keys a
// deletion's backward shift moved from ahead of a walk to behind it. HeldRows tells them of every move.

/**
 * Every held key in slices, for a walk that yields between them while rows come and go: a key held from
 * the first slice to the last is handed out at least once (a key may come twice; keys added meanwhile may
 * be missed). `next` answers null when the walk is done and ends it; `close` ends it early.
 */
export interface KeyWalk {
  next(max: number): string[] | null;
  close(): void;
}

/** What a walk reads of the table: its entries as they are now (0 = empty), and the key an entry names. */
export interface WalkedTable {
  entries(): Int32Array;
  keyOf(entry: number): string;
}

/** An open walk's place in the table, and the keys a deletion moved from ahead of it to behind it. */
interface Walker {
  at: number;
  moved: string[];
}

export class KeyWalks {
  private walkers: Walker[] = [];

  constructor(private readonly table: WalkedTable) {}

  /** True while any walk is open (only then does a move need telling). */
  get open(): boolean {
    return this.walkers.length > 0;
  }

  /** A new walk from the table's first entry; no copy of the whole key set is ever made. */
  start(): KeyWalk {
    const walker: Walker = { at: 0, moved: [] };
    this.walkers.push(walker);
    const close = (): void => {
      const i = this.walkers.indexOf(walker);
      if (i >= 0) this.walkers.splice(i, 1);
    };
    return {
      next: (max) => {
        if (!this.walkers.includes(walker)) return null;
        const out = walker.moved.splice(0, max);
        const entries = this.table.entries();
        while (out.length < max && walker.at < entries.length) {
          const entry = entries[walker.at++]!;
          if (entry !== 0) out.push(this.table.keyOf(entry));
        }
        if (out.length === 0) {
          close();
          return null;
        }
        return out;
      },
      close,
    };
  }

  /** Every entry moved (the table regrew): each open walk starts over, handing keys out twice, never missing one. */
  restart(): void {
    for (const w of this.walkers) w.at = 0;
  }

  /**
   * A backward shift moved `entry` from index `from` to `to`: a walk that has passed `to` but not `from`
   * would never see it, so it is handed to that walk apart. (A move the other way only repeats a key.)
   */
  shifted(to: number, from: number, entry: number): void {
    for (const w of this.walkers) if (from >= w.at && to < w.at) w.moved.push(this.table.keyOf(entry));
  }
}
