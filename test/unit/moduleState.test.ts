// One house: no module-level mutable state outside the composition root (resources.ts), apart
// from process-wide things named here, and no raw timers outside the duty scheduler. A scan of the source
// lines under util/ and services/, comments removed:
//   state  a top-level `let`/`var`, or a top-level `const` whose value is `new …`, an array literal or an
//          empty object, unless its type is read-only (`readonly T[]`, `ReadonlySet`, `ReadonlyMap`,
//          `Readonly<…>`) or it ends `as const`: then tsc proves nothing writes it.
//   timer  `setTimeout(`/`setInterval(` or an import from node's timers modules, anywhere in a file.
// It does not follow values (a top-level `const x = make()` whose answer is mutable passes); keep state
// on instances built in resources.ts and this stays true. Each allowance names its reason; one that
// matches nothing any more fails too, so the lists shrink with the code.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { repoRoot } from '../harness.js';
import { sourceFiles } from '../sourceFiles.js';

/** `file name` → why this module-level value may live there. */
const PROCESS_WIDE: Record<string, string> = {
  'services/runtime/config.ts processWideConfig':
    'the one config cell of the worker; resources.ts installs its RuntimeConfig, config() reads it',
  'services/runtime/sharedBuffers.ts store':
    'process-wide shared buffers: the NodeLocal store they come from',
  'services/runtime/sharedBuffers.ts obtained': "process-wide shared buffers: this thread's handle on each",
  'services/metrics/values.ts processWideMetrics': 'the metric cells every worker adds into (shared buffers)',
  'services/schedule/rawRecords.ts processWideClaimReader':
    "this thread's decode plans per shared struct for the claim's fields; no rows",
  'services/schedule/rawRecords.ts processWideRowReader':
    "this thread's decode plans per shared struct for the walk's fields; no rows",
  'util/leases/token.ts processWideRandomPool': "this thread's CSPRNG bytes: one pool serves every grant",
  'util/leases/memory.ts napCell': 'never written: the SharedArrayBuffer word Atomics.wait naps on',
  'util/sharedMemory/stateDoc.ts packr': 'a codec without shared structures: each message carries its own',
  'util/notify/wakeBody.ts QUEUE_NAME': 'a RegExp without the g/y flags keeps no lastIndex',
  'services/http/requestChecks.ts utf8': 'a TextDecoder used without `stream` keeps nothing between calls',
  'util/text.ts strictUtf8': 'a TextDecoder used without `stream` keeps nothing between calls',
};

/** `file` → how many raw timer calls it may make, and why each is not a duty or an injected wait. */
const RAW_TIMERS: Record<string, { count: number; reason: string }> = {
  'util/duties/scheduler.ts': {
    count: 1,
    reason: 'realTimer: the one timer every duty and sleep is built on',
  },
  'services/runtime/storeLock.ts': {
    count: 1,
    reason: 'the deadline of one lock wait, cleared when the lock comes; per call, like a request timeout',
  },
  'services/notify/transport.ts': {
    count: 1,
    reason: 'the abort deadline of one delivery attempt, cleared when the attempt ends',
  },
};

/** Source lines without comments; a block comment keeps its line breaks so line numbers hold. */
function codeLines(text: string): string[] {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ''))
    .replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1')
    .split('\n');
}

interface Finding {
  line: number;
  /** The declared name (state) or the matched text (timer). */
  what: string;
}

const LET = /^(?:export\s+)?(?:let|var)\s+(\w+)/;
const CONST = /^(?:export\s+)?const\s+(\w+)\s*(?::\s*([^=]+?))?\s*=\s*(.*)$/;
const READONLY_TYPE = /^(?:readonly\s|Readonly)/;

