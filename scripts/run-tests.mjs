// Runs every compiled test file (dist/test/unit, the fleet client's client/dist/test, then
// dist/test/integration) with node's test runner. Node 20's --test takes no globs, so the files are
// listed here; `unit` (which includes the client's tests) or `integration` narrows it.
import { readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

const dirs = {
  unit: [join('dist', 'test', 'unit'), join('client', 'dist', 'test')],
  integration: [join('dist', 'test', 'integration')],
};
const groups = process.argv[2] ? [process.argv[2]] : ['unit', 'integration'];
const files = [];
for (const g of groups) {
  for (const dir of dirs[g] ?? []) {
    if (!existsSync(dir)) continue;
    for (const f of readdirSync(dir).sort()) if (f.endsWith('.test.js')) files.push(join(dir, f));
  }
}
if (files.length === 0) {
  console.error('no test files found under dist/test; did the build run?');
  process.exit(1);
}
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...files], { stdio: 'inherit' });
process.exit(r.status ?? 1);
