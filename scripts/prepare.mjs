// npm's `prepare`: runs after `npm install` in this checkout and when npm installs queue-keeper from a
// git URL (npm first installs the devDependencies, typescript among them, into the clone). It builds
// everything, tests included. It does nothing in two cases:
// - `npm pack` and `npm publish` run it right after `prepack` has made the package's own build
//   (scripts/build-package.mjs); building again would only add source maps the package does not ship;
// - a packed copy (no tsconfig.json, no sources) that someone runs `npm install` in, as Harper's
//   deploy_component does: its dist/ is already built and there is nothing to compile.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';

if (process.env.npm_command === 'pack' || process.env.npm_command === 'publish') process.exit(0);
if (!existsSync('tsconfig.json')) process.exit(0);
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
// The fleet client (an npm workspace) first: the tests import its built types.
for (const project of ['client/tsconfig.json', 'tsconfig.json']) {
  if (!existsSync(project)) continue;
  const r = spawnSync(process.execPath, [tsc, '-p', project], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
// The request shapes, compiled to code from docs/openapi.yaml into dist/ (scripts/request-shapes.mjs).
const shaped = spawnSync(process.execPath, ['scripts/request-shapes.mjs'], { stdio: 'inherit' });
if (shaped.status !== 0) process.exit(shaped.status ?? 1);
