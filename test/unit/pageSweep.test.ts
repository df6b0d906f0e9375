import { test } from 'node:test';
import assert from 'node:assert/strict';
import { orphanedPages, PageWalk, sweepPages } from '../../util/pages/sweep.js';

const rows = new Set(['https://a.example.com/kept']);
const hasRow = (url: string) => rows.has(url);
const now = 10_000_000;

test('a page whose row is gone is an orphan, a page with its row is not', () => {
  const entries = [
    { url: 'https://a.example.com/kept', renderedAt: now - 5 },
    { url: 'https://a.example.com/gone', renderedAt: now - 5 },
  ];
  assert.deepEqual(orphanedPages(entries, hasRow, now, 0), ['https://a.example.com/gone']);
});

test('within the grace a page without its row is left alone; after it, it goes', () => {
  const entries = [
    { url: 'https://a.example.com/fresh', renderedAt: now - 999 },
    { url: 'https://a.example.com/old', renderedAt: now - 1000 },
    { url: 'https://a.example.com/undated', renderedAt: null },
  ];
  assert.deepEqual(orphanedPages(entries, hasRow, now, 1000), [
    'https://a.example.com/old',
    'https://a.example.com/undated',
  ]);
});

/** An ordered key-value store with lmdb-js's getRange options (start, exclusiveStart, limit). */
function store(entries: Array<[string, unknown]>) {
  const sorted = [...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return {
    reads: 0,
    getRange(opts: { start?: string; exclusiveStart?: boolean; limit: number }) {
      this.reads++;
      const from = sorted.filter(([k]) =>
        opts.start === undefined ? true : opts.exclusiveStart ? k > opts.start : k >= opts.start,
      );
      return from.slice(0, opts.limit).map(([key, value]) => ({ key, value }));
    },
  };
}

test('the walk reads a bounded chunk per step, resumes after the last key and starts over at the end', () => {
  const s = store([
    ['u1', { renderedAt: 1 }],
    ['u2', { renderedAt: 2 }],
    ['u3', null],
    ['u4', { renderedAt: 4 }],
    ['u5', {}],
  ]);
  const walk = new PageWalk(2);
  const urls = () => walk.next(s).map((e) => e.url);
  assert.deepEqual(urls(), ['u1', 'u2']);
  assert.deepEqual(urls(), ['u4'], 'a tombstone is skipped but moves the cursor');
  assert.deepEqual(walk.next(s), [{ url: 'u5', renderedAt: null }]);
  assert.deepEqual(urls(), ['u1', 'u2'], 'a short read wrapped the cursor to the start');
});

test("a sweep run reads its pages a chunk at a time with a turn between chunks, and stops at its budget or the walk's end", async () => {
  // Without the turns a run's 2,000 page decodes and row reads are one hold of worker 0.
  const pad = (i: number) => `https://a.example.com/${String(i).padStart(4, '0')}`;
  const s = store(Array.from({ length: 2100 }, (_, i) => [pad(i), { renderedAt: 1 }] as [string, unknown]));
  const kept = new Set(Array.from({ length: 2100 }, (_, i) => pad(i)).filter((_, i) => i % 3 !== 0));
  const log: string[] = [];
  const run = (walk: PageWalk) =>
    sweepPages({
      walk,
      store: s,
      hasRow: (url) => kept.has(url),
      now,
      graceMs: 0,
      pages: 1000,
      remove: async (urls) => (log.push(`remove ${urls.length}`), urls.length),
      yieldLoop: async () => void log.push('turn'),
    });
  const walk = new PageWalk(250);
  assert.deepEqual(await run(walk), { checked: 1000, removed: 334 });
  assert.deepEqual(log, ['remove 84', 'turn', 'remove 83', 'turn', 'remove 83', 'turn', 'remove 84']);
  assert.equal(s.reads, 4, 'four chunks of 250 make the budget of 1,000');
  log.length = 0;
  assert.deepEqual(
    await run(walk),
    { checked: 1000, removed: 333 },
    'the next run goes on where this one stopped',
  );
  log.length = 0;
  assert.deepEqual(await run(walk), { checked: 100, removed: 33 }, 'the walk ended: the run stops there');
  assert.deepEqual(log, ['remove 33']);
  assert.ok(walk.atStart, 'and the next run starts over');
});
