// The failing list's order and pages (docs/operating.md "Failing rows"): the rows whose last result
// failed, worst first — most consecutive strikes, then the oldest start of the run, then the URL — in
// pages of `limit` behind an opaque cursor. Pure: the entries come from the failing index the schedule
// owner keeps beside the rows, so a page costs a walk of the failing rows only, never of the schedule.
import { Problem, type Checked } from '../problem.js';

export interface FailingEntry {
  url: string;
  strikes: number;
  failingSince: number;
}

export interface FailingQuery {
  limit: number;
  queue: string | null;
  /** The last entry of the previous page, or null for the first page. */
  after: FailingEntry | null;
}

export const DEFAULT_FAILING_LIMIT = 50;
export const MAX_FAILING_LIMIT = 500;
const MAX_QUEUE_CHARS = 200;

/** Worst first: more strikes, then an older run, then the URL (a total order, so pages never overlap). */
export function compareFailing(a: FailingEntry, b: FailingEntry): number {
  if (a.strikes !== b.strikes) return b.strikes - a.strikes;
  if (a.failingSince !== b.failingSince) return a.failingSince - b.failingSince;
  return a.url < b.url ? -1 : a.url > b.url ? 1 : 0;
}

export function encodeCursor(e: FailingEntry): string {
  return Buffer.from(JSON.stringify([e.strikes, e.failingSince, e.url])).toString('base64url');
}

function decodeCursor(cursor: string): Checked<FailingEntry> {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    v = null;
  }
  if (
    !Array.isArray(v) ||
    v.length !== 3 ||
    typeof v[0] !== 'number' ||
    typeof v[1] !== 'number' ||
    typeof v[2] !== 'string'
  )
    return new Problem('invalid_cursor', 'cursor must be the `next` value of an earlier page, unchanged');
  return { strikes: v[0], failingSince: v[1], url: v[2] };
}

/** The query string's `limit`, `queue` and `cursor`; a Problem naming the parameter when one is malformed. */
export function parseFailingQuery(q: URLSearchParams): Checked<FailingQuery> {
  const rawLimit = q.get('limit');
  let limit = DEFAULT_FAILING_LIMIT;
  if (rawLimit !== null) {
    limit = /^\d{1,4}$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(limit >= 1 && limit <= MAX_FAILING_LIMIT))
      return new Problem('invalid_limit', `limit must be an integer from 1 to ${MAX_FAILING_LIMIT}`);
  }
  const queue = q.get('queue');
  if (queue !== null && (queue.length === 0 || queue.length > MAX_QUEUE_CHARS))
    return new Problem('invalid_queue', `queue must be a queue name of 1 to ${MAX_QUEUE_CHARS} characters`);
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
    { compare: compareFailing, encode: encodeCursor },
    (e) => queueOf(e.url),
    accept,
  );
}

/** How a listed entry is ordered and how a page's last one becomes the next page's cursor. */
export interface ListOrder<E> {
  compare: (a: E, b: E) => number;
  encode: (e: E) => string;
}

/**
 * One page of an ordered list (the failing list, the retired list): the entries of `queue` (when given)
 * after the cursor, in `order`, that `accept` turns into a shown row, at most `limit`, and the cursor of
 * the next page (null on the last).
 */
export function orderedPage<E extends { url: string }, T>(
  entries: () => Iterable<E>,
  query: { limit: number; queue: string | null; after: E | null },
  order: ListOrder<E>,
  queueOf: (e: E) => string,
  accept: (e: E) => T | undefined,
): { page: T[]; next: string | null } {
  const { queue, limit } = query;
  const page: T[] = [];
  let after = query.after;
  for (;;) {
    const want = limit - page.length + 1;
    const from = after;
    const batch = smallest(
      entries(),
      want,
      order.compare,
      (e) => (from === null || order.compare(e, from) > 0) && (queue === null || queueOf(e) === queue),
    );
    for (const e of batch) {
      if (page.length === limit) return { page, next: order.encode(after!) };
      after = e;
      const row = accept(e);
      if (row !== undefined) page.push(row);
    }
    if (batch.length < want) return { page, next: null };
  }
}
