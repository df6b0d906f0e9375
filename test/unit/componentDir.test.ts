// The component directory is found from the compiled file's place in dist/: config.yaml, package.json
// and web/ are read from it (a wrong depth silently dropped the config.yaml options and the console).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { componentDir } from '../../services/runtime/componentDir.js';

test('componentDir is the folder holding the package.json of queue-keeper, its config.yaml and web/', () => {
  const pkg = JSON.parse(readFileSync(join(componentDir, 'package.json'), 'utf8')) as { name?: string };
  assert.equal(pkg.name, 'queue-keeper');
  assert.ok(existsSync(join(componentDir, 'config.yaml')));
  assert.ok(existsSync(join(componentDir, 'web')));
});
