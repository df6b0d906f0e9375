// The retired list's order and pages (docs/operating.md "Retired rows"): rows a render verdict retired,
// newest first, in pages of `limit` behind an opaque cursor. Pure: the entries come from the retired
// table the schedule owner writes with each retirement, so a page costs a walk of that table only.
import { Problem, type Checked } from '../problem.js';
import { decodePlace, encodePlace, orderedPage, parseFailingQuery } from './failing.js';
import type { RetiredEntry } from './writes.js';

/** An entry's place in the retired list's order: what a cursor holds. */
type RetiredPlace = Pick<RetiredEntry, 'retiredAt' | 'url' | 'deviceType'>;

/** Newest first, then the URL, then the device (a total order, so pages never overlap). */
export function compareRetired(a: RetiredPlace, b: RetiredPlace): number {
  if (a.retiredAt !== b.retiredAt) return b.retiredAt - a.retiredAt;
  if (a.url !== b.url) return a.url < b.url ? -1 : 1;
  return a.deviceType < b.deviceType ? -1 : a.deviceType > b.deviceType ? 1 : 0;
}

function encodeCursor(e: RetiredPlace): string {
  return encodePlace([e.retiredAt, e.url, e.deviceType]);
}

function decodeCursor(cursor: string): Checked<RetiredPlace> {
  const v = decodePlace(cursor, ['number', 'string', 'string']);
  if (v instanceof Problem) return v;
  return { retiredAt: v[0] as number, url: v[1] as string, deviceType: v[2] as string };
}

/** One page of the retired list: entries still within the retention, newest first; a Problem naming a bad parameter. */
export function retiredPage(
  entries: () => Iterable<RetiredEntry>,
  q: URLSearchParams,
  live: (e: RetiredEntry) => boolean,
): Checked<{ rows: RetiredEntry[]; next: string | null }> {
  // The same parameters as the failing list; its cursor is read here, the limit and queue there.
  const cursor = q.get('cursor');
  const rest = new URLSearchParams(q);
  rest.delete('cursor');
  const query = parseFailingQuery(rest);
  if (query instanceof Problem) return query;
  const { limit, queue } = query;
  let after: RetiredPlace | null = null;
  if (cursor !== null && cursor !== '') {
    const at = decodeCursor(cursor);
    if (at instanceof Problem) return at;
    after = at;
  }
  const { page, next } = orderedPage(
    entries,
    { limit, queue, after },
    { compare: compareRetired, after: (e, from) => compareRetired(e, from) > 0, encode: encodeCursor },
    (e) => e.queue,
    (e) => (live(e) ? e : undefined),
  );
  return { rows: page, next };
}
