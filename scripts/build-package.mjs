// `npm pack` / `npm publish` (prepack): a fresh build of exactly what the component loads at run time.
// It removes the runtime part of dist/, compiles resources.ts, api.ts (the in-process API), services/ and
// util/ without source maps (the package ships no sources for them to point at), compiles the request
// shapes of docs/openapi.yaml to dist/util/requests/shapes.js (scripts/request-shapes.mjs), then deletes
// any compiled file that dist/resources.js (or dist/api.js) does not reach through its imports (type-only
// modules compile to empty ones).
// dist/test and dist/bench are left alone: package.json's `files` keeps them out of the package.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(repo, 'dist');
const runtimeDirs = ['services', 'util'];

for (const f of ['resources.js', 'resources.js.map', 'api.js', 'api.js.map'])
  rmSync(join(dist, f), { force: true });
for (const d of runtimeDirs) rmSync(join(dist, d), { recursive: true, force: true });

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const built = spawnSync(process.execPath, [tsc, '-p', join(repo, 'tsconfig.build.json')], {
  stdio: 'inherit',
});
if (built.status !== 0) process.exit(built.status ?? 1);
// The request shapes, compiled to code from docs/openapi.yaml (the package ships no docs/).
const shaped = spawnSync(process.execPath, [join(repo, 'scripts', 'request-shapes.mjs')], {
  stdio: 'inherit',
});
if (shaped.status !== 0) process.exit(shaped.status ?? 1);

/** Every file reached from `entry` through relative static or dynamic imports. */
function reachable(entry) {
  const seen = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const src = readFileSync(file, 'utf8');
    for (const m of src.matchAll(/\bfrom\s*['"](\.[^'"]+)['"]|\bimport\s*\(?\s*['"](\.[^'"]+)['"]/g))
      visit(resolve(dirname(file), m[1] ?? m[2]));
  };
  visit(entry);
  return seen;
}

function walk(dir) {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}

const used = reachable(join(dist, 'resources.js'));
const pruned = [];
for (const d of runtimeDirs)
  for (const f of walk(join(dist, d)))
    if (!used.has(f)) {
      rmSync(f);
      pruned.push(relative(repo, f));
    }
console.log(
  `built the package's runtime: ${used.size} modules under dist/` +
    (pruned.length ? `; left out ${pruned.join(', ')} (not imported at run time)` : ''),
);
