// No import cycles in the compiled component: a cycle makes load order decide which module
// sees the other half-initialised, and it is how setter slots between modules crept in.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { repoRoot } from '../harness.js';

/** Relative imports and re-exports of a compiled module (type-only imports are gone after tsc). */
function importsOf(file: string): string[] {
  const src = readFileSync(file, 'utf8');
  const specs = [
    ...src.matchAll(/^\s*(?:import|export)\s[^'"]*?\sfrom\s+['"](\.[^'"]+)['"]/gm),
    ...src.matchAll(/^\s*import\s+['"](\.[^'"]+)['"]/gm),
    ...src.matchAll(/\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g),
  ];
  return specs.map((m) => resolve(dirname(file), m[1]!));
}

function modules(dir: string, skip: (name: string) => boolean): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (!skip(name)) out.push(...modules(p, skip));
    } else if (name.endsWith('.js')) out.push(p);
  }
  return out;
}

/** Every cycle found by a depth-first walk, as the chain of files (relative to `root`). */
function cycles(root: string, files: string[]): string[][] {
  const graph = new Map(files.map((f) => [f, importsOf(f)]));
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (f: string): void => {
    state.set(f, 'open');
    stack.push(f);
    for (const d of graph.get(f) ?? []) {
      if (state.get(d) === 'open')
        found.push([...stack.slice(stack.indexOf(d)), d].map((x) => relative(root, x)));
      else if (!state.has(d)) visit(d);
    }
    stack.pop();
    state.set(f, 'done');
  };
  for (const f of files) if (!state.has(f)) visit(f);
  return found;
}

test('the compiled component has no import cycles', () => {
  const dist = join(repoRoot, 'dist');
  const files = modules(dist, (name) => name === 'test' || name === 'bench');
  assert.ok(
    files.some((f) => f.endsWith(join('services', 'leases', 'claims.js'))),
    'the walk sees the component',
  );
  assert.deepEqual(cycles(dist, files), []);
});

test('the cycle check finds a cycle when there is one', () => {
  const dir = mkdtempSync(join(tmpdir(), 'qk-cycles-'));
  try {
    writeFileSync(join(dir, 'a.js'), "import { b } from './b.js';\nexport const a = 1;\n");
    writeFileSync(join(dir, 'b.js'), "export { a } from './a.js';\nexport const b = 2;\n");
    writeFileSync(join(dir, 'c.js'), "import './a.js';\n");
    const files = modules(dir, () => false);
    assert.deepEqual(cycles(dir, files), [['a.js', 'b.js', 'a.js']]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
