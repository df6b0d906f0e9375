// Imports point one way (docs/architecture.md). The pure core under util/ imports nothing of services/
// or the composition root; inside services/ each room imports only itself and the rooms below it in
// LAYERS; and only resources.ts reaches the node's shared-memory structures, so every service receives
// them one way (injected). A scan of the TypeScript sources, comments removed: type-only imports count
// too, since a type that points up ties the lower room to the upper one as surely as a value does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, posix, relative, sep } from 'node:path';
import { repoRoot } from '../harness.js';
import { sourceFiles } from '../sourceFiles.js';

/**
 * The rooms of services/, bottom first. A module may import modules of its own room and of the rooms
 * before it, never of one after it. `runtime` is Harper, config and the shared buffers; `http` (the
 * router and the routes) sits on everything. A new room gets its place here.
 */
const LAYERS: readonly string[] = [
  'runtime',
  'schedule',
  'cluster',
  'status',
  'pages',
  'stall',
  'notify',
  'leases',
  'results',
  'keeper',
  'metrics',
  'serving',
  'http',
];

const SHARED_STRUCTURES = 'services/runtime/sharedStructures.ts';

interface Source {
  /** Repository-relative, with `/` separators. */
  file: string;
  text: string;
}

/** Source without comments (a `//` inside a string that follows `:` or a quote is kept, as in URLs). */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');
}

/** The repository-relative `.ts` files a source imports or re-exports by a relative specifier. */
function importsOf(src: Source): string[] {
  const text = code(src.text);
  const specs = [
    ...text.matchAll(/(?:^|[;\n])\s*(?:import|export)\s[^;]*?\sfrom\s*['"](\.[^'"]+)['"]/g),
    ...text.matchAll(/(?:^|[;\n])\s*import\s*['"](\.[^'"]+)['"]/g),
    ...text.matchAll(/\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g),
  ];
  return specs.map((m) => posix.join(posix.dirname(src.file), m[1]!).replace(/\.js$/, '.ts'));
}

/** The room of a services/ file (its first folder), or null for a file outside services/. */
function roomOf(file: string): string | null {
  const parts = file.split('/');
  return parts[0] === 'services' && parts.length > 2 ? parts[1]! : null;
}

/** Every import that points up: out of util/ into services/ or the root, or to a later room of services/. */
function upward(sources: readonly Source[]): string[] {
  const found: string[] = [];
  for (const src of sources) {
    for (const target of importsOf(src)) {
      if (src.file.startsWith('util/')) {
        if (!target.startsWith('util/')) found.push(`${src.file} -> ${target}`);
        continue;
      }
      const from = roomOf(src.file);
      const to = roomOf(target);
      if (from === null) continue;
      if (to === null) {
        if (!target.startsWith('util/')) found.push(`${src.file} -> ${target}`);
        continue;
      }
      const rank = (room: string) => {
        const i = LAYERS.indexOf(room);
        return i < 0 ? Infinity : i;
      };
      if (rank(to) > rank(from)) found.push(`${src.file} (${from}) -> ${target} (${to})`);
    }
  }
  return found;
}

/** The sources that import `target`. */
function importersOf(sources: readonly Source[], target: string): string[] {
  return sources.filter((s) => importsOf(s).includes(target)).map((s) => s.file);
}

const read = (f: string): Source => ({
  file: relative(repoRoot, f).split(sep).join('/'),
  text: readFileSync(f, 'utf8'),
});
const sources = [
  read(join(repoRoot, 'resources.ts')),
  ...sourceFiles(join(repoRoot, 'util')).map(read),
  ...sourceFiles(join(repoRoot, 'services')).map(read),
];

test('the scan reads every form of import and flags only the ones that point up', () => {
  const fake: Source[] = [
    {
      file: 'services/metrics/values.ts',
      text: [
        "import type { Router } from '../http/router.js';",
        'import {',
        '  a,',
        '  b,',
        "} from '../keeper/servingView.js';",
        "export { c } from '../runtime/harper.js';",
        "import '../schedule/store.js';",
        "// import { d } from '../http/routes/queue.js';",
        "/* import { e } from '../http/routes/admin.js'; */",
        "const url = 'https://x.example/'; // from '../http/x.js'",
        "const later = () => import('../http/routes/channel.js');",
      ].join('\n'),
    },
    { file: 'services/http/router.ts', text: "import { f } from '../metrics/values.js';" },
    { file: 'services/newroom/thing.ts', text: "import { g } from '../runtime/harper.js';" },
    { file: 'services/runtime/harper.ts', text: "import { h } from '../newroom/thing.js';" },
    { file: 'util/keeper/core.ts', text: "import { i } from '../../services/keeper/service.js';" },
    { file: 'util/keeper/score.ts', text: "import { j } from '../time.js';" },
  ];
  assert.deepEqual(upward(fake), [
    'services/metrics/values.ts (metrics) -> services/http/router.ts (http)',
    'services/metrics/values.ts (metrics) -> services/http/routes/channel.ts (http)',
    'services/runtime/harper.ts (runtime) -> services/newroom/thing.ts (newroom)',
    'util/keeper/core.ts -> services/keeper/service.ts',
  ]);
  assert.deepEqual(importersOf(fake, 'services/runtime/harper.ts'), [
    'services/metrics/values.ts',
    'services/newroom/thing.ts',
  ]);
});

test('every room of services/ has its place in the layers, and every layer is a room', () => {
  const rooms = readdirSync(join(repoRoot, 'services'))
    .filter((name) => statSync(join(repoRoot, 'services', name)).isDirectory())
    .sort();
  assert.deepEqual(rooms, [...LAYERS].sort());
});

test('no import points up: util/ stays below services/, and each room of services/ below the ones after it', () => {
  assert.ok(
    sources.some((s) => importsOf(s).includes('services/http/router.ts')),
    'the scan sees the imports of the component',
  );
  assert.deepEqual(upward(sources), []);
});

test('only resources.ts imports the shared-memory structures; every service receives them from it', () => {
  assert.ok(
    sources.some((s) => s.file === SHARED_STRUCTURES),
    `${SHARED_STRUCTURES} is where the scan expects it`,
  );
  // Equality, not inclusion: the root must be found by the same scan, so a pattern that matched
  // nothing would fail here too.
  assert.deepEqual(importersOf(sources, SHARED_STRUCTURES), ['resources.ts']);
});
