// queue-keeper installed the way users install it: `npm pack` of the checkout, the tarball installed
// into a host Harper app next to its harperdb, and that app booted (docs/installing.md). A second, bare app shows
// the two other paths: a copy without its build says so in hdb.log, and deploy_component installs the
// tarball into a running Harper. Packing and installing happen once per run.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { repoRoot, startHarper, type HarperInstance } from '../harness.js';
import { startTogether } from '../startTogether.js';
import { until } from '../wait.js';

const HOST_ROUTE = { name: 'host-only-route', match: 'prefix', path: '/from-host-config/' };
const HOST_URL = 'https://install.example.com/from-host-config/page-1';
const NOT_BUILT = 'queue-keeper is not built';
/** How deploy_component installs the package's dependencies: no devDependencies, and no harperdb copy
 * (Harper links its own into every component it loads). */
const DEPLOY_INSTALL = 'npm install --omit=dev --legacy-peer-deps --prefer-offline --no-audit --no-fund';

const work = mkdtempSync(join(tmpdir(), 'qk-install-'));
const harperRoot = realpathSync(join(repoRoot, 'node_modules', 'harperdb'));
let tarball: string;
let hostApp: string;
let bareApp: string;
let host: HarperInstance;
let bare: HarperInstance;
let installedWith = '';

/** npm with none of the npm_* variables of an enclosing `npm test` (they name this checkout). */
function npm(args: string[], cwd: string) {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.toLowerCase().startsWith('npm_')) env[k] = v;
  // Bounded: an npm stuck on the network fails the setup instead of hanging it.
  const r = spawnSync('npm', args, { cwd, env, encoding: 'utf8', timeout: 240_000 });
  return { ok: r.status === 0, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}` };
}

function files(dir: string, skip: (rel: string) => boolean = () => false): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      const rel = relative(dir, p).split(sep).join('/');
      if (skip(rel)) continue;
      if (statSync(p).isDirectory()) walk(p);
      else out.push(rel);
    }
  };
  walk(dir);
  return out.sort();
}

/** The compiled modules dist/resources.js reaches through relative imports (what Harper loads). */
function runtimeModules(pkg: string): string[] {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const m of readFileSync(file, 'utf8').matchAll(
      /\bfrom\s*['"](\.[^'"]+)['"]|\bimport\s*\(?\s*['"](\.[^'"]+)['"]/g,
    ))
      visit(resolve(dirname(file), m[1] ?? m[2]!));
  };
  visit(join(pkg, 'dist', 'resources.js'));
  return [...seen].map((f) => relative(pkg, f).split(sep).join('/')).sort();
}

/** `npm pack` of a copy of the working tree (so this run's dist/ is left alone), into `work`. */
function packCheckout(): string {
  const copy = join(work, 'checkout');
  const skipTop = new Set(['node_modules', 'dist', '.git', '.harper-data', 'test-artifacts']);
  cpSync(repoRoot, copy, {
    recursive: true,
    filter: (p) => {
      const rel = relative(repoRoot, p).split(sep).join('/');
      return !skipTop.has(rel.split('/')[0]!) && !rel.startsWith('bench/results') && !rel.endsWith('.tgz');
    },
  });
  symlinkSync(join(repoRoot, 'node_modules'), join(copy, 'node_modules'), 'dir');
  const r = npm(['pack', '--pack-destination', work], copy);
  assert.ok(r.ok, `npm pack failed:\n${r.out}`);
  const packed = readdirSync(work).filter((f) => f.endsWith('.tgz'));
  assert.equal(packed.length, 1, r.out);
  return join(work, packed[0]!);
}

/** The host app's own table, in its own database (`data`), written in the same transactions as filings. */
const HOST_SCHEMA = 'type HostProduct @table {\n  id: ID @primaryKey\n  url: String\n}\n';

/**
 * The host app's own resource, calling the in-process API (docs/in-process.md) the way a product
 * service would: alone, inside its own transaction() with a write of its own, and inside the request's
 * transaction. `fail` throws after the filing, so the caller's transaction rolls back. A refusal's
 * status and code are answered as data, to compare with the HTTP route's.
 */
const HOST_RESOURCE = `import harperdb from 'harperdb';
import { deleteTargets, fileTargets, revalidate } from 'queue-keeper/api';
const { Resource, tables, transaction } = harperdb;

