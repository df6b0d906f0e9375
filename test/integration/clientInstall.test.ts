// The fleet client installed the way its users install it: `npm pack` of client/, the tarball installed
// into an empty folder with no harperdb (from the local npm cache), its `queue-keeper-fleet` command
// answering --help, and that command rendering against a running queue-keeper (a harness Harper, as
// `npm start` gives), once over HTTP and once over the persistent channel. Packing and installing happen
// once per run.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { repoRoot, startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const fleetUser: Credentials = { username: 'packed-fleet', password: 'packed-fleet-pass' };
const clientDir = join(repoRoot, 'client');

const work = mkdtempSync(join(tmpdir(), 'qk-client-install-'));
let tarball: string;
let app: string;
let installedWith = '';
let h: HarperInstance;
let site: http.Server;
let siteBase = '';
const children: ChildProcess[] = [];

/** npm with none of the npm_* variables of an enclosing `npm test` (they name this checkout). */
function npm(args: string[], cwd: string) {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.toLowerCase().startsWith('npm_')) env[k] = v;
  // Bounded: an npm stuck on the network fails the setup instead of hanging it.
  const r = spawnSync('npm', args, { cwd, env, encoding: 'utf8', timeout: 240_000 });
  return { ok: r.status === 0, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}` };
}

function files(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p).split(sep).join('/'));
    }
  };
  walk(dir);
  return out.sort();
}

/**
 * `npm pack` of a copy of client/ without its build (so this run's client/dist is left alone, and the
 * package's own prepack builds it), into `work`. The copy sees the repo's node_modules for the compiler.
 */
function packClient(): string {
  const copy = join(work, 'client');
  cpSync(clientDir, copy, {
    recursive: true,
    filter: (p) => !['dist', 'node_modules'].includes(relative(clientDir, p).split(sep)[0]!),
  });
  symlinkSync(join(repoRoot, 'node_modules'), join(copy, 'node_modules'), 'dir');
  const r = npm(['pack', '--pack-destination', work], copy);
  assert.ok(r.ok, `npm pack failed:\n${r.out}`);
  const packed = readdirSync(work).filter((f) => f.endsWith('.tgz'));
  assert.equal(packed.length, 1, r.out);
  return join(work, packed[0]!);
}

/** An empty folder (a package.json and nothing else) that installs the tarball. */
function installInto(): string {
  const dir = join(work, 'app');
  mkdirSync(dir);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'qk-fleet-app', private: true }));
  // From the local npm cache when it has everything; otherwise npm may ask the registry for what it lacks.
  let r = npm(['install', '--offline', '--no-audit', '--no-fund', tarball], dir);
  installedWith = 'npm install --offline';
  if (!r.ok) {
    const lacked =
      /request to (\S+) failed/.exec(r.out)?.[1] ?? r.out.split('\n').find((l) => l.includes('error'));
    r = npm(['install', '--prefer-offline', '--no-audit', '--no-fund', tarball], dir);
    installedWith = `npm install --prefer-offline (offline, npm lacked ${lacked ?? 'something'})`;
  }
  assert.ok(r.ok, `installing the tarball failed:\n${r.out}`);
  return dir;
}

/** The installed command, as a user's shell finds it. */
function bin(): string {
  return join(app, 'node_modules', '.bin', 'queue-keeper-fleet');
}

/** Runs the installed command until it is told to stop; collects what it prints. */
function fleet(args: string[]): { child: ChildProcess; out: () => string; exit: Promise<number | null> } {
  const child = spawn(bin(), args, { cwd: app, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const exit = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return { child, out: () => out, exit };
}

before(
  async () => {
    tarball = packClient();
    app = installInto();
    site = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(`<!doctype html><html><body><h1>page ${req.url}</h1></body></html>`);
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
    h = await startHarper();
    await h.addUser(fleetUser.username, fleetUser.password, 'render_fleet');
    const cfg = await h.fetch('/prerender_admin/config', {
      body: {
        queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
        render: { routes: [{ name: 'site', match: 'prefix', path: '/p/' }] },
      },
    });
    assert.equal(cfg.status, 200, cfg.text);
  },
  { timeout: 400_000 },
);

after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await h?.destroy();
  site?.closeAllConnections();
  await new Promise<void>((r) => (site ? site.close(() => r()) : r()));
  rmSync(work, { recursive: true, force: true });
});

test('the tarball holds the compiled library, its types, the command and the README, and nothing else', (t) => {
  t.diagnostic(`installed with: ${installedWith}`);
  const pkg = join(app, 'node_modules', '@queue-keeper', 'fleet-client');
  const shipped = files(pkg);
  const built = files(join(work, 'client', 'dist', 'src'))
    .filter((f) => !f.endsWith('.map'))
    .map((f) => `dist/src/${f}`);
  // npm adds a LICENSE file by itself when the package has one.
  const always = [
    'README.md',
    'package.json',
    ...(existsSync(join(clientDir, 'LICENSE')) ? ['LICENSE'] : []),
  ];
  assert.deepEqual(shipped, [...always, ...built].sort());
  assert.ok(shipped.includes('dist/src/bin.js') && shipped.includes('dist/src/index.d.ts'));
  assert.ok(
    !shipped.some((f) => f.startsWith('dist/test/') || f.endsWith('.map') || /(?<!\.d)\.ts$/.test(f)),
  );
});

test('installed alone, it brings its runtime dependencies and no harperdb, and no optional browser packages', () => {
  const mine = JSON.parse(readFileSync(join(clientDir, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    peerDependencies: Record<string, string>;
  };
  const modules = join(app, 'node_modules');
  for (const dep of Object.keys(mine.dependencies))
    assert.ok(existsSync(join(modules, dep)), `${dep} is missing`);
  assert.ok(!existsSync(join(modules, 'harperdb')), 'harperdb was installed');
  for (const peer of Object.keys(mine.peerDependencies))
    assert.ok(!existsSync(join(modules, peer)), `the optional peer ${peer} was installed`);
});

test('queue-keeper-fleet --help answers with every flag, --channel among them', () => {
  const r = spawnSync(bin(), ['--help'], { cwd: app, encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  for (const flag of [
    '--url',
    '--username',
    '--password',
    '--concurrency',
    '--renderer',
    '--channel',
    '--mqtt',
  ])
    assert.match(r.stdout, new RegExp(`^  ${flag}\\b`, 'm'), flag);
});

async function file(urls: string[]): Promise<void> {
  const r = await h.fetch('/render_queue/targets', {
    body: { targets: urls.map((url) => ({ url, cadenceMs: HOUR, dueAt: Date.now() - MIN })) },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.upserted, urls.length, r.text);
}

interface Counters {
  reported: number;
  superseded: number;
  dropped: number;
  unreported: number;
  failed: number;
}

/** The counters the command prints when it stops. */
function finalCounters(out: string): Counters {
  const line = /final counters (\{.*\})/.exec(out);
  assert.ok(line, out);
  return JSON.parse(line[1]!) as Counters;
}

/** Runs the command until every row is rescheduled and its page stored, then stops it with SIGTERM. */
async function renders(urls: string[], extra: string[]): Promise<string> {
  const run = fleet([
    '--url',
    h.url,
    '--username',
    fleetUser.username,
    '--password',
    fleetUser.password,
    '--concurrency',
    '2',
    '--no-mqtt',
    '--stats-every',
    '0',
    ...extra,
  ]);
  const done = Date.now();
  await until(
    'every row rescheduled a cadence ahead',
    async () => {
      for (const url of urls) {
        const ex = await h.fetch('/prerender_admin/explain', { body: { url } });
        if (ex.status !== 200 || !(ex.json.row?.nextRenderTime >= done + HOUR - 5 * MIN)) return false;
      }
      return true;
    },
    60_000,
    250,
  ).catch((e: unknown) => {
    throw new Error(`${String(e)}\nthe command printed:\n${run.out()}`);
  });
  const pages = (await h.operation({
    operation: 'search_by_id',
    database: 'render_queue',
    table: 'RenderedPage',
    ids: urls.map(key),
    get_attributes: ['id', 'url', 'deviceType', 'statusCode', 'body'],
  })) as Array<{ id: string; url: string; deviceType: string; statusCode: number; body: string }>;
  assert.equal(pages.length, urls.length);
  for (const p of pages) {
    assert.equal(p.id, key(p.url), 'the page is the desktop page of its URL');
    assert.equal(p.deviceType, 'desktop');
    assert.equal(p.statusCode, 200);
    assert.ok(p.body.includes(`<h1>page ${new URL(p.url).pathname}</h1>`), p.body);
  }
  run.child.kill('SIGTERM');
  assert.equal(await run.exit, 0, run.out());
  return run.out();
}

test('the installed command renders against a running queue-keeper over HTTP, and stops cleanly on SIGTERM', async () => {
  const urls = Array.from({ length: 6 }, (_, i) => `${siteBase}/p/http-${i}`);
  await file(urls);
  const out = await renders(urls, []);
  assert.match(out, new RegExp(`fleet: claiming from ${h.url} as ${fleetUser.username}`));
  const c = finalCounters(out);
  assert.equal(c.reported, urls.length, out);
  assert.equal(c.superseded + c.dropped + c.unreported + c.failed, 0, out);
});

test('with --channel it renders over the persistent channel', async () => {
  const urls = Array.from({ length: 6 }, (_, i) => `${siteBase}/p/channel-${i}`);
  await file(urls);
  const out = await renders(urls, ['--channel']);
  assert.match(out, /, over the channel/);
  const c = finalCounters(out);
  assert.equal(c.reported, urls.length, out);
  assert.equal(c.superseded + c.dropped + c.unreported + c.failed, 0, out);
});
