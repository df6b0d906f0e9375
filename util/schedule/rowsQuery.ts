// The rows view (GET /prerender_admin/rows, docs/operating.md "Rows one by one"): its query, the state
// a row is in, the entries the actions take, and a page of a walk in key order. Pure: the walk's rows
// come from the schedule's primary key order (a prefix is a key range there), the failing and retired
// lists from their own small tables, so a page reads at most ROWS_SCAN_LIMIT schedule rows whatever the
// table holds.
import { Problem, type Checked } from '../problem.js';
import { isWellFormed } from '../text.js';
import { splitRowKey } from './rowKey.js';
import { urlProblem } from './targetChecks.js';
import { badCursor, parseLimit, parseQueue } from './failing.js';

export const ROW_STATES = ['due', 'leased', 'failing', 'suppressed', 'gone', 'all'] as const;
export type RowStateFilter = (typeof ROW_STATES)[number];

/** What one row is at an instant, as the rows view shows it. */
export type RowState = 'due' | 'leased' | 'scheduled';

export interface RowsQuery {
  state: RowStateFilter;
  queue: string | null;
  /** A prefix of the URL string; null lists from the first key. */
  prefix: string | null;
  limit: number;
  /** The raw cursor: a key for the walk's states, the failing or retired list's own cursor for theirs. */
  cursor: string | null;
}

export const DEFAULT_ROWS_LIMIT = 50;
export const MAX_ROWS_LIMIT = 500;
/**
 * Schedule rows one page of a key walk reads at most: the bound on a page's cost. A page of a sparse
 * state may come back short (even empty) with a `next` to go on from.
 */
export const ROWS_SCAN_LIMIT = 5_000;
const MAX_PREFIX_CHARS = 2_048;
const MAX_CURSOR_CHARS = 4_096;
/** Entries one action takes. */
export const MAX_ROW_ENTRIES = 1_000;

/** The query string's parameters, or a Problem naming the first malformed one. */
export function parseRowsQuery(q: URLSearchParams): Checked<RowsQuery> {
  const state = (q.get('state') ?? 'all') as RowStateFilter;
  if (!ROW_STATES.includes(state))
    return new Problem('invalid_query', `state must be one of ${ROW_STATES.join(', ')}`);
  const limit = parseLimit(q.get('limit'), DEFAULT_ROWS_LIMIT, MAX_ROWS_LIMIT);
  if (limit instanceof Problem) return limit;
  const queue = parseQueue(q.get('queue'));
  if (queue instanceof Problem) return queue;
  const prefix = q.get('prefix');
  if (prefix !== null && (prefix.length > MAX_PREFIX_CHARS || !isWellFormed(prefix)))
    return new Problem(
      'invalid_query',
      `prefix must be well-formed text of at most ${MAX_PREFIX_CHARS} characters`,
    );
  const cursor = q.get('cursor');
  if (cursor !== null && (cursor.length > MAX_CURSOR_CHARS || !isWellFormed(cursor))) return badCursor();
  return {
    state,
    queue,
    prefix: prefix === '' ? null : prefix,
    limit,
    cursor: cursor === null || cursor === '' ? null : cursor,
  };
}

/** Where a key walk for this prefix starts, and the first key past its range (undefined: the end). */
export function prefixRange(prefix: string | null): { start: string | undefined; end: string | undefined } {
  if (prefix === null) return { start: undefined, end: undefined };
  // Every string that starts with the prefix sorts below the prefix followed by the highest code unit.
  return { start: prefix, end: prefix + '\uffff' };
}

/** The key a walk's cursor names, or a Problem: a key walk's cursor is the last key it read, base64url. */
export function decodeKeyCursor(cursor: string): Checked<string> {
  const key = Buffer.from(cursor, 'base64url').toString('utf8');
  if (key.length === 0 || Buffer.from(key, 'utf8').toString('base64url') !== cursor || !isWellFormed(key))
    return badCursor();
  return key;
}

export const encodeKeyCursor = (key: string): string => Buffer.from(key, 'utf8').toString('base64url');

/** A row's state at `now`: leased (a live lease, grace or hold blocks it), else due or scheduled. */
export function rowStateOf(nextRenderTime: number, leased: boolean, now: number): RowState {
  if (leased) return 'leased';
  return nextRenderTime <= now ? 'due' : 'scheduled';
}

/**
 * One page of a walk in key order: `walk` yields the keys from the start on (at most `scanLimit`),
 * `accept` turns a key into an entry or passes it over. The page ends when it holds `limit` entries or
 * the walk is spent; `next` is the cursor after the last key read, null when the walk ended on its own.
 */
export function keyWalkPage<T>(
  walk: Iterable<string>,
  limit: number,
  scanLimit: number,
  accept: (key: string) => T | undefined,
): { page: T[]; next: string | null } {
  const page: T[] = [];
  let last: string | null = null;
  let read = 0;
  for (const key of walk) {
    last = key;
    read++;
    const entry = accept(key);
    if (entry !== undefined) page.push(entry);
    if (page.length >= limit) break;
  }
  const spent = read < scanLimit && page.length < limit;
  return { page, next: spent || last === null ? null : encodeKeyCursor(last) };
}