const refusal = (e) => ({ refused: { status: e.status, statusCode: e.statusCode, code: e.code, error: e.message } });

export class HostFile extends Resource {
  static loadAsInstance = false;
  async post(_target, body) {
    const { call, input, product, mode } = body;
    const api = { fileTargets, deleteTargets, revalidate }[call];
    const run = () => api(input).catch(refusal);
    if (mode === 'own-transaction') {
      try {
        return await transaction(async (txn) => {
          await tables.HostProduct.put(product, { url: input.targets[0].url }, txn);
          const answer = await run();
          if (body.fail) throw new Error('the product update failed');
          return answer;
        });
      } catch (e) {
        return { rolledBack: e.message };
      }
    }
    if (mode === 'request-transaction') {
      await tables.HostProduct.put(product, { url: input.targets[0].url });
      const answer = await run();
      if (body.fail) throw Object.assign(new Error('the product update failed'), { statusCode: 409 });
      return answer;
    }
    return run();
  }
}
`;

/** A Harper app that already has harperdb (this checkout's copy, linked) and gets the tarball. */
function makeHostApp(): string {
  const dir = join(work, 'host-app');
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  const harperVersion = (
    JSON.parse(readFileSync(join(harperRoot, 'package.json'), 'utf8')) as { version: string }
  ).version;
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({
      name: 'qk-host-app',
      private: true,
      type: 'module',
      dependencies: { harperdb: harperVersion, 'queue-keeper': `file:${tarball}` },
    }),
  );
  writeFileSync(join(dir, 'schema.graphql'), HOST_SCHEMA);
  writeFileSync(join(dir, 'host.js'), HOST_RESOURCE);
  writeFileSync(
    join(dir, 'config.yaml'),
    [
      'rest: true',
      'graphqlSchema:',
      '  files: schema.graphql',
      'jsResource:',
      '  files: host.js',
      'queue-keeper:',
      '  package: queue-keeper',
      '  render:',
      '    routes:',
      `      - { name: ${HOST_ROUTE.name}, match: ${HOST_ROUTE.match}, path: ${HOST_ROUTE.path} }`,
      '',
    ].join('\n'),
  );
  symlinkSync(harperRoot, join(dir, 'node_modules', 'harperdb'), 'dir');
  // From the local npm cache when it has everything; otherwise npm may ask the registry for metadata.
  let r = npm(['install', '--offline', '--no-audit', '--no-fund'], dir);
  installedWith = 'npm install --offline';
  if (!r.ok) {
    r = npm(['install', '--prefer-offline', '--no-audit', '--no-fund'], dir);
    installedWith = 'npm install --prefer-offline (the cache lacked some metadata)';
  }
  assert.ok(r.ok, `installing the tarball into the host app failed:\n${r.out}`);
  return dir;
}

/**
 * The bare app's health route, which answers `workersReady` the way queue-keeper's does, so the
 * harness's readiness waits for both workers. That matters for the deploy test: a worker still booting
 * scans hdb/components and links node_modules/harperdb into every folder it finds there, so a folder
 * that deploy_component is unpacking at that moment gets node_modules/ next to the unpacked package/.
 * Harper then either skips lifting package/ up and skips the install (500 "did not load any modules")
 * or copies through the link (500 "cannot copy … to a subdirectory of self"). A worker has made that
 * scan before it loads this file. (Reproduced: deploying as soon as the first worker answered failed
 * 2 of 4 times, in both ways.)
 */
const BARE_HEALTH = `import harperdb from 'harperdb';
const { server, tables } = harperdb;
// Bit i is set once worker i has loaded this file (one buffer for the whole process).
const loaded = new Int32Array(
  tables.BareHealth.primaryStore.getUserSharedBuffer('bare-app:workers', new ArrayBuffer(4)),
);
if (server.workerIndex !== undefined) Atomics.or(loaded, 0, 1 << server.workerIndex);
function workersReady() {
  let n = 0;
  for (let bits = Atomics.load(loaded, 0); bits; bits >>>= 1) n += bits & 1;
  return n;
}
server.http((request, next) =>
  request.pathname === '/host-health'
    ? new Response(JSON.stringify({ ok: true, workersReady: workersReady() }), {
        headers: { 'content-type': 'application/json' },
      })
    : next(request),
);
`;

/** An app with only a health route, holding a copy of the package without its dist/. */
function makeBareApp(): string {
  const dir = join(work, 'bare-app');
  const unbuilt = join(dir, 'node_modules', 'queue-keeper-unbuilt');
  mkdirSync(unbuilt, { recursive: true });
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({ name: 'qk-bare-app', private: true, type: 'module' }),
  );
  writeFileSync(
    join(dir, 'config.yaml'),
    [
      'rest: true',
      'graphqlSchema:',
      '  files: schema.graphql',
      'jsResource:',
      '  files: health.js',
      'queue-keeper-unbuilt:',
      '  package: queue-keeper-unbuilt',
      '',
    ].join('\n'),
  );
  writeFileSync(join(dir, 'schema.graphql'), 'type BareHealth @table {\n  id: ID @primaryKey\n}\n');
  writeFileSync(join(dir, 'health.js'), BARE_HEALTH);
  const installed = join(hostApp, 'node_modules', 'queue-keeper');
  cpSync(installed, unbuilt, {
    recursive: true,
    filter: (p) => !['dist', 'node_modules'].includes(relative(installed, p).split(sep)[0]!),
  });
  return dir;
}

const timings: string[] = [];
function timed<T>(what: string, fn: () => T): T {
  const t0 = Date.now();
  const v = fn();
  timings.push(`${what} ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return v;
}

