// The failing list's order and paging (util/schedule/failing.ts), over plain entries.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  compareFailing,
  failingPage,
  parseFailingQuery as parseFailingQueryOrProblem,
  type FailingEntry,
} from '../../util/schedule/failing.js';
import { orRefuse } from '../../services/http/problems.js';

/** The query as the route answers it: a problem thrown as its HTTP answer. */
const parseFailingQuery = (q: URLSearchParams) => orRefuse(parseFailingQueryOrProblem(q));

const queueOf = (url: string) => new URL(url).pathname.split('/')[1] ?? 'unrouted';

test('pages walked cursor to cursor list every failing row once, worst first, and only of the queue asked for', () => {
  // Two devices of one URL are two entries that differ only by key: the order still sets them apart.
  const entry = fc
    .record({
      url: fc.tuple(fc.constantFrom('a', 'b', 'c'), fc.nat(50)).map(([q, n]) => `https://x.test/${q}/${n}`),
      deviceType: fc.constantFrom('desktop', 'mobile'),
      strikes: fc.integer({ min: 1, max: 6 }),
      failingSince: fc.integer({ min: 0, max: 5 }),
    })
    .map((e): FailingEntry => ({ ...e, key: `${e.url}|${e.deviceType}` }));
  fc.assert(
    fc.property(
      fc.uniqueArray(entry, { selector: (e) => e.key, maxLength: 60 }),
      fc.integer({ min: 1, max: 9 }),
      fc.constantFrom(null, 'a', 'b'),
      fc.array(fc.nat(60)),
      (entries, limit, queue, staleAt) => {
        // Entries whose row no longer fails are passed over, and pages still fill up.
        const stale = new Set(staleAt.map((i) => entries[i]?.key).filter((u) => u !== undefined));
        const seen: FailingEntry[] = [];
        let cursor: string | null = null;
        for (let pages = 0; pages < 100; pages++) {
          const q: URLSearchParams = new URLSearchParams({
            limit: String(limit),
            ...(queue ? { queue } : {}),
            ...(cursor ? { cursor } : {}),
          });
          const { page, next }: { page: FailingEntry[]; next: string | null } = failingPage(
            () => entries,
            parseFailingQuery(q),
            queueOf,
            (e) => (stale.has(e.key) ? undefined : e),
          );
          assert.ok(page.length <= limit);
          if (next !== null) assert.equal(page.length, limit, 'only the last page is short');
          seen.push(...page);
          cursor = next;
          if (next === null) break;
        }
        const want = entries
          .filter((e) => (queue === null || queueOf(e.url) === queue) && !stale.has(e.key))
          .sort(compareFailing);
        assert.deepEqual(seen, want);
      },
    ),
  );
});

test('the order is most strikes first, then the oldest run, then the key', () => {
  const e = (url: string, strikes: number, failingSince: number) => ({
    key: `${url}|desktop`,
    url,
    strikes,
    failingSince,
  });
  const list = [
    e('https://x.test/c', 2, 5),
    e('https://x.test/b', 3, 9),
    e('https://x.test/a', 2, 5),
    e('https://x.test/d', 2, 1),
  ];
  assert.deepEqual(
    [...list].sort(compareFailing).map((x) => x.url),
    ['https://x.test/b', 'https://x.test/d', 'https://x.test/a', 'https://x.test/c'],
  );
});

test('a malformed limit, queue or cursor is a 400 naming the parameter', () => {
  for (const [q, code] of [
    ['limit=0', 'invalid_limit'],
    ['limit=501', 'invalid_limit'],
    ['limit=2.5', 'invalid_limit'],
    ['limit=abc', 'invalid_limit'],
    ['queue=', 'invalid_queue'],
    ['cursor=bm90LWpzb24', 'invalid_cursor'],
    ['cursor=%5B1%5D', 'invalid_cursor'],
  ] as const)
    assert.throws(() => parseFailingQuery(new URLSearchParams(q)), { status: 400, code }, q);
  assert.equal(parseFailingQuery(new URLSearchParams('')).limit, 50);
});
