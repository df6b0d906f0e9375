// `npm start`: boots a local Harper with queue-keeper loaded, on a data folder inside the repo
// (.harper-data/, ignored by git), and prints the URL and admin credentials. Ctrl-C stops it.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { localCredentials, localSecretKey } from './local-secrets.mjs';

const require = createRequire(import.meta.url);
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const data = join(repo, '.harper-data');
mkdirSync(join(data, 'home'), { recursive: true });

if (!existsSync(join(repo, 'dist', 'resources.js'))) {
  console.error('dist/resources.js is missing: run `npm install` (it builds) or `npm run build` first.');
  process.exit(1);
}

// Admin credentials and the hook-secret sealing key are made once and kept in the data folder.
const creds = localCredentials(data);
const secretKey = localSecretKey(data);

const host = process.env.HOST ?? '127.0.0.1';
const httpPort = Number(process.env.PORT ?? 9926);
const opsPort = Number(process.env.OPS_PORT ?? 9925);
const mqttPort = Number(process.env.MQTT_PORT ?? 1883);
const threads = Number(process.env.THREADS ?? 2);
// Each worker thread's heap limit in MB (Harper's `threads.maxHeapMemory`). Unset: Harper's default,
// the machine's memory (at most 20,000 MB) / (10 + threads / 4), at least 512. Worker 0 holds the
// keeper's rows: docs/sizing.md says what a row count needs.
const maxHeapMb = process.env.MAX_HEAP_MB ? Number(process.env.MAX_HEAP_MB) : undefined;
if (maxHeapMb !== undefined && !(Number.isInteger(maxHeapMb) && maxHeapMb >= 256)) {
  console.error(`MAX_HEAP_MB must be a whole number of MB, at least 256 (got ${process.env.MAX_HEAP_MB})`);
  process.exit(1);
}

const setConfig = {
  // Harper's defaults also listen for TLS on every interface (http 9926, operations 9925, replication
  // 9933): the first two are off, replication's stays on loopback.
  http: { port: `${host}:${httpPort}`, securePort: null },
  operationsApi: {
    // No domain socket: Harper 4.7.29 listens on it as a path only in worker 0; any other worker takes
    // the path for a port number and serves the whole operations API on a random port on `::`.
    network: { port: `${host}:${opsPort}`, securePort: null, domainSocket: null },
  },
  replication: { securePort: `${host}:${Number(process.env.REPL_PORT ?? 9933)}` },
  mqtt: { network: { port: `${host}:${mqttPort}`, securePort: `${host}:${mqttPort + 7000}` } },
  threads: { count: threads, ...(maxHeapMb ? { maxHeapMemory: maxHeapMb } : {}) },
  // The port pins Harper's authentication listener to the HTTP port; without one, 4.7.29 registers it
  // for port "all", which each worker also listens on as a plain HTTP server on a random port on `::`.
  authentication: { authorizeLocal: false, port: `${host}:${httpPort}` },
  logging: { level: process.env.LOG_LEVEL ?? 'info', stdStreams: true },
  localStudio: { enabled: false },
};

const harperMain = require.resolve('harperdb');
let dir = dirname(harperMain);
while (!existsSync(join(dir, 'bin', 'harperdb.js'))) dir = dirname(dir);
console.log(
  `npm start accepts Harper's licence terms for you (TC_AGREEMENT=yes): read them in ${join(dir, 'LICENSE')} and at https://harperdb.io/legal/end-user-license-agreement`,
);

const env = {
  ...process.env,
  TC_AGREEMENT: 'yes',
  HDB_ADMIN_USERNAME: creds.username,
  HDB_ADMIN_PASSWORD: creds.password,
  ROOTPATH: join(data, 'hdb'),
  HOME: join(data, 'home'),
  HARPER_SET_CONFIG: JSON.stringify(setConfig),
  QUEUE_KEEPER_SECRET_KEY: secretKey,
  // Prerender fleets post results to this origin and dial its host (docs/prerender-fleet.md).
  QUEUE_KEEPER_CALLBACK_ORIGIN: process.env.QUEUE_KEEPER_CALLBACK_ORIGIN ?? `http://${host}:${httpPort}`,
};
delete env.AUTHENTICATION_AUTHORIZELOCAL;

// Where this server listens, for `npm run fleet` (scripts/fleet.mjs) to claim from without flags.
writeFileSync(
  join(data, 'server.json'),
  JSON.stringify({ url: `http://${host}:${httpPort}`, mqtt: `mqtt://${host}:${mqttPort}` }),
);

const child = spawn(process.execPath, [join(dir, 'bin', 'harperdb.js'), 'run', repo], {
  env,
  stdio: ['ignore', 'pipe', 'inherit'],
});
const url = `http://${host}:${httpPort}`;
let announced = false;
child.stdout.on('data', (c) => {
  process.stdout.write(c);
});
const poll = setInterval(async () => {
  try {
    const r = await fetch(`${url}/prerender_admin/health`, {
      headers: {
        authorization: 'Basic ' + Buffer.from(`${creds.username}:${creds.password}`).toString('base64'),
      },
    });
    if (r.status < 500 && !announced) {
      announced = true;
      clearInterval(poll);
      console.log(
        `\nqueue-keeper is up\n  URL:        ${url}\n  operations: http://${host}:${opsPort}\n  username:   ${creds.username}\n  password:   ${creds.password}\n  data:       ${data}\n` +
          `  try: curl -u ${creds.username}:${creds.password} -H 'content-type: application/json' -d '{"targets":[{"url":"https://example.com/"}]}' ${url}/render_queue/targets\n`,
      );
    }
  } catch {
    // not listening yet
  }
}, 500);
const stop = () => child.kill('SIGTERM');
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
child.on('exit', (code) => {
  clearInterval(poll);
  process.exit(code ?? 0);
});
