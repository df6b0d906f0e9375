// The schedule as keeper tests see it: an in-memory sorted map walked with lmdb getRange semantics, and
// a subscription stream the test pushes events into.
import type { EventStream, ScheduleEvent, ScheduleSource } from '../services/keeper/service.js';
import { toScheduleRow, type ScheduleRow } from '../util/schedule/rules.js';
import type { ScheduleRow as HeldRow } from '../util/keeper/core.js';

export type Stored = Record<string, unknown>;

/** The scheduling fields of a row that is none of urgent, changed, from a sitemap or on its own cadence. */
const PLAIN = {
  fromSitemap: false,
  effectiveInterval: null,
  verified: true,
  urgentAt: null,
  changedAt: null,
} as const;

/** A stored record due at `dueMs`, with `extra` fields over it. */
export function stored(dueMs: number, extra: Stored = {}): Stored {
  return { nextRenderTime: dueMs, ...PLAIN, ...extra };
}

/** The same row as the keeper takes it (KeeperCore.apply), under its key. */
export function heldRow(cacheKey: string, dueMs: number, extra: Partial<HeldRow> = {}): HeldRow {
  return { cacheKey, nextRenderTime: dueMs, ...PLAIN, ...extra };
}

/** Index of the first key >= `key` in an ascending array. */
function lowerBound(keys: readonly string[], key: string): number {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (keys[mid]! < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * How a key fails to read. 'key' does not decode in either direction (what walkSchedule documents);
 * 'forwardCursor' breaks only a forward walk that reaches it (a cursor fault, the row itself is fine).
 */
export type Fault = 'key' | 'forwardCursor';

export class FakeTable {
  private rows = new Map<string, Stored>();
  private sorted: string[] | null = null;
  private frozen: { rows: Map<string, Stored>; sorted: string[] } | null = null;
  readonly faults = new Map<string, Fault>();
  /** Keys whose stored value does not decode: walks and reads find no row there, `present` says it is stored. */
  readonly undecodable = new Set<string>();
  walkCalls = 0;
  /** Forward walks started from the bottom of the table: one per load or verification pass. */
  fullWalks = 0;
  reads = 0;

  put(key: string, value: Stored): void {
    if (!this.rows.has(key)) this.sorted = null;
    this.rows.set(key, value);
  }

  delete(key: string): void {
    if (this.rows.delete(key)) this.sorted = null;
  }

  /** Walks read this copy from now on while point reads see every later write (an old read snapshot). */
  freezeWalks(): void {
    this.frozen = { rows: new Map(this.rows), sorted: this.keys() };
  }

  private keys(): string[] {
    this.sorted ??= [...this.rows.keys()].sort();
    return this.sorted;
  }

  // lmdb getRange: forward is [start, end), reverse runs from start (high) down to end (exclusive low).
  *walk(
    opts: Parameters<ScheduleSource['walk']>[0],
  ): Generator<{ key: string; row: ScheduleRow | undefined }> {
    this.walkCalls++;
    const reverse = opts.reverse === true;
    if (!reverse && opts.start === undefined) this.fullWalks++;
    const rows = this.frozen?.rows ?? this.rows;
    const keys = this.frozen?.sorted ?? this.keys();
    let i: number;
    if (!reverse) {
      i = opts.start === undefined ? 0 : lowerBound(keys, opts.start);
      if (opts.exclusiveStart === true && keys[i] === opts.start) i++;
    } else {
      if (opts.start === undefined) i = keys.length - 1;
      else {
        i = lowerBound(keys, opts.start);
        if (keys[i] !== opts.start || opts.exclusiveStart === true) i--;
      }
    }
    const limit = opts.limit ?? Infinity;
    for (let n = 0; n < limit && i >= 0 && i < keys.length; n++, i += reverse ? -1 : 1) {
      const key = keys[i]!;
      if (opts.end !== undefined && (reverse ? key <= opts.end : key >= opts.end)) return;
      const fault = this.faults.get(key);
      if (fault === 'key' || (fault === 'forwardCursor' && !reverse)) throw new Error(`unreadable at ${key}`);
      yield { key, row: this.undecodable.has(key) ? undefined : toScheduleRow(key, rows.get(key)!) };
    }
  }

  /** Whether a live value is stored under `key` (decodable or not), as ScheduleSource.present answers. */
  present(key: string): boolean {
    return this.rows.has(key);
  }

  read(key: string): ScheduleRow | undefined {
    this.reads++;
    if (this.undecodable.has(key)) return undefined;
    const v = this.rows.get(key);
    return v === undefined ? undefined : toScheduleRow(key, v);
  }
}

/** A subscription the test pushes into. One that ignores end() keeps delivering, as a stream may. */
export class FakeStream implements EventStream {
  ended = false;
  private buffered: ScheduleEvent[] = [];
  private head = 0;
  private waiting: ((r: IteratorResult<ScheduleEvent>) => void) | null = null;
  private finished = false;

  constructor(private readonly honoursEnd: boolean) {}

  push(ev: ScheduleEvent): void {
    if (this.finished) return;
    const w = this.waiting;
    this.waiting = null;
    if (w) w({ value: ev, done: false });
    else this.buffered.push(ev);
  }

  finish(): void {
    this.finished = true;
    const w = this.waiting;
    this.waiting = null;
    w?.({ value: undefined, done: true });
  }

  end = (): void => {
    this.ended = true;
    if (this.honoursEnd) this.finish();
  };

  [Symbol.asyncIterator](): AsyncIterator<ScheduleEvent> {
    return {
      next: () => {
        if (this.head < this.buffered.length) {
          const value = this.buffered[this.head++]!;
          if (this.head === this.buffered.length) [this.buffered, this.head] = [[], 0];
          return Promise.resolve({ value, done: false });
        }
        if (this.finished) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiting = resolve));
      },
    };
  }
}
