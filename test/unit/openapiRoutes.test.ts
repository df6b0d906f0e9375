// The routes the router serves are exactly the operations of docs/openapi.yaml, with the roles it names.
// The route table is built the way resources.ts builds it: every register… function of
// services/http/routes/ called on one Router. Those modules import Harper's runtime, which cannot load
// outside a Harper process, so `harperdb` is resolved to a stub here (a module hook for this test's
// process only) and every dependency is a stub: registering only stores handlers, never runs them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { register } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Router } from '../../services/http/router.js';
import { contract } from '../contract.js';
import { repoRoot } from '../harness.js';

const dist = join(repoRoot, 'dist');

/** Anything: every property, call and construction gives it back (and it is no thenable). */
const anything: unknown = new Proxy(function stub() {}, {
  get: (_t, key) => (key === 'then' ? undefined : anything),
  apply: () => anything,
  construct: () => anything as object,
});

const STUB_MODULE = `const anything = new Proxy(function stub() {}, {
  get: (_t, key) => (key === 'then' ? undefined : anything),
  apply: () => anything,
  construct: () => anything,
});
export default anything;`;

const HOOKS = `export async function resolve(specifier, context, next) {
  if (specifier === 'harperdb')
    return { url: 'data:text/javascript,' + encodeURIComponent(${JSON.stringify(STUB_MODULE)}), shortCircuit: true };
  return next(specifier, context);
}`;

interface Served {
  method: string;
  path: string;
  caller: string;
  readOnly: boolean;
}

/** The route table, and the names of the register… functions that built it. */
async function servedRoutes(): Promise<{ routes: Served[]; registrars: string[] }> {
  register(`data:text/javascript,${encodeURIComponent(HOOKS)}`);
  const router = new Router({
    http: () => {},
    config: () => anything as never,
    log: console,
    workerIndex: () => 0,
  });
  const registrars: string[] = [];
  const dir = join(dist, 'services/http/routes');
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.js'))
    .sort()) {
    const mod = (await import(pathToFileURL(join(dir, file)).href)) as Record<string, unknown>;
    for (const [name, fn] of Object.entries(mod))
      if (/^register[A-Z]/.test(name) && typeof fn === 'function') {
        (fn as (r: unknown, deps: unknown) => unknown)(router, anything);
        registrars.push(name);
      }
  }
  return { routes: router.table(), registrars: registrars.sort() };
}

/** The callers `x-roles` names for a route's caller kind (services/http/router.ts `authorize`). */
const ROLES_OF_CALLER: Record<string, string[]> = {
  admin: ['operator'],
  feeder: ['operator', 'feeder'],
  discover: ['operator', 'discoverer'],
  fleet: ['operator', 'fleet'],
  // No credentials at all (`security: []` in the document): the probes, and crawlers at /p/.
  public: ['anyone'],
};

test('every route the router serves is an operation of docs/openapi.yaml, and nothing else is', async () => {
  const { routes, registrars } = await servedRoutes();

  // The table is the served one only if resources.ts registers exactly these modules' routes.
  const resources = readFileSync(join(repoRoot, 'resources.ts'), 'utf8');
  const called = [...resources.matchAll(/\b(register[A-Z]\w*)\(router\b/g)].map((m) => m[1]!).sort();
  assert.deepEqual(
    called,
    registrars,
    'resources.ts calls every register… of services/http/routes/, and only those',
  );
  assert.ok(routes.length >= 25, `only ${routes.length} routes registered`);

  const operations = contract().operations();
  const servedBy = (method: string, template: string): Served | undefined =>
    routes.find(
      (r) =>
        r.method === method &&
        (r.path.endsWith('/*')
          ? template.startsWith(r.path.slice(0, -1)) && template.slice(r.path.length - 1).startsWith('{')
          : r.path === template),
    );
  const undocumented = routes.filter((r) => !operations.some((op) => servedBy(op.method, op.template) === r));
  const unserved = operations.filter((op) => servedBy(op.method, op.template) === undefined);
  assert.deepEqual(
    undocumented.map((r) => `${r.method} ${r.path}`),
    [],
    'routes the router serves that docs/openapi.yaml does not document',
  );
  assert.deepEqual(
    unserved.map((op) => `${op.method} ${op.template}`),
    [],
    'operations of docs/openapi.yaml that no route serves',
  );

  const paths = contract().doc.paths as Record<string, Record<string, { 'x-roles'?: string[] }>>;
  for (const op of operations) {
    const route = servedBy(op.method, op.template)!;
    const roles = paths[op.template]![op.method.toLowerCase()]!['x-roles'];
    const callers = ROLES_OF_CALLER[route.caller];
    assert.ok(callers, `caller ${route.caller} of ${route.method} ${route.path} has no roles here; add it`);
    // An operator read (every GET under /prerender_admin/, and explain) is open to the observer role too.
    const expected = route.readOnly ? [...callers, 'observer'] : callers;
    assert.deepEqual(roles, expected, `x-roles of ${op.method} ${op.template}`);
  }
});
