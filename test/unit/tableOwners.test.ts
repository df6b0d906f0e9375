// One owner per table (STYLE.md): a source file other than the owner that names a table fails here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { repoRoot } from '../harness.js';

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sources(p));
    else if (name.endsWith('.ts')) out.push(p);
  }
  return out;
}

const all = [
  join(repoRoot, 'resources.ts'),
  ...sources(join(repoRoot, 'util')),
  ...sources(join(repoRoot, 'services')),
];

/** Source without comments: a comment may name a table, only code can touch one. */
function code(file: string): string {
  return readFileSync(file, 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
}

function namers(pattern: RegExp): string[] {
  return all.filter((f) => pattern.test(code(f))).map((f) => relative(repoRoot, f));
}

test('only the schedule owner reads or writes RenderSchedule', () => {
  assert.deepEqual(namers(/RenderSchedule|['"]render_schedule['"]/), ['services/schedule/store.ts']);
});

test('only the fleets module reads or writes Fleet and NotifyHook', () => {
  assert.deepEqual(namers(/['"](Fleet|NotifyHook)['"]/), ['services/notify/fleets.ts']);
});

test('only the stall ledger reads or writes QueueStallNudge', () => {
  assert.deepEqual(namers(/['"]QueueStallNudge['"]/), ['services/stall/ledger.ts']);
});

test('only the membership module reads or writes QueueNode', () => {
  assert.deepEqual(namers(/['"]QueueNode['"]/), ['services/cluster/membership.ts']);
});

test('only the due-summary module reads or writes QueueDueSummary', () => {
  assert.deepEqual(namers(/['"]QueueDueSummary['"]/), ['services/stall/dueSummaries.ts']);
});

test('the check itself sees a file that names the table', () => {
  // Guard against a test that cannot fail: the owner must be found by the same scan.
  assert.ok(all.some((f) => f.endsWith(join('services', 'schedule', 'store.ts'))));
  assert.ok(namers(/RenderSchedule/).length >= 1);
});

test('only the page store reads or writes RenderedPage', () => {
  assert.deepEqual(namers(/['"]RenderedPage['"]/), ['services/pages/store.ts']);
});