/** One entry of an action: a URL (every device's row of it) or a row key (that row alone). */
export type RowTarget = { kind: 'url'; url: string } | { kind: 'key'; key: string };

/** An action's `urls`, each a URL or a row key; a Problem naming the first bad one. */
export function checkRowTargets(body: unknown): Checked<RowTarget[]> {
  const urls = (body as { urls?: unknown } | null)?.urls;
  if (!Array.isArray(urls) || urls.length === 0 || urls.length > MAX_ROW_ENTRIES)
    return new Problem('invalid_body', `urls must be a list of 1 to ${MAX_ROW_ENTRIES} URLs or row keys`);
  const out: RowTarget[] = [];
  for (let i = 0; i < urls.length; i++) {
    const u: unknown = urls[i];
    const parts = typeof u === 'string' ? splitRowKey(u) : null;
    if (parts !== null && urlProblem(parts.url) === null) {
      out.push({ kind: 'key', key: u as string });
      continue;
    }
    const p = urlProblem(u);
    if (p !== null) return new Problem('invalid_url', `urls[${i}]: ${p}`);
    out.push({ kind: 'url', url: u as string });
  }
  return out;
}

/** A lease the rows view lists for `leased`: its row key and when it ends. */
export interface LeasedPlace {
  key: string;
  expiresAt: number;
}

const compareLeased = (a: LeasedPlace, b: LeasedPlace): number =>
  a.expiresAt - b.expiresAt || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

/**
 * A page of ranked places after the cursor's place, in `order`: the cursor is the last entry's
 * `[rank, key]`, so a page costs a filter and a sort of the candidates, never a walk of the schedule.
 * `accept` turns a candidate into an entry or passes it over; `distinct` lists a key once a page.
 */
function rankedPage<P extends { key: string }, T>(
  candidates: readonly P[],
  limit: number,
  cursor: string | null,
  accept: (c: P) => T | undefined,
  order: {
    compare: (a: P, b: P) => number;
    rank: (p: P) => number;
    place: (rank: number, key: string) => P;
    distinct: boolean;
  },
): Checked<{ page: T[]; next: string | null }> {
  let after: P | null = null;
  if (cursor !== null) {
    let v: unknown;
    try {
      v = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    } catch {
      v = null;
    }
    if (!Array.isArray(v) || v.length !== 2 || typeof v[0] !== 'number' || typeof v[1] !== 'string')
      return new Problem('invalid_cursor', 'cursor must be the `next` value of an earlier page, unchanged');
    after = order.place(v[0], v[1]);
  }
  const sorted = candidates.filter((c) => after === null || order.compare(c, after) > 0).sort(order.compare);
  const seen = new Set<string>();
  const page: T[] = [];
  let last: P | null = null;
  let i = 0;
  for (; i < sorted.length && page.length < limit; i++) {
    const c = sorted[i]!;
    if (order.distinct) {
      if (seen.has(c.key)) continue;
      seen.add(c.key);
    }
    const e = accept(c);
    if (e === undefined) continue;
    page.push(e);
    last = c;
  }
  const more = i < sorted.length && last !== null;
  return {
    page,
    next: more ? Buffer.from(JSON.stringify([order.rank(last!), last!.key])).toString('base64url') : null,
  };
}

/**
 * A page of leases, soonest end first (then by key), after the cursor's place. The candidates are the
 * node's noted grants (util/leases/holders.ts), at most a few per lease slot: a page costs a sort of
 * those, never a walk of the schedule. `accept` turns a candidate into an entry or passes it over.
 */
export function leasedPage<T>(
  candidates: readonly LeasedPlace[],
  limit: number,
  cursor: string | null,
  accept: (c: LeasedPlace) => T | undefined,
): Checked<{ page: T[]; next: string | null }> {
  return rankedPage(candidates, limit, cursor, accept, {
    compare: compareLeased,
    rank: (p) => p.expiresAt,
    place: (expiresAt, key) => ({ expiresAt, key }),
    distinct: false,
  });
}

/** A due row as the ready set ranks it: its key and score (higher is handed out first). */
export interface DuePlace {
  key: string;
  score: number;
}

/** Best score first, then by key: the order of the `due` list. */
const compareDue = (a: DuePlace, b: DuePlace): number =>
  b.score - a.score || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

/**
 * A page of the `due` list from the keeper's published ready set (its best rows, at most ~1.5 × its
 * capacity), best score first, after the cursor's place. A publish between two pages re-ranks rows, so a
 * row may show twice or not at all across pages; no page ever lists one twice.
 */
export function duePage<T>(
  ranked: readonly DuePlace[],
  limit: number,
  cursor: string | null,
  accept: (c: DuePlace) => T | undefined,
): Checked<{ page: T[]; next: string | null }> {
  return rankedPage(ranked, limit, cursor, accept, {
    compare: compareDue,
    rank: (p) => p.score,
    place: (score, key) => ({ score, key }),
    distinct: true,
  });
}
