// The one way tests and benchmarks boot a real Harper: a private HOME and root in a temp folder,
// every listener on a free 127.0.0.1 port and none on a wildcard address (see loopbackProblems), 2
// worker threads, authorizeLocal off (set through HARPER_SET_CONFIG, never the
// AUTHENTICATION_AUTHORIZELOCAL env var, whose string "false" is truthy), replication on the HTTP port
// for nodes that join a cluster (`replicationHostname`), readiness that waits for every worker, and a
// stop by pid.
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, existsSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import http from 'node:http';

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
/** The repo root: this file compiles to dist/test/harness.js. */
export const repoRoot = resolve(here, '..', '..');

/**
 * A temp copy of queue-keeper as built plus the example host-app resource (examples/bot-page.js), for
 * `startHarper({ componentDir })`: one Harper loads both the way a host app does. The example is copied
 * beside dist/resources.js and both are matched by one glob, because on 4.7.29 a `files` list naming two
 * folders did not load dist/resources.js at all. The caller removes the folder.
 */
export function componentWithBotPage(): string {
  const dir = mkdtempSync(join(tmpdir(), 'qk-bot-page-app-'));
  for (const f of ['schema.graphql', 'roles.yaml', 'package.json']) cpSync(join(repoRoot, f), join(dir, f));
  for (const d of ['dist', 'web']) cpSync(join(repoRoot, d), join(dir, d), { recursive: true });
  cpSync(join(repoRoot, 'examples', 'bot-page.js'), join(dir, 'dist', 'bot-page.js'));
  symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'), 'dir');
  const config = readFileSync(join(repoRoot, 'config.yaml'), 'utf8');
  // The component's own entry is index.js (it loads dist/resources.js); the copy names the build directly.
  const withExample = config.replace('files: index.js', "files: 'dist/{resources,bot-page}.js'");
  if (withExample === config)
    throw new Error('config.yaml no longer names index.js the way componentWithBotPage expects');
  writeFileSync(join(dir, 'config.yaml'), withExample);
  return dir;
}

export const ADMIN_USER = 'admin';
export const ADMIN_PASS = 'admin-pass-for-tests';

export interface Credentials {
  username: string;
  password: string;
}

export interface StartOptions {
  componentDir?: string;
  threads?: number;
  /** Reuse an existing root (a restart); otherwise a fresh temp root is made. */
  root?: string;
  /**
   * Extra Harper root config, merged key by key into the harness's (a nested object merges, any other
   * value replaces), so a test that passes e.g. `authentication` or `operationsApi` keeps the loopback
   * settings it does not name. A result that would listen on a wildcard address is refused.
   */
  harperConfig?: Record<string, unknown>;
  /**
   * Join Harper replication as this node name (the `hostname` peers and `add_node` use). Replication
   * listens on the node's HTTP port: `inst.replicationUrl` is what a peer's `add_node` names.
   */
  replicationHostname?: string;
  /** Extra environment for the Harper process. */
  env?: Record<string, string>;
  /** Path polled (as admin) until it answers below 500 with every worker reporting in. */
  readyPath?: string;
  readyTimeoutMs?: number;
  logLevel?: string;
}

export interface FetchInit {
  method?: string;
  body?: unknown;
  /** Raw body string sent as is (for malformed-body tests). */
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
  /** Credentials; default admin, null for none. */
  auth?: Credentials | null;
  /** A new connection each time, so requests spread over workers. */
  fresh?: boolean;
  /** Give up (reject) when the connection sits this many ms without an answer (default 120 s). */
  timeoutMs?: number;
  /**
   * Why this answer is not checked against docs/openapi.yaml. Every other answer to a path of ours is
   * (test/contract.ts); this is for answers that may come from something other than the component, such
   * as readiness polls while Harper is still loading it.
   */
  unchecked?: string;
}

