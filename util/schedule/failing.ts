// The failing list's order and pages (docs/operating.md "Failing rows"): the rows whose last result
// failed, worst first — most consecutive strikes, then the oldest start of the run, then the URL — in
// pages of `limit` behind an opaque cursor. Pure: the entries come from the failing index the schedule
// owner keeps beside the rows, so a page costs a walk of the failing rows only, never of the schedule.
import { Problem, type Checked } from '../problem.js';

export interface FailingEntry {
  /** The row's key (`<url>|<device>`): the list's order ends on it. */
  key: string;
  url: string;
  /** The row's device; null for a key without one. */
  deviceType: string | null;
  strikes: number;
  failingSince: number;
}

/** An entry's place in the failing list's order: what a cursor holds. */
export type FailingPlace = Pick<FailingEntry, 'strikes' | 'failingSince' | 'key'>;

export interface FailingQuery {
  limit: number;
  queue: string | null;
  /** Where the previous page ended (its last entry's place in the order), or null for the first page. */
  after: FailingPlace | null;
}

export const DEFAULT_FAILING_LIMIT = 50;
export const MAX_FAILING_LIMIT = 500;
const MAX_QUEUE_CHARS = 200;

/** Worst first: more strikes, then an older run, then the key (a total order, so pages never overlap). */
export function compareFailing(a: FailingPlace, b: FailingPlace): number {
  if (a.strikes !== b.strikes) return b.strikes - a.strikes;
  if (a.failingSince !== b.failingSince) return a.failingSince - b.failingSince;
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

/** The refusal of a cursor that is not one this list handed out. */
export const badCursor = (): Problem =>
  new Problem('invalid_cursor', 'cursor must be the `next` value of an earlier page, unchanged');

/** A list's cursor: the place of a page's last entry, as a base64url JSON array of its order's fields. */
export function encodePlace(place: ReadonlyArray<string | number>): string {
  return Buffer.from(JSON.stringify(place)).toString('base64url');
}

/** The fields `encodePlace` wrote, each of the type `types` names in turn; a Problem for anything else. */
export function decodePlace(
  cursor: string,
  types: ReadonlyArray<'number' | 'string'>,
): Checked<Array<string | number>> {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    v = null;
  }
  if (!Array.isArray(v) || v.length !== types.length || types.some((t, i) => typeof v[i] !== t))
    return badCursor();
  return v as Array<string | number>;
}

export function encodeCursor(e: FailingPlace): string {
  return encodePlace([e.strikes, e.failingSince, e.key]);
}

function decodeCursor(cursor: string): Checked<FailingPlace> {
  const v = decodePlace(cursor, ['number', 'number', 'string']);
  if (v instanceof Problem) return v;
  return { strikes: v[0] as number, failingSince: v[1] as number, key: v[2] as string };
}

/** A list's `limit` parameter: `fallback` when absent, else an integer from 1 to `max`, or a Problem. */
export function parseLimit(raw: string | null, fallback: number, max: number): Checked<number> {
  if (raw === null) return fallback;
  const limit = /^\d{1,4}$/.test(raw) ? Number(raw) : NaN;
  return limit >= 1 && limit <= max
    ? limit
    : new Problem('invalid_limit', `limit must be an integer from 1 to ${max}`);
}

/** A list's `queue` parameter: null when absent, else a queue name of 1 to MAX_QUEUE_CHARS, or a Problem. */
export function parseQueue(raw: string | null): Checked<string | null> {
  if (raw !== null && (raw.length === 0 || raw.length > MAX_QUEUE_CHARS))
    return new Problem('invalid_queue', `queue must be a queue name of 1 to ${MAX_QUEUE_CHARS} characters`);
  return raw;
}

/** The query string's `limit`, `queue` and `cursor`; a Problem naming the parameter when one is malformed. */
export function parseFailingQuery(q: URLSearchParams): Checked<FailingQuery> {
  const limit = parseLimit(q.get('limit'), DEFAULT_FAILING_LIMIT, MAX_FAILING_LIMIT);
  if (limit instanceof Problem) return limit;
  const queue = parseQueue(q.get('queue'));
  if (queue instanceof Problem) return queue;
  const cursor = q.get('cursor');
  const after = cursor === null || cursor === '' ? null : decodeCursor(cursor);
  return after instanceof Problem ? after : { limit, queue, after };
}

/**
 * The `k` smallest entries by compareFailing among those `keep` admits, in order: one pass that holds at
 * most `k` entries, so a page costs O(failing rows × log k) and never sorts or copies the whole list.
 */
function smallest<E>(
  entries: Iterable<E>,
  k: number,
  compare: (a: E, b: E) => number,
  keep: (e: E) => boolean,
): E[] {
  const best: E[] = [];
  for (const e of entries) {
    if (best.length === k && compare(e, best[k - 1]!) >= 0) continue;
    if (!keep(e)) continue;
    let lo = 0;
    let hi = best.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compare(best[mid]!, e) < 0) lo = mid + 1;
      else hi = mid;
    }
    best.splice(lo, 0, e);
    if (best.length > k) best.pop();
  }
  return best;
}

/**
 * One page of the list: the entries of `queue` (when given) after the cursor, worst first, that `accept`
 * turns into a shown row (an entry whose row no longer fails is passed over), at most `limit`, and the
 * cursor of the next page (null on the last). `entries` is walked once per pass; passed-over entries
 * cost another pass only when they leave the page short.
 */
export function failingPage<T>(
  entries: () => Iterable<FailingEntry>,
  query: FailingQuery,
  queueOf: (url: string) => string,
  accept: (e: FailingEntry) => T | undefined,
): { page: T[]; next: string | null } {
  return orderedPage(
    entries,
    query,
    { compare: compareFailing, after: (e, from) => compareFailing(e, from) > 0, encode: encodeCursor },
    (e) => queueOf(e.url),
    accept,
  );
}

/**
 * How a listed entry is ordered, whether it comes after a cursor's place `P`, and how a page's last entry
 * becomes the next page's cursor.
 */
export interface ListOrder<E, P> {
  compare: (a: E, b: E) => number;
  after: (e: E, from: P) => boolean;
  encode: (e: E) => string;
}

/**
 * One page of an ordered list (the failing list, the retired list): the entries of `queue` (when given)
 * after the cursor, in `order`, that `accept` turns into a shown row, at most `limit`, and the cursor of
 * the next page (null on the last).
 */
export function orderedPage<E, P, T>(
  entries: () => Iterable<E>,
  query: { limit: number; queue: string | null; after: P | null },
  order: ListOrder<E, P>,
  queueOf: (e: E) => string,
  accept: (e: E) => T | undefined,
): { page: T[]; next: string | null } {
  const { queue, limit } = query;
  const page: T[] = [];
  let from: P | null = query.after;
  let last: E | null = null;
  for (;;) {
    const want = limit - page.length + 1;
    const since = from;
    const lastSeen: E | null = last;
    const batch: E[] = smallest(
      entries(),
      want,
      order.compare,
      (e: E): boolean =>
        (lastSeen !== null ? order.compare(e, lastSeen) > 0 : since === null || order.after(e, since)) &&
        (queue === null || queueOf(e) === queue),
    );
    for (const e of batch) {
      if (page.length === limit) return { page, next: order.encode(last!) };
      last = e;
      from = null;
      const row = accept(e);
      if (row !== undefined) page.push(row);
    }
    if (batch.length < want) return { page, next: null };
  }
}
