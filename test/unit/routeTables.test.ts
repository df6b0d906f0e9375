// Each route module of services/http/routes/ declares its routes as one table (services/http/router.ts
// RouteEntry rows): a row per route, each naming its own handler, a function declared in the module. No route
// is registered around the table, so reading a module's table is reading everything it serves.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../harness.js';

const dir = join(repoRoot, 'services', 'http', 'routes');
const modules = readdirSync(dir)
  .filter((f) => f.endsWith('.ts'))
  .sort()
  .map((f) => ({ file: f, text: readFileSync(join(dir, f), 'utf8') }));

/** The handlers a module's table rows name (`handler: name` or `handler: timed('endpoint', name)`). */
function tableHandlers(text: string): string[] {
  return [...text.matchAll(/\bhandler: (?:timed\('[a-z_]+', (\w+)\)|(\w+)(?=\s*[,}\n]))/g)].map(
    (m) => (m[1] ?? m[2])!,
  );
}

/** Problems with one module: a route registered outside its table, or a row whose handler is not a named function of it. */
function tableProblems(file: string, text: string): string[] {
  const problems: string[] = [];
  if (/\.route\(/.test(text)) problems.push(`${file}: registers a route outside its table`);
  const handlers = tableHandlers(text);
  if (handlers.length === 0) problems.push(`${file}: has no route table`);
  for (const h of handlers)
    if (!new RegExp(`^async function ${h}\\(`, 'm').test(text))
      problems.push(`${file}: handler ${h} is not a named async function of the module`);
  if (new Set(handlers).size !== handlers.length) problems.push(`${file}: one handler serves two rows`);
  return problems;
}

test('the check finds a route registered around the table and a handler that is not a named function', () => {
  const good =
    "async function claim(deps, req) {}\nconst T = [{ method: 'POST', handler: timed('claim', claim) }];";
  assert.deepEqual(tableProblems('good.ts', good), []);
  const inline = "const T = [{ method: 'POST', handler: async (deps) => reply(1) }];";
  assert.deepEqual(tableProblems('inline.ts', inline), ['inline.ts: has no route table']);
  const aside = `${good}\nrouter.route('GET', '/x', 'admin', async () => reply(1));`;
  assert.deepEqual(tableProblems('aside.ts', aside), ['aside.ts: registers a route outside its table']);
  const borrowed = "const T = [{ method: 'GET', handler: health }];";
  assert.deepEqual(tableProblems('borrowed.ts', borrowed), [
    'borrowed.ts: handler health is not a named async function of the module',
  ]);
});

test('every route module serves its routes from one table of named handlers', () => {
  assert.ok(modules.length >= 7, `${modules.length} route modules`);
  assert.deepEqual(
    modules.flatMap((m) => tableProblems(m.file, m.text)),
    [],
  );
  assert.ok(modules.reduce((n, m) => n + tableHandlers(m.text).length, 0) >= 27, 'every route has its row');
});
