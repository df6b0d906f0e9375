// One house: no module-level mutable state outside the composition root (resources.ts), apart from the
// process-wide things named here, and no raw timers outside the duty scheduler. Each file under util/ and
// services/ is parsed with the TypeScript compiler, so a declaration is found however prettier breaks it:
//   state  a top-level `let`/`var` (every name it declares), or a top-level `const` whose value is
//          `new …`, an array literal, an empty object or `Object.create(…)`, unless its type is read-only
//          (`readonly T[]`, `ReadonlySet`, `ReadonlyMap`, `Readonly<…>`) or its value ends `as const`:
//          then tsc proves nothing writes it.
//   timer  a call of `setTimeout`/`setInterval` or an import from node's timers modules, anywhere.
// It does not follow values (a top-level `const x = make()` whose answer is mutable passes); keep state
// on instances built in resources.ts and this stays true. Each allowance names its reason; one that
// matches nothing any more fails too, so the lists shrink with the code.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import ts from 'typescript';
import { repoRoot } from '../harness.js';
import { sourceFiles } from '../sourceFiles.js';

/** `file name` → why this module-level value may live there. */
const PROCESS_WIDE: Record<string, string> = {
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

interface Finding {
  line: number;
  /** The declared name (state) or the matched text (timer). */
  what: string;
}

function parse(text: string): ts.SourceFile {
  return ts.createSourceFile('scanned.ts', text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
}

function lineOf(sf: ts.SourceFile, node: ts.Node): number {
  return sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1;
}

const READONLY_TYPE_NAMES: ReadonlySet<string> = new Set(['ReadonlySet', 'ReadonlyMap', 'ReadonlyArray']);

/** A type tsc keeps from being written through: `readonly T[]`, `Readonly<…>`, `ReadonlySet`, `ReadonlyMap`. */
function isReadOnlyType(type: ts.TypeNode | undefined): boolean {
  if (type === undefined) return false;
  if (ts.isTypeOperatorNode(type)) return type.operator === ts.SyntaxKind.ReadonlyKeyword;
  if (ts.isTypeReferenceNode(type)) {
    const name = type.typeName.getText();
    return name === 'Readonly' || READONLY_TYPE_NAMES.has(name);
  }
  return false;
}

/** A value that makes a fresh mutable thing: `new …`, `[…]`, `{}`, `Object.create(…)`. */
function isMutableValue(init: ts.Expression): boolean {
  while (ts.isParenthesizedExpression(init) || ts.isSatisfiesExpression(init)) init = init.expression;
  if (ts.isAsExpression(init)) {
    const t = init.type;
    if (ts.isTypeReferenceNode(t) && t.typeName.getText() === 'const') return false;
    return isMutableValue(init.expression);
  }
  if (ts.isNewExpression(init) || ts.isArrayLiteralExpression(init)) return true;
  if (ts.isObjectLiteralExpression(init)) return init.properties.length === 0;
  return ts.isCallExpression(init) && init.expression.getText() === 'Object.create';
}

/** Every name a binding declares (`let a`, `let {a, b: [c]}`). */
function boundNames(name: ts.BindingName): string[] {
  if (ts.isIdentifier(name)) return [name.text];
  return name.elements.flatMap((e) => (ts.isOmittedExpression(e) ? [] : boundNames(e.name)));
}

/** Top-level declarations that hold mutable state. */
function stateDeclarations(text: string): Finding[] {
  const sf = parse(text);
  const found: Finding[] = [];
  for (const statement of sf.statements) {
    if (!ts.isVariableStatement(statement)) continue;
    const list = statement.declarationList;
    const isConst = (list.flags & ts.NodeFlags.Const) !== 0;
    for (const decl of list.declarations) {
      const names = boundNames(decl.name).map((what) => ({ line: lineOf(sf, decl), what }));
      if (!isConst) found.push(...names);
      else if (decl.initializer && !isReadOnlyType(decl.type) && isMutableValue(decl.initializer))
        found.push(...names);
    }
  }
  return found;
}

const TIMER_CALLS: ReadonlySet<string> = new Set(['setTimeout', 'setInterval']);
const TIMER_MODULES: ReadonlySet<string> = new Set([
  'timers',
  'node:timers',
  'timers/promises',
  'node:timers/promises',
]);

/** Raw timer calls and imports of node's timer modules. */
function rawTimers(text: string): Finding[] {
  const sf = parse(text);
  const found: Finding[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node)) {
      // `setTimeout(…)`, and `globalThis.setTimeout(…)` or `timers.setInterval(…)` alike.
      const callee = ts.isPropertyAccessExpression(node.expression) ? node.expression.name : node.expression;
      if (ts.isIdentifier(callee) && TIMER_CALLS.has(callee.text))
        found.push({ line: lineOf(sf, node), what: callee.text });
    }
    if (
      ts.isImportDeclaration(node) &&
      ts.isStringLiteral(node.moduleSpecifier) &&
      TIMER_MODULES.has(node.moduleSpecifier.text)
    )
      found.push({ line: lineOf(sf, node), what: node.moduleSpecifier.text });
    ts.forEachChild(node, visit);
  };
  visit(sf);
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
    'const u = globalThis.setInterval(f, 1);',
  ].join('\n');
  assert.deepEqual(
    stateDeclarations(src).map((f) => f.what),
    ['count', 'cache', 'pending', 'bag'],
  );
  assert.deepEqual(
    rawTimers(src).map((f) => f.line),
    [15, 16, 18],
  );
});

test('the scan finds state however a declaration is broken across lines', () => {
  const src = [
    'let lastSeen:',
    '  | string',
    '  | undefined;',
    'export let first = 1,',
    '  second = 2;',
    'const views: {',
    '  ready?: number;',
    '  leases?: number;',
    '} = {};',
    'let {',
    '  x,',
    '  y: [z],',
    '} = make();',
    'const held =',
    '  new Map<string, number>();',
    'const fixed: Readonly<{',
    '  a: number;',
    '}> = { a: 1 };',
  ].join('\n');
  assert.deepEqual(
    stateDeclarations(src).map((f) => `${f.line} ${f.what}`),
    ['1 lastSeen', '4 first', '5 second', '6 views', '10 x', '10 z', '14 held'],
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
