// One owner per table (STYLE.md): a source file other than the owner that names a table fails here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { repoRoot } from '../harness.js';
import { sourceFiles } from '../sourceFiles.js';

/**
 * Every table of schema.graphql and the source files that may name it, one line a table. When an owner
 * module moves, change its line here and nothing else.
 */
const OWNERS: Record<string, readonly string[]> = {
  RenderSchedule: ['services/schedule/store.ts'],
  RenderFailing: ['services/schedule/store.ts'],
  RenderRetired: ['services/schedule/store.ts'],
  Fleet: ['services/notify/fleets.ts'],
  NotifyHook: ['services/notify/fleets.ts'],
  QueueStallNudge: ['services/stall/ledger.ts'],
  QueueClaimMark: ['services/leases/claimMarks.ts'],
  QueueStatus: ['services/status/control.ts'],
  QueueControl: ['services/status/control.ts'],
  RenderedPage: ['services/pages/store.ts'],
  QueueConfigOverride: ['services/runtime/config.ts'],
  NodeLocal: ['services/runtime/sharedBuffers.ts'],
  QueueDeviceDuty: ['services/devices/duties.ts'],
  QueueDueSummary: ['services/stall/dueSummaries.ts'],
  QueueNode: ['services/cluster/membership.ts'],
  QueueRepair: ['services/cluster/repair.ts'],
  RenderSitemap: ['services/sitemaps/store.ts'],
  RenderSitemapFile: ['services/sitemaps/store.ts'],
};

const all = [
  join(repoRoot, 'resources.ts'),
  ...sourceFiles(join(repoRoot, 'util')),
  ...sourceFiles(join(repoRoot, 'services')),
];

/** Source without comments: a comment may name a table, only code can touch one. */
function code(file: string): string {
  return readFileSync(file, 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
}

const sourceCode = all.map((f) => ({ file: relative(repoRoot, f), text: code(f) }));

/** `type Name @table(database: "db"…)` of schema.graphql, in order. */
const tables = [
  ...readFileSync(join(repoRoot, 'schema.graphql'), 'utf8').matchAll(
    /^type\s+(\w+)\s+@table\(\s*database:\s*"(\w+)"/gm,
  ),
].map(([, name, database]) => ({ name: name!, database: database! }));

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * How code reaches a table: its name as a string (`table('render_queue', 'Fleet')`) or as a property
 * (`databases.render_queue.Fleet`, `tables.Fleet`), or the name of a database it has to itself.
 */
function reachPattern(name: string, database: string): RegExp {
  const alone = tables.filter((t) => t.database === database).length <= 1;
  const n = escape(name);
  return new RegExp(`['"\`]${n}['"\`]|\\.${n}\\b${alone ? `|['"\`.]${escape(database)}\\b` : ''}`);
}

function namers(pattern: RegExp): string[] {
  return sourceCode
    .filter((s) => pattern.test(s.text))
    .map((s) => s.file)
    .sort();
}

test('every table of schema.graphql has an owner line, and every owner line a table', () => {
  assert.ok(tables.length >= 11, `read only ${tables.length} tables from schema.graphql`);
  assert.deepEqual(tables.map((t) => t.name).sort(), Object.keys(OWNERS).sort());
});

for (const { name, database } of tables) {
  const owners = OWNERS[name] ?? [];
  test(`only ${owners.join(' and ') || 'its owner'} reads or writes ${name}`, () => {
    // Equality, not inclusion: the owner must be found by the same scan, so a pattern that matched
    // nothing would fail here too.
    assert.deepEqual(namers(reachPattern(name, database)), [...owners].sort());
  });
}

test('the scan sees a file that names a table as a property, not only as a string', () => {
  const pattern = reachPattern('Fleet', 'render_queue');
  assert.ok(pattern.test('const f = databases.render_queue.Fleet;'));
  assert.ok(pattern.test("table('render_queue', 'Fleet')"));
  assert.ok(!pattern.test('interface Fleetish {}'));
  // A database with one table is reached by its name too; one with more only by a table's name.
  assert.ok(reachPattern('RenderSitemapFile', 'solo_db').test("databases['solo_db']"));
  assert.ok(!reachPattern('NodeLocal', 'queue_local').test("databases['queue_local']"));
});
