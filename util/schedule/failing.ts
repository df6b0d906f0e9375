// The failing list's order and pages (docs/operating.md "Failing rows"): the rows whose last result
// failed, worst first — most consecutive strikes, then the oldest start of the run, then the URL — in
// pages of `limit` behind an opaque cursor. Pure: the entries come from the failing index the schedule
// owner keeps beside the rows, so a page costs a walk of the failing rows only, never of the schedule.
import { badRequest } from '../http/errors.js';

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

function decodeCursor(cursor: string): FailingEntry {
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
    throw badRequest('invalid_cursor', 'cursor must be the `next` value of an earlier page, unchanged');
  return { strikes: v[0], failingSince: v[1], url: v[2] };
}

/** The query string's `limit`, `queue` and `cursor`; a 400 naming the parameter when one is malformed. */
export function parseFailingQuery(q: URLSearchParams): FailingQuery {
  const rawLimit = q.get('limit');
  let limit = DEFAULT_FAILING_LIMIT;
  if (rawLimit !== null) {
    limit = /^\d{1,4}$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(limit >= 1 && limit <= MAX_FAILING_LIMIT))
      throw badRequest('invalid_limit', `limit must be an integer from 1 to ${MAX_FAILING_LIMIT}`);
  }
  const queue = q.get('queue');
  if (queue !== null && (queue.length === 0 || queue.length > MAX_QUEUE_CHARS))
    throw badRequest('invalid_queue', `queue must be a queue name of 1 to ${MAX_QUEUE_CHARS} characters`);
  const cursor = q.get('cursor');
  return { limit, queue, after: cursor === null || cursor === '' ? null : decodeCursor(cursor) };
}

/**
 * One page of the list: the entries of `queue` (when given) after the cursor, worst first, at most
 * `limit`, and the cursor of the next page (null on the last).
 */
export function failingPage(
  entries: Iterable<FailingEntry>,
  query: FailingQuery,
  queueOf: (url: string) => string,
): { page: FailingEntry[]; next: string | null } {
  const { after, queue, limit } = query;
  const picked: FailingEntry[] = [];
  for (const e of entries) {
    if (after !== null && compareFailing(e, after) <= 0) continue;
    if (queue !== null && queueOf(e.url) !== queue) continue;
    picked.push(e);
  }
  picked.sort(compareFailing);
  const page = picked.slice(0, limit);
  return { page, next: picked.length > limit ? encodeCursor(page[page.length - 1]!) : null };
}
