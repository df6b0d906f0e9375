// Imports point one way (docs/architecture.md). The pure core under util/ imports nothing of services/
// or the composition root, and inside it each folder imports only itself, the folders below it in
// UTIL_LAYERS and util's loose files (which import no folder); inside services/ each room imports only
// itself and the rooms below it in LAYERS; no util/ file speaks HTTP (nothing under util/http/); and
// only resources.ts reaches the node's shared-memory structures, so every service receives
// them one way (injected). A scan of the TypeScript sources, comments removed: type-only imports count
// too, since a type that points up ties the lower room to the upper one as surely as a value does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
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
  'devices',
  'stall',
  'notify',
  'leases',
  'results',
  'keeper',
  'sitemaps',
  'metrics',
  'serving',
  'http',
];

/**
 * The folders of util/, bottom first, with the same rule. `requests` (a request against its documented
 * shape) sits on util's loose files only; `notify`'s address and queue-name rules sit below `config`,
 * which checks settings with them; a folder that decides over the schedule, the leases or the results
 * sits above what it reads. A new folder gets its place here.
 */
const UTIL_LAYERS: readonly string[] = [
  'requests',
  'notify',
  'config',
  'duties',
  'schedule',
  'cluster',
  'leases',
  'sharedMemory',
  'metrics',
  'keeper',
  'stall',
  'pages',
  'prerender',
  'channel',
  'results',
  'sitemaps',
  'serving',
];

const SHARED_STRUCTURES = 'services/runtime/sharedStructures.ts';

/**
 * The fleet client's wire types (the one `Job` declaration): services/ may import them, type-only, so
 * the server and the client share one contract and nothing of the client is loaded at run time.
 */
const WIRE_TYPES = 'client/src/types.ts';

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

/** The folder of a util/ file, or '' for one of util's loose files (text.ts, problem.ts, …). */
function utilFolderOf(file: string): string {
  const parts = file.split('/');
  return parts.length > 2 ? parts[1]! : '';
}

function rankIn(layers: readonly string[], room: string): number {
  const i = layers.indexOf(room);
  return i < 0 ? Infinity : i;
}

/** Every import that points up: out of util/ into services/ or the root, or to a later room of services/. */
function upward(sources: readonly Source[]): string[] {
  const found: string[] = [];
  for (const src of sources) {
    for (const target of importsOf(src)) {
      if (src.file.startsWith('util/')) {
        if (!target.startsWith('util/')) {
          found.push(`${src.file} -> ${target}`);
          continue;
        }
        const from = utilFolderOf(src.file);
        const to = utilFolderOf(target);
        if (to === '' || from === to) continue;
        if (from === '' || rankIn(UTIL_LAYERS, to) > rankIn(UTIL_LAYERS, from))
          found.push(`${src.file} (${from || 'util'}) -> ${target} (${to})`);
        continue;
      }
      const from = roomOf(src.file);
      const to = roomOf(target);
      if (from === null) continue;
      if (to === null) {
        if (!target.startsWith('util/') && target !== WIRE_TYPES) found.push(`${src.file} -> ${target}`);
        continue;
      }
      if (rankIn(LAYERS, to) > rankIn(LAYERS, from)) found.push(`${src.file} (${from}) -> ${target} (${to})`);
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
    { file: 'util/config/schema.ts', text: "import { k } from '../prerender/origin.js';" },
    { file: 'util/results/check.ts', text: "import { l } from '../schedule/rules.js';" },
    { file: 'util/text.ts', text: "import { m } from './config/keys.js';" },
    { file: 'util/newFolder/x.ts', text: "import { n } from '../config/keys.js';" },
    { file: 'util/config/keys.ts', text: "import { o } from '../newFolder/x.js';" },
  ];
  assert.deepEqual(upward(fake), [
    'services/metrics/values.ts (metrics) -> services/http/router.ts (http)',
    'services/metrics/values.ts (metrics) -> services/http/routes/channel.ts (http)',
    'services/runtime/harper.ts (runtime) -> services/newroom/thing.ts (newroom)',
    'util/keeper/core.ts -> services/keeper/service.ts',
    'util/config/schema.ts (config) -> util/prerender/origin.ts (prerender)',
    'util/text.ts (util) -> util/config/keys.ts (config)',
    'util/config/keys.ts (config) -> util/newFolder/x.ts (newFolder)',
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

test('every folder of util/ has its place in the layers, and every layer is a folder', () => {
  const folders = readdirSync(join(repoRoot, 'util'))
    .filter((name) => statSync(join(repoRoot, 'util', name)).isDirectory())
    .sort();
  assert.deepEqual(folders, [...UTIL_LAYERS].sort());
});

test('no util/ file imports util/http/: the pure core returns problems and services/http/ answers them', () => {
  const util = sources.filter((s) => s.file.startsWith('util/'));
  assert.ok(util.length > 50, 'the scan reads util/');
  const http = util.flatMap((s) =>
    importsOf(s)
      .filter((t) => t.startsWith('util/http/'))
      .map((t) => `${s.file} -> ${t}`),
  );
  assert.deepEqual(http, []);
  assert.ok(!existsSync(join(repoRoot, 'util', 'http')), 'util/http/ is gone: answers are services/http/');
});

test('no import points up: util/ stays below services/, each folder of util/ below the ones after it, and each room of services/ below the ones after it', () => {
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

test("the client's wire types are imported type-only wherever the component uses them", () => {
  const users = importersOf(sources, WIRE_TYPES);
  assert.ok(users.includes('services/leases/claims.ts'), 'the claim service takes Job from the client');
  const valueImports = sources
    .filter((s) => users.includes(s.file))
    .filter((s) =>
      [...code(s.text).matchAll(/(?:^|[;\n])\s*(import|export)\s+([^;]*?)\sfrom\s*['"]([^'"]+)['"]/g)].some(
        (m) => m[3]!.endsWith('client/src/types.js') && !/^type\s/.test(m[2]!),
      ),
    )
    .map((s) => s.file);
  assert.deepEqual(valueImports, []);
});