export interface FetchResult {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

export interface HarperInstance {
  url: string;
  opsUrl: string;
  /** ws://127.0.0.1:<HTTP port>: where this node takes replication connections (`replicationHostname`). */
  replicationUrl: string;
  root: string;
  ports: Record<string, number>;
  pid: number;
  output: () => string;
  fetch: (path: string, init?: FetchInit) => Promise<FetchResult>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  operation: (body: Record<string, unknown>) => Promise<any>;
  addUser: (username: string, password: string, role: string) => Promise<void>;
  /** SIGTERM (SIGKILL after 15 s) and wait for exit; keeps the root. */
  stop: () => Promise<void>;
  /** SIGKILL at once (a crash); keeps the root. */
  kill: () => Promise<void>;
  /** Stop, then remove the temp root. */
  destroy: () => Promise<void>;
}

/**
 * Ports for test file slot `slot` (scripts/run-tests.mjs sets QK_TEST_SLOT for each file it runs side by
 * side): a range of its own below Linux's ephemeral range (32768 up), so neither another file's Harper nor
 * any outgoing connection is handed a port this file picked but has not bound yet. Undefined without a
 * slot (a file run by hand): then the system picks.
 */
export function slotPortRange(slot: string | undefined): { from: number; to: number } | undefined {
  if (slot === undefined || slot === '') return undefined;
  const n = Number(slot);
  if (!Number.isInteger(n) || n < 0 || n > 4) throw new Error(`QK_TEST_SLOT must be 0 to 4, not ${slot}`);
  return { from: 12_000 + n * 4000, to: 12_000 + (n + 1) * 4000 };
}

/** Every port freePort has answered in this process: never handed out twice. */
const handedOut = new Set<number>();

function tryListen(port: number): Promise<number | undefined> {
  return new Promise((resolvePort) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolvePort(undefined));
    srv.listen(port, '127.0.0.1', () => {
      const addr = srv.address();
      const got = typeof addr === 'object' && addr ? addr.port : undefined;
      srv.close(() => resolvePort(got));
    });
  });
}