before(
  async () => {
    tarball = timed('pack', packCheckout);
    hostApp = timed('install', makeHostApp);
    bareApp = makeBareApp();
    const booting = Date.now();
    const cache = npm(['config', 'get', 'cache'], work).out.trim();
    [host, bare] = await startTogether<[HarperInstance, HarperInstance]>(
      { start: startHarper({ componentDir: hostApp }), stop: (h) => h.destroy() },
      {
        // deploy_component runs npm inside Harper, whose HOME is private: point it at the real cache.
        start: startHarper({
          componentDir: bareApp,
          readyPath: '/host-health',
          env: { npm_config_cache: cache },
        }),
        stop: (h) => h.destroy(),
      },
    );
    timings.push(`two boots ${((Date.now() - booting) / 1000).toFixed(1)} s`);
  },
  { timeout: 300_000 },
);

after(async () => {
  await Promise.all([host?.destroy(), bare?.destroy()]);
  rmSync(work, { recursive: true, force: true });
});

test('the packed tarball carries the runtime build and its static files, and no tests, benchmarks, sources or maps', (t) => {
  t.diagnostic(`host app installed with: ${installedWith}; ${timings.join(', ')}`);
  const pkg = join(hostApp, 'node_modules', 'queue-keeper');
  // node_modules/ inside it is Harper's link to its own harperdb, made when it loaded the component.
  const shipped = files(pkg, (rel) => rel === 'node_modules');
  const statics = [
    'LICENSE',
    'README.md',
    'config.yaml',
    'index.js',
    'package.json',
    'roles.yaml',
    'schema.graphql',
  ];
  const web = files(join(repoRoot, 'web')).map((f) => `web/${f}`);
  // dist/api.js: the in-process API a host app imports as queue-keeper/api (docs/in-process.md).
  const expected = [...statics, 'scripts/prepare.mjs', 'dist/api.js', ...web, ...runtimeModules(pkg)].sort();
  assert.deepEqual(shipped, expected);
  assert.ok(!shipped.some((f) => /^dist\/(test|bench)\//.test(f) || f.endsWith('.map') || f.endsWith('.ts')));
});

test("installed next to the app's harperdb, the component brings only its runtime dependencies and no second harperdb", () => {
  const mine = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
  };
  const installed = new Set(
    readdirSync(join(hostApp, 'node_modules')).flatMap((n) =>
      n.startsWith('@') ? readdirSync(join(hostApp, 'node_modules', n)).map((s) => `${n}/${s}`) : [n],
    ),
  );
  for (const dep of Object.keys(mine.dependencies)) assert.ok(installed.has(dep), `${dep} is not installed`);
  for (const dev of Object.keys(mine.devDependencies))
    if (dev !== 'harperdb') assert.ok(!installed.has(dev), `the devDependency ${dev} was installed`);
  assert.equal(realpathSync(join(hostApp, 'node_modules', 'harperdb')), harperRoot);
  const nested = join(hostApp, 'node_modules', 'queue-keeper', 'node_modules', 'harperdb');
  if (existsSync(nested)) assert.equal(realpathSync(nested), harperRoot, 'a second harperdb was installed');
});

test('the component answers queue-state in the host app', async () => {
  const r = await host.fetch('/prerender_admin/queue-state');
  assert.ok(r.status === 200 || r.status === 503, `${r.status} ${r.text}`);
  if (r.status === 200) assert.equal(typeof r.json.now.due, 'number', r.text);
  else assert.ok(typeof r.json.error === 'string' && typeof r.json.code === 'string', r.text);
});

test("a route defined only in the host app's config.yaml classifies a filed URL, as explain shows", async () => {
  const filed = await host.fetch('/render_queue/targets', { body: { targets: [{ url: HOST_URL }] } });
  assert.equal(filed.status, 200, filed.text);
  assert.equal(filed.json.upserted, 1, filed.text);
  const explained = await host.fetch('/prerender_admin/explain', { body: { url: HOST_URL } });
  assert.equal(explained.status, 200, explained.text);
  assert.equal(explained.json.queue, HOST_ROUTE.name);
  assert.ok(explained.json.row, explained.text);
  const cfg = await host.fetch('/prerender_admin/config');
  assert.deepEqual(cfg.json.render.routes, [HOST_ROUTE]);
  // `package:` in the host section is Harper's key for loading the package, not an unknown option.
  assert.doesNotMatch(host.output(), /Unknown configuration key package/);
});

/** The host resource's call of the in-process API (HOST_RESOURCE). */
async function inProcess(body: Record<string, unknown>) {
  const r = await host.fetch('/HostFile', { body, fresh: true });
  return r;
}

async function hostProduct(id: string): Promise<unknown> {
  const rows = (await host.operation({
    operation: 'search_by_value',
    database: 'data',
    table: 'HostProduct',
    search_attribute: 'id',
    search_value: id,
    get_attributes: ['id'],
  })) as unknown[];
  return rows[0];
}

const scheduled = async (url: string) =>
  (await host.fetch('/prerender_admin/explain', { body: { url } })).json.row as Record<
    string,
    unknown
  > | null;

test("a host app's resource files, revalidates and deletes through queue-keeper/api, answered as over HTTP", async () => {
  const url = 'https://install.example.com/from-host-config/in-process-1';
  const filed = await inProcess({ call: 'fileTargets', input: { targets: [{ url }, { url: 'ftp://x' }] } });
  assert.equal(filed.status, 200, filed.text);
  const overHttp = await host.fetch('/render_queue/targets', {
    body: { targets: [{ url }, { url: 'ftp://x' }] },
  });
  assert.deepEqual(filed.json, overHttp.json, 'the same answer as POST /render_queue/targets');
  assert.equal(filed.json.upserted, 1);
  assert.ok(await scheduled(url), 'the row is in the schedule');
  const explained = await host.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(explained.json.queue, HOST_ROUTE.name, "classified by the host app's route");

  const revalidated = await inProcess({ call: 'revalidate', input: { url } });
  assert.equal(revalidated.status, 200, revalidated.text);
  assert.equal(revalidated.json.url, url);
  assert.equal(typeof revalidated.json.urgentAt, 'number');

  const bad = await inProcess({ call: 'fileTargets', input: { targets: 'not a list' } });
  const badOverHttp = await host.fetch('/render_queue/targets', { body: { targets: 'not a list' } });
  assert.equal(badOverHttp.status, 400);
  assert.deepEqual(bad.json.refused, {
    status: 400,
    statusCode: 400,
    code: badOverHttp.json.code,
    error: badOverHttp.json.error,
  });
  const missing = await inProcess({ call: 'revalidate', input: { url: `${url}-never-filed` } });
  assert.deepEqual([missing.json.refused.status, missing.json.refused.code], [404, 'not_found']);

  const deleted = await inProcess({ call: 'deleteTargets', input: { urls: [url] } });
  assert.deepEqual(deleted.json, { deleted: 1 });
  assert.equal(await scheduled(url), null, 'the row is gone');
});

test("a filing commits on its own: when the caller's transaction rolls back, its own write goes and the filing stays", async () => {
  // Harper 4.7 commits each database on its own and the schedule has its own database, and the schedule
  // owner commits under its key locks and reads the write back before answering: docs/in-process.md.
  for (const mode of ['own-transaction', 'request-transaction']) {
    const url = `https://install.example.com/from-host-config/${mode}`;
    const input = { targets: [{ url }] };
    const kept = await inProcess({ call: 'fileTargets', input, product: `${mode}-kept`, mode });
    assert.equal(kept.status, 200, kept.text);
    assert.equal(kept.json.upserted, 1, kept.text);
    assert.ok(await hostProduct(`${mode}-kept`), `${mode}: the committed product row is there`);

    const failedUrl = `${url}-rolled-back`;
    const failed = await inProcess({
      call: 'fileTargets',
      input: { targets: [{ url: failedUrl }] },
      product: `${mode}-rolled-back`,
      mode,
      fail: true,
    });
    if (mode === 'own-transaction')
      assert.deepEqual(failed.json, { rolledBack: 'the product update failed' });
    else assert.equal(failed.status, 409, failed.text);
    assert.equal(
      await hostProduct(`${mode}-rolled-back`),
      undefined,
      `${mode}: the caller's own write rolled back`,
    );
    assert.ok(await scheduled(failedUrl), `${mode}: the filing was committed before the rollback, and stays`);
  }
});

test('the roles from roles.yaml exist in the host app', async () => {
  const roles = (await host.operation({ operation: 'list_roles' })) as Array<{ role: string }>;
  const names = roles.map((r) => r.role);
  for (const role of ['render_feeder', 'render_discover', 'render_fleet'])
    assert.ok(names.includes(role), role);
});

test('a copy loaded without its build says so in one error line of hdb.log', async () => {
  const log = join(bare.root, 'hdb', 'log', 'hdb.log');
  const lines = await until('the not-built line in hdb.log', () => {
    const found = existsSync(log)
      ? readFileSync(log, 'utf8')
          .split('\n')
          .filter((l) => l.includes(NOT_BUILT))
      : [];
    return found.length > 0 && found;
  });
  assert.equal(lines.length, 1, lines.join('\n'));
  assert.match(lines[0]!, /\[error\]/);
  assert.match(lines[0]!, /queue-keeper-unbuilt\/dist\/resources\.js is missing/);
  const r = await bare.fetch('/prerender_admin/queue-state', {
    unchecked: "no component serves the path: the answer is Harper's own",
  });
  assert.equal(r.status, 404, 'the unbuilt copy serves nothing');
});

test('deploy_component with the tarball path installs the component into a running Harper, which serves it after the restart', async (t) => {
  // Both workers are past their boot-time scan of hdb/components (see BARE_HEALTH).
  const health = await bare.fetch('/host-health', { fresh: true });
  assert.equal(health.json?.workersReady, 2, health.text);
  const t0 = Date.now();
  const deployed = (await bare.operation({
    operation: 'deploy_component',
    project: 'queue-keeper',
    package: tarball,
    install_command: DEPLOY_INSTALL,
    restart: true,
  })) as { message: string };
  assert.match(deployed.message, /Successfully deployed: queue-keeper/);
  const deployedAt = Date.now();
  await until(
    'both workers serving the deployed component',
    async () => {
      const r = await bare
        .fetch('/prerender_admin/health', {
          fresh: true,
          unchecked: 'Harper answers the path itself until the deployed component loads',
        })
        .catch(() => undefined);
      return r?.status === 200 && r.json.workersReady >= 2;
    },
    60_000,
    250,
  );
  t.diagnostic(
    `deploy_component ${((deployedAt - t0) / 1000).toFixed(1)} s, then serving after ${((Date.now() - deployedAt) / 1000).toFixed(1)} s`,
  );
  const state = await bare.fetch('/prerender_admin/queue-state');
  assert.ok(state.status === 200 || state.status === 503, `${state.status} ${state.text}`);
  const component = join(bare.root, 'hdb', 'components', 'queue-keeper');
  assert.ok(existsSync(join(component, 'dist', 'resources.js')));
  assert.ok(!existsSync(join(component, 'node_modules', 'typescript')), 'devDependencies were installed');
  assert.equal(realpathSync(join(component, 'node_modules', 'harperdb')), harperRoot);
});