/** Top-level declarations that hold mutable state. */
function stateDeclarations(text: string): Finding[] {
  const lines = codeLines(text);
  const found: Finding[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const asLet = LET.exec(line);
    if (asLet) {
      found.push({ line: i + 1, what: asLet[1]! });
      continue;
    }
    const asConst = CONST.exec(line);
    if (!asConst) continue;
    const [, name, type, init] = asConst as unknown as [string, string, string | undefined, string];
    if (type !== undefined && READONLY_TYPE.test(type.trim())) continue;
    // The statement runs to the first line ending in `;` (prettier closes a multi-line one at column 0).
    let end = i;
    while (end < lines.length - 1 && !lines[end]!.trimEnd().endsWith(';')) end++;
    if (/\bas const;\s*$/.test(lines[end]!)) continue;
    if (/^new\s/.test(init) || /^\[/.test(init) || /^\{\s*\}/.test(init) || /^Object\.create\(/.test(init))
      found.push({ line: i + 1, what: name });
  }
  return found;
}

const TIMER = /\bset(?:Timeout|Interval)\s*\(|\bfrom\s+['"](?:node:)?timers(?:\/promises)?['"]/g;

/** Raw timer calls and imports of node's timer modules. */
function rawTimers(text: string): Finding[] {
  const found: Finding[] = [];
  codeLines(text).forEach((line, i) => {
    for (const m of line.matchAll(TIMER)) found.push({ line: i + 1, what: m[0] });
  });
  return found;
}

const files = [...sourceFiles(join(repoRoot, 'util')), ...sourceFiles(join(repoRoot, 'services'))].map(
  (f) => ({
    file: relative(repoRoot, f).split(sep).join('/'),
    text: readFileSync(f, 'utf8'),
  }),
);

test('the scan finds a top-level let, a mutable collection and a raw timer, and passes read-only ones', () => {
  const src = [
    'let count = 0;',
    'export const cache = new Map<string, number>();',
    'const pending: string[] = [];',
    'const bag = {};',
    'const KINDS: ReadonlySet<string> = new Set(["a"]);',
    'const EDGES: readonly number[] = [1, 2];',
    'const NAMES = [',
    "  'a',",
    '] as const;',
    '// let commented = 1;',
    'function f() {',
    '  let local = 1;',
    '  return local;',
    '}',
    'const t = setTimeout(() => undefined, 5);',
    "import { setTimeout as wait } from 'node:timers/promises';",
    '/* setInterval(f, 1) */',
  ].join('\n');
  assert.deepEqual(
    stateDeclarations(src).map((f) => f.what),
    ['count', 'cache', 'pending', 'bag'],
  );
  assert.deepEqual(
    rawTimers(src).map((f) => f.line),
    [15, 16],
  );
});

test('util/ and services/ keep no module-level mutable state beyond the named process-wide things', () => {
  const unexplained: string[] = [];
  const seen = new Set<string>();
  for (const { file, text } of files) {
    for (const f of stateDeclarations(text)) {
      const key = `${file} ${f.what}`;
      seen.add(key);
      if (PROCESS_WIDE[key] === undefined) unexplained.push(`${file}:${f.line} ${f.what}`);
    }
  }
  const stale = Object.keys(PROCESS_WIDE).filter((k) => !seen.has(k));
  assert.deepEqual(unexplained, [], 'module-level state: move it onto an instance built in resources.ts');
  assert.deepEqual(stale, [], 'PROCESS_WIDE entries that match nothing any more: delete them');
});

test('no raw timers in util/ and services/ outside the duty scheduler and the listed per-call deadlines', () => {
  const counts = new Map<string, Finding[]>();
  for (const { file, text } of files) {
    const found = rawTimers(text);
    if (found.length > 0) counts.set(file, found);
  }
  const unexplained = [...counts]
    .filter(([file, found]) => found.length !== RAW_TIMERS[file]?.count)
    .map(
      ([file, found]) =>
        `${file} (${found.length}, allowed ${RAW_TIMERS[file]?.count ?? 0}): lines ${found.map((f) => f.line).join(', ')}`,
    );
  const stale = Object.keys(RAW_TIMERS).filter((file) => !counts.has(file));
  assert.deepEqual(
    unexplained,
    [],
    'raw timers: a periodic one is a duty, a one-shot wait an injected sleep',
  );
  assert.deepEqual(stale, [], 'RAW_TIMERS entries that match nothing any more: delete them');
});