export async function freePort(): Promise<number> {
  const range = slotPortRange(process.env.QK_TEST_SLOT);
  for (let attempt = 0; attempt < 500; attempt++) {
    const wanted = range ? range.from + Math.floor(Math.random() * (range.to - range.from)) : 0;
    if (handedOut.has(wanted)) continue;
    const port = await tryListen(wanted);
    if (port === undefined || handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free 127.0.0.1 port found${range ? ` in ${range.from}-${range.to - 1}` : ''}`);
}

function harperBin(): string {
  // harperdb/package.json is not in its exports map; resolve the main file and walk up.
  const main = require.resolve('harperdb');
  let dir = dirname(main);
  while (!existsSync(join(dir, 'bin', 'harperdb.js'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('cannot find harperdb/bin/harperdb.js');
    dir = up;
  }
  return join(dir, 'bin', 'harperdb.js');
}

/** How long a request may wait for its answer when the caller names no timeout (QK_TEST_REQUEST_TIMEOUT_MS). */
export const DEFAULT_REQUEST_TIMEOUT_MS = Number(process.env.QK_TEST_REQUEST_TIMEOUT_MS) || 120_000;

const keepAliveAgent = new http.Agent({ keepAlive: true, maxSockets: 64 });

export function basicAuth(c: Credentials): string {
  return 'Basic ' + Buffer.from(`${c.username}:${c.password}`).toString('base64');
}

let contractChecks = true;

/**
 * Whether request() checks answers against docs/openapi.yaml (on by default). Benchmarks turn it off:
 * they measure the server, and a check costs client time on the same cores.
 */
export function setContractChecks(on: boolean): void {
  contractChecks = on;
}

/**
 * One HTTP request. A keep-alive socket the server closed while it sat idle fails with ECONNRESET before
 * any answer; as Node's docs advise, such a request (and only such: `reusedSocket`) is sent once more
 * on a new connection. An answer to a path of ours that departs from docs/openapi.yaml fails with an
 * AssertionError (test/contract.ts), unless `init.unchecked` says why it is not checked.
 */
export async function request(baseUrl: string, path: string, init: FetchInit = {}): Promise<FetchResult> {
  let r: FetchResult;
  try {
    r = await requestOnce(baseUrl, path, init);
  } catch (e) {
    if (!(e as { staleSocket?: boolean }).staleSocket) throw e;
    r = await requestOnce(baseUrl, path, { ...init, fresh: true });
  }
  if (contractChecks && init.unchecked === undefined) {
    const { assertContract } = await import('./contract.js');
    assertContract({ method: methodOf(init), path, status: r.status, headers: r.headers, text: r.text });
  }
  return r;
}

function methodOf(init: FetchInit): string {
  return init.method ?? (init.rawBody !== undefined || init.body !== undefined ? 'POST' : 'GET');
}

function requestOnce(baseUrl: string, path: string, init: FetchInit): Promise<FetchResult> {
  const u = new URL(path, baseUrl);
  const headers: Record<string, string> = { ...(init.headers ?? {}) };
  const auth = init.auth === undefined ? { username: ADMIN_USER, password: ADMIN_PASS } : init.auth;
  if (auth) headers.authorization = basicAuth(auth);
  let payload: string | Buffer | undefined;
  if (init.rawBody !== undefined) payload = init.rawBody;
  else if (init.body !== undefined) payload = JSON.stringify(init.body);
  if (payload !== undefined) {
    headers['content-type'] ??= 'application/json';
    headers['content-length'] = String(Buffer.byteLength(payload));
  }
  if (init.fresh) headers.connection = 'close';
  return new Promise((resolveReq, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname + u.search,
        method: methodOf(init),
        headers,
        agent: init.fresh ? false : keepAliveAgent,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown = undefined;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolveReq({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
        res.on('error', reject);
      },
    );
    // Never unbounded: a Harper that accepts a request and never answers fails the step (a before()
    // hook's setup among them) instead of hanging the run.
    const timeoutMs = init.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (req.reusedSocket && err.code === 'ECONNRESET') Object.assign(err, { staleSocket: true });
      reject(err);
    });
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A start that failed. Whatever it had started is gone by the time this is thrown: the Harper child is
 * stopped (its pid is here so a test can check) and a temp root it made is removed.
 */
export class HarperStartError extends Error {
  constructor(
    message: string,
    readonly pid: number | undefined,
    readonly root: string,
    readonly ports: Record<string, number> | undefined,
    /** The last status the ready path answered, if it answered at all. */
    readonly lastStatus: number | undefined,
    /** Everything Harper printed (the message has only its tail). */
    readonly output: string,
  ) {
    super(message);
    this.name = 'HarperStartError';
  }
}

/** How long one readiness request may take before it counts as no answer. */
const READY_REQUEST_TIMEOUT_MS = 5000;

export interface ReadyWatch {
  /** Worker threads that must report in (`workersReady` in the answer, when it has one). */
  threads: number;
  /** Epoch ms after which waiting fails. */
  deadline: number;
  /** A reason to stop waiting at once (the process died), or undefined. */
  failed: () => string | undefined;
  answered?: (status: number) => void;
  /** Output to add to the timeout message. */
  tail?: () => string;
}

/**
 * Polls `readyPath` (as admin, each time on a new connection) until it answers below 500, not 404, with
 * every worker reporting in. No single request may outlast the deadline: one that gets no answer (a
 * server that accepted the connection and hangs) is given up, so the deadline always holds.
 */
export async function waitReady(url: string, readyPath: string, w: ReadyWatch): Promise<void> {
  let lastStatus: number | undefined;
  for (;;) {
    const failure = w.failed();
    if (failure) throw new Error(failure);
    if (Date.now() > w.deadline) {
      const answer = lastStatus === undefined ? 'no answer' : `last answer ${lastStatus}`;
      throw new Error(`Harper not ready after timeout (${readyPath}: ${answer}):\n${w.tail?.() ?? ''}`);
    }
    try {
      const timeoutMs = Math.max(250, Math.min(READY_REQUEST_TIMEOUT_MS, w.deadline - Date.now()));
      const r = await request(url, readyPath, {
        fresh: true,
        timeoutMs,
        unchecked: 'Harper answers the ready path itself until the component is loaded',
      });
      lastStatus = r.status;
      w.answered?.(r.status);
      if (r.status < 500 && r.status !== 404) {
        const workers = (r.json as { workersReady?: number } | undefined)?.workersReady;
        if (workers === undefined || workers >= w.threads) return;
      }
    } catch {
      // not listening yet, or no answer in time
    }
    await sleep(150);
  }
}

export async function startHarper(opts: StartOptions = {}): Promise<HarperInstance> {
  const root = opts.root ?? mkdtempSync(join(tmpdir(), 'qk-harper-'));
  const freshRoot = !opts.root;
  let child: ChildProcess | undefined;
  let ports: Record<string, number> | undefined;
  let lastStatus: number | undefined;
  let output = (): string => '';
  try {
    return await boot(opts, root, {
      spawned: (c, p, out) => ((child = c), (ports = p), (output = out)),
      answered: (status) => (lastStatus = status),
    });
  } catch (e) {
    // Stop what this start began before reporting: a Harper left booting keeps the test process alive.
    const running = child;
    if (running?.pid !== undefined && running.exitCode === null && running.signalCode === null) {
      const exited = new Promise((r) => running.once('exit', r));
      running.kill('SIGTERM');
      const t = setTimeout(() => running.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(t);
    }
    if (freshRoot) rmSync(root, { recursive: true, force: true });
    const message = e instanceof Error ? e.message : String(e);
    throw new HarperStartError(message, child?.pid, root, ports, lastStatus, output());
  }
}

type ConfigObject = Record<string, unknown>;

function isObject(v: unknown): v is ConfigObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `over` merged into `base`: nested objects merge key by key; any other value (null too) replaces. */
export function mergeConfig(base: ConfigObject, over: ConfigObject): ConfigObject {
  const out: ConfigObject = { ...base };
  for (const [k, v] of Object.entries(over))
    out[k] = isObject(v) && isObject(out[k]) ? mergeConfig(out[k], v) : v;
  return out;
}

/**
 * Why a Harper root config would listen beyond 127.0.0.1 on 4.7.29 (or take replication where no
 * authentication listener checks it); empty when it would not. Checked before every boot, so a test's
 * `harperConfig` cannot bring a wildcard listener back.
 */
export function loopbackProblems(config: ConfigObject): string[] {
  const at = (path: string): unknown =>
    path.split('.').reduce<unknown>((o, k) => (isObject(o) ? o[k] : undefined), config);
  const problems: string[] = [];
  for (const path of [
    'http.port',
    'http.securePort',
    'operationsApi.network.port',
    'operationsApi.network.securePort',
    'mqtt.network.port',
    'mqtt.network.securePort',
    'replication.port',
    'replication.securePort',
    'authentication.port',
    'authentication.securePort',
  ]) {
    const v = at(path);
    if (v !== undefined && v !== null && !(typeof v === 'string' && v.startsWith('127.0.0.1:')))
      problems.push(`${path} is ${JSON.stringify(v)}, not "127.0.0.1:<port>" (or null)`);
  }
  const httpPort = at('http.port');
  if (at('authentication.port') !== httpPort)
    problems.push(
      `authentication.port must be http.port (${JSON.stringify(httpPort)}): without one Harper listens on a ` +
        'random port on `::` in every worker',
    );
  const domainSocket = at('operationsApi.network.domainSocket');
  if (domainSocket !== undefined && domainSocket !== null)
    problems.push(
      'operationsApi.network.domainSocket must be null: workers after the first listen on it as a port on `::`',
    );
  const replPort = at('replication.port');
  if (replPort !== undefined && replPort !== null && replPort !== httpPort)
    problems.push(
      `replication.port must be http.port (${JSON.stringify(httpPort)}) or unset: on a port of its own no ` +
        "authentication listener checks the peers' credentials and add_node fails (use replicationHostname)",
    );
  return problems;
}

/**
 * The root config a boot passes in HARPER_SET_CONFIG: the harness's loopback settings with
 * `opts.harperConfig` merged in. Throws when the result would listen beyond 127.0.0.1 (loopbackProblems).
 */
export function harperRootConfig(
  opts: StartOptions,
  ports: Record<string, number>,
  threads = opts.threads ?? 2,
): ConfigObject {
  const httpListen = `127.0.0.1:${ports.http}`;
  const config = mergeConfig(
    {
      // Harper's defaults also listen for TLS on every interface (http 9926, operations 9925): off here.
      http: { port: httpListen, securePort: null },
      operationsApi: {
        // No domain socket: 4.7.29 listens on it as a path only in worker 0; any other worker takes the
        // path for a port number and serves the whole operations API on a random port on `::`.
        network: { port: `127.0.0.1:${ports.ops}`, securePort: null, domainSocket: null },
      },
      mqtt: { network: { port: `127.0.0.1:${ports.mqtt}`, securePort: `127.0.0.1:${ports.mqtts}` } },
      // A cluster node takes replication on its HTTP port, where the authentication listener (below)
      // checks the Basic credentials peers send: on a port of its own, no listener checks them and
      // `add_node` fails with "Unauthorized 1008".
      replication: opts.replicationHostname
        ? {
            hostname: opts.replicationHostname,
            url: `ws://${httpListen}`,
            port: httpListen,
            securePort: `127.0.0.1:${ports.repl}`,
          }
        : { securePort: `127.0.0.1:${ports.repl}` },
      threads: { count: threads },
      // The port pins Harper's authentication listener to the HTTP port; without one, 4.7.29 registers
      // it for port "all", which each worker also listens on as a plain HTTP server on a random port on
      // `::`.
      authentication: { authorizeLocal: false, port: httpListen },
      logging: { level: opts.logLevel ?? 'info', stdStreams: true },
      localStudio: { enabled: false },
    },
    opts.harperConfig ?? {},
  );
  const problems = loopbackProblems(config);
  if (problems.length > 0)
    throw new Error(`the Harper config would not listen on 127.0.0.1 only:\n  ${problems.join('\n  ')}`);
  return config;
}

