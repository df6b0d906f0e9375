import { test } from 'node:test';
import assert from 'node:assert/strict';
import { orphanedPages } from '../../util/pageSweep.js';

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