interface BootWatch {
  spawned: (child: ChildProcess, ports: Record<string, number>, output: () => string) => void;
  answered: (status: number) => void;
}

async function boot(opts: StartOptions, root: string, watch: BootWatch): Promise<HarperInstance> {
  const componentDir = opts.componentDir ?? repoRoot;
  const threads = opts.threads ?? 2;
  const home = join(root, 'home');
  const dataRoot = join(root, 'hdb');
  const portsFile = join(root, 'ports.json');
  let ports: Record<string, number>;
  if (existsSync(portsFile)) {
    ports = JSON.parse(readFileSync(portsFile, 'utf8')) as Record<string, number>;
  } else {
    ports = {
      http: await freePort(),
      ops: await freePort(),
      mqtt: await freePort(),
      mqtts: await freePort(),
      repl: await freePort(),
    };
    const { writeFileSync, mkdirSync } = await import('node:fs');
    mkdirSync(home, { recursive: true });
    writeFileSync(portsFile, JSON.stringify(ports));
  }
  const setConfig = harperRootConfig(opts, ports, threads);
  // Under `npm test`, npm_* variables describe that run (npm_config_local_prefix is this checkout); an
  // npm that Harper spawns (deploy_component's install) must not inherit them.
  const inherited = Object.entries(process.env).filter(
    (e): e is [string, string] =>
      e[1] !== undefined &&
      !e[0].toLowerCase().startsWith('npm_') &&
      !['AUTHENTICATION_AUTHORIZELOCAL', 'NODE_OPTIONS', 'NODE_TEST_CONTEXT'].includes(e[0]),
  );
  const env: Record<string, string> = {
    ...Object.fromEntries(inherited),
    TC_AGREEMENT: 'yes',
    HDB_ADMIN_USERNAME: ADMIN_USER,
    HDB_ADMIN_PASSWORD: ADMIN_PASS,
    ROOTPATH: dataRoot,
    HOME: home,
    HARPER_SET_CONFIG: JSON.stringify(setConfig),
    QUEUE_KEEPER_SECRET_KEY: process.env.QUEUE_KEEPER_SECRET_KEY ?? Buffer.alloc(32, 7).toString('base64'),
    // As npm start does: prerender fleets reach this loopback node at its HTTP port.
    QUEUE_KEEPER_CALLBACK_ORIGIN: `http://127.0.0.1:${ports.http}`,
    ...(opts.env ?? {}),
  };
  const child: ChildProcess = spawn(process.execPath, [harperBin(), 'run', componentDir], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  watch.spawned(child, ports, () => out);
  let spawnError: Error | undefined;
  child.on('error', (e) => (spawnError = e));
  const keep = (c: Buffer) => {
    out += c.toString();
    if (out.length > 400_000) out = out.slice(-200_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let exited = false;
  const exitPromise = new Promise<void>((r) => child.on('exit', () => ((exited = true), r())));

  const url = `http://127.0.0.1:${ports.http}`;
  const opsUrl = `http://127.0.0.1:${ports.ops}`;
  const inst: HarperInstance = {
    url,
    opsUrl,
    replicationUrl: `ws://127.0.0.1:${ports.http}`,
    root,
    ports,
    pid: child.pid ?? -1,
    output: () => out,
    fetch: (path, init) => request(url, path, init),
    operation: async (body) => {
      const r = await request(opsUrl, '/', { body });
      if (r.status >= 400)
        throw new Error(`operation ${String(body.operation)} failed: ${r.status} ${r.text}`);
      return r.json;
    },
    addUser: async (username, password, role) => {
      await inst.operation({ operation: 'add_user', role, username, password, active: true });
    },
    stop: async () => {
      if (exited) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exitPromise;
      clearTimeout(t);
    },
    kill: async () => {
      if (exited) return;
      child.kill('SIGKILL');
      await exitPromise;
    },
    destroy: async () => {
      await inst.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };

  const readyPath = opts.readyPath ?? '/prerender_admin/health';
  await waitReady(url, readyPath, {
    threads,
    deadline: Date.now() + (opts.readyTimeoutMs ?? 90_000),
    failed: () =>
      spawnError
        ? `Harper could not be started: ${spawnError.message}`
        : exited
          ? `Harper exited during start:\n${out.slice(-4000)}`
          : undefined,
    answered: watch.answered,
    tail: () => out.slice(-4000),
  });
  return inst;
}
