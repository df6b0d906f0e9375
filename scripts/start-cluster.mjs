// `npm run start:cluster`: boots three Harper nodes with queue-keeper loaded, replicating with each
// other over insecure WebSocket on 127.0.0.1 (docs/clusters.md) on each node's HTTP port, with no listener on
// a wildcard address (see boot), each on its own data folder inside the repo
// (.harper-data/cluster/<node>/, ignored by git). Prints each node's URL and the shared admin
// credentials; Ctrl-C stops all three (each by its pid). Data is kept between runs. Each node's Harper
// output goes to .harper-data/cluster/<node>/harper.log (VERBOSE=1 prints it here too, prefixed), so the
// terminal shows the script's own progress and summary.
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { localCredentials, localSecretKey } from './local-secrets.mjs';

const require = createRequire(import.meta.url);
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const data = join(repo, '.harper-data', 'cluster');
mkdirSync(data, { recursive: true });

if (!existsSync(join(repo, 'dist', 'resources.js'))) {
  console.error('dist/resources.js is missing: run `npm install` (it builds) or `npm run build` first.');
  process.exit(1);
}

// One admin user and one sealing key for the whole cluster: hooks replicate, so every node must be able
// to unseal their secrets, and each node logs in to the others as this user.
const creds = localCredentials(data);
const secretKey = localSecretKey(data);
const basic = 'Basic ' + Buffer.from(`${creds.username}:${creds.password}`).toString('base64');

const host = '127.0.0.1';
const base = Number(process.env.BASE_PORT ?? 19900);
const threads = Number(process.env.THREADS ?? 1);
const names = ['node-a', 'node-b', 'node-c'];
const nodes = names.map((name, i) => {
  const p = base + i * 10;
  return {
    name,
    dir: join(data, name),
    http: p,
    ops: p + 1,
    mqtt: p + 2,
    mqtts: p + 3,
    // p + 4 was replication's own port; replication now comes in on the HTTP port.
    replSecure: p + 5,
  };
});

const harperMain = require.resolve('harperdb');
let bin = dirname(harperMain);
while (!existsSync(join(bin, 'bin', 'harperdb.js'))) bin = dirname(bin);
console.log(
  `npm run start:cluster accepts Harper's licence terms for you (TC_AGREEMENT=yes): read them in ${join(bin, 'LICENSE')} and at https://harperdb.io/legal/end-user-license-agreement`,
);
bin = join(bin, 'bin', 'harperdb.js');

/** Where a node takes replication connections: its HTTP port. */
const replicationUrl = (n) => `ws://${host}:${n.http}`;

const children = new Map();
let stopping = false;

function boot(n) {
  mkdirSync(join(n.dir, 'home'), { recursive: true });
  const setConfig = {
    // Harper's defaults also listen for TLS on every interface (http 9926, operations 9925): off here.
    http: { port: `${host}:${n.http}`, securePort: null },
    operationsApi: {
      // No domain socket: Harper 4.7.29 listens on it as a path only in worker 0; with THREADS=2 or more,
      // any other worker takes the path for a port number and serves the operations API on `::`.
      network: { port: `${host}:${n.ops}`, securePort: null, domainSocket: null },
    },
    mqtt: { network: { port: `${host}:${n.mqtt}`, securePort: `${host}:${n.mqtts}` } },
    // Replication on the HTTP port, where the authentication listener (below) checks the Basic
    // credentials a peer sends: on a port of its own no listener checks them and add_node fails with
    // "Unauthorized 1008".
    replication: {
      hostname: n.name,
      url: replicationUrl(n),
      port: `${host}:${n.http}`,
      securePort: `${host}:${n.replSecure}`,
    },
    threads: { count: threads },
    // The port pins Harper's authentication listener to the HTTP port; without one, 4.7.29 registers it
    // for port "all", which each worker also listens on as a plain HTTP server on a random port on `::`.
    authentication: { authorizeLocal: false, port: `${host}:${n.http}` },
    logging: { level: process.env.LOG_LEVEL ?? 'info', stdStreams: true },
    localStudio: { enabled: false },
  };
  const env = {
    ...process.env,
    TC_AGREEMENT: 'yes',
    HDB_ADMIN_USERNAME: creds.username,
    HDB_ADMIN_PASSWORD: creds.password,
    ROOTPATH: join(n.dir, 'hdb'),
    HOME: join(n.dir, 'home'),
    HARPER_SET_CONFIG: JSON.stringify(setConfig),
    QUEUE_KEEPER_SECRET_KEY: secretKey,
    // Each node's own origin: a fleet posts a result to the node that granted its lease. One unchanged
    // prerender fleet still reaches only one of these nodes (its queuePort is one number for every host;
    // docs/prerender-fleet.md).
    QUEUE_KEEPER_CALLBACK_ORIGIN: `http://${host}:${n.http}`,
  };
  delete env.AUTHENTICATION_AUTHORIZELOCAL;
  const child = spawn(process.execPath, [bin, 'run', repo], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.set(n.name, child);
  const logFile = join(n.dir, 'harper.log');
  const logStream = createWriteStream(logFile, { flags: 'a' });
  logStream.write(
    `\n---- ${new Date().toISOString()} start:cluster boots ${n.name} (pid ${child.pid}) ----\n`,
  );
  const verbose = process.env.VERBOSE === '1';
  const prefix = (stream) => {
    let rest = '';
    stream.on('data', (c) => {
      logStream.write(c);
      if (!verbose) return;
      const lines = (rest + c.toString()).split('\n');
      rest = lines.pop() ?? '';
      for (const l of lines) process.stdout.write(`[${n.name}] ${l}\n`);
    });
  };
  prefix(child.stdout);
  prefix(child.stderr);
  console.log(`${n.name}: booting (pid ${child.pid}), Harper's output in ${logFile}`);
  child.on('exit', (code, signal) => {
    children.delete(n.name);
    logStream.end();
    if (!stopping) {
      // The cause is in Harper's own output: show its end here, not only in the file.
      const tail = readFileSync(logFile, 'utf8').split('\n').slice(-25).join('\n');
      console.error(
        `[${n.name}] exited (${signal ?? code}); the end of ${logFile}:\n${tail}\nstopping the others`,
      );
    }
    stopAll();
  });
}

async function call(url, init = {}) {
  const r = await fetch(url, {
    ...init,
    headers: { authorization: basic, 'content-type': 'application/json', ...(init.headers ?? {}) },
  });
  return { status: r.status, text: await r.text() };
}

async function healthy(n) {
  for (;;) {
    if (stopping) return;
    try {
      const r = await call(`http://${host}:${n.http}/prerender_admin/health`);
      if (r.status < 500 && r.status !== 404) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function link(from, to) {
  const r = await call(`http://${host}:${from.ops}/`, {
    method: 'POST',
    body: JSON.stringify({
      operation: 'add_node',
      hostname: to.name,
      url: replicationUrl(to),
      authorization: basic,
      retain_authorization: true,
    }),
  });
  // A second run finds the nodes already linked; that answer is fine.
  if (r.status >= 400 && !/already|exists/i.test(r.text))
    console.error(`add_node ${from.name} -> ${to.name}: ${r.status} ${r.text}`);
}

async function rowCount(n, where = '') {
  const r = await call(`http://${host}:${n.ops}/`, {
    method: 'POST',
    body: JSON.stringify({
      operation: 'sql',
      sql: `SELECT COUNT(*) AS c FROM render_schedule.RenderSchedule${where}`,
    }),
  });
  return r.status === 200 ? (JSON.parse(r.text)[0]?.c ?? 0) : -1;
}

/**
 * Waits until a row filed on each node reaches the other two by replication's stream, then deletes the
 * probes. Right after `add_node`, Harper 4.7.29 copies each database whole to the new peer and can skip a
 * write committed while that copy runs (docs/clusters.md, "Joining a node"); a probe that
 * arrives says the copy is over, so rows filed after "cluster is up" replicate like any later write.
 */
async function untilRowsStream() {
  const deadline = Date.now() + 60_000;
  for (const from of nodes) {
    const others = nodes.filter((n) => n !== from);
    const probes = [];
    let arrived = false;
    while (!arrived && !stopping && Date.now() < deadline) {
      const url = `https://join-probe.queue-keeper.invalid/${from.name}/${probes.length}`;
      probes.push(url);
      const filed = await call(`http://${host}:${from.http}/render_queue/targets`, {
        method: 'POST',
        body: JSON.stringify({ targets: [{ url, dueAt: Date.now() + 86_400_000 }] }),
      });
      if (filed.status !== 200) console.error(`probe on ${from.name}: ${filed.status} ${filed.text}`);
      // A probe filed while the copy ran may be skipped like any other row: after 3 s, file another.
      const giveUp = Date.now() + 3000;
      while (!arrived && Date.now() < giveUp) {
        const seen = await Promise.all(others.map((n) => rowCount(n, ` WHERE cacheKey = '${url}'`)));
        arrived = seen.every((c) => c === 1);
        if (!arrived) await new Promise((r) => setTimeout(r, 200));
      }
    }
    await call(`http://${host}:${from.http}/render_queue/targets`, {
      method: 'DELETE',
      body: JSON.stringify({ urls: probes }),
    });
    if (!arrived && !stopping)
      console.error(
        `warning: a row filed on ${from.name} did not reach the other nodes within 60 s; ` +
          'rows filed now may not replicate (check cluster_status)',
      );
  }
}

/**
 * Waits until every node's beat, as every node reads it, lists all three nodes: from then on each row is
 * held by one node. Before, a node still holds by the view it had alone, and a row filed now could be
 * granted on two or three nodes.
 */
async function untilSettled() {
  const want = nodes.map((n) => n.name).join(',');
  const deadline = Date.now() + 60_000;
  while (!stopping && Date.now() < deadline) {
    let settled = true;
    for (const n of nodes) {
      const r = await call(`http://${host}:${n.ops}/`, {
        method: 'POST',
        body: JSON.stringify({ operation: 'sql', sql: 'SELECT id, view FROM render_queue.QueueNode' }),
      });
      const beats = r.status === 200 ? JSON.parse(r.text) : [];
      if (!nodes.every((m) => beats.find((b) => b.id === m.name)?.view?.join(',') === want)) settled = false;
    }
    if (settled) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  if (!stopping)
    console.error('warning: the three nodes did not agree on the membership within 60 s (see their logs)');
}

function stopAll() {
  stopping = true;
  for (const child of children.values()) child.kill('SIGTERM');
  if (children.size === 0) process.exit(0);
}
process.on('SIGINT', stopAll);
process.on('SIGTERM', stopAll);
process.on('exit', () => {
  for (const child of children.values()) child.kill('SIGKILL');
});

for (const n of nodes) boot(n);
await Promise.all(nodes.map(healthy));
if (!stopping) {
  console.log('all three answer; linking them (add_node)');
  await link(nodes[1], nodes[0]);
  await link(nodes[2], nodes[0]);
  await link(nodes[2], nodes[1]);
  console.log('waiting for a row filed on each node to reach the others (the join copy is over)');
  await untilRowsStream();
  console.log('waiting for every node to hold rows by the three-node view');
  await untilSettled();
  const lines = nodes.map(
    (n) =>
      `  ${n.name}: http://${host}:${n.http}   operations http://${host}:${n.ops}   mqtt mqtt://${host}:${n.mqtt}   (pid ${children.get(n.name)?.pid})`,
  );
  console.log(
    `\nqueue-keeper cluster is up (3 nodes, ${threads} thread(s) each)\n${lines.join('\n')}\n` +
      `  username:   ${creds.username}\n  password:   ${creds.password}\n  data:       ${data}\n` +
      `  try: curl -u ${creds.username}:${creds.password} -H 'content-type: application/json' ` +
      `-d '{"targets":[{"url":"https://example.com/"}]}' http://${host}:${nodes[0].http}/render_queue/targets\n` +
      `  then: for p in ${nodes.map((n) => n.http).join(' ')}; do curl -su ${creds.username}:${creds.password} http://${host}:$p/prerender_admin/queue-state; echo; done\n` +
      `        (each node counts only the rows it holds: the row shows on the one node that owns it)\n` +
      `  logs: ${nodes.map((n) => join(n.dir, 'harper.log')).join(', ')} (VERBOSE=1 prints them here)\n` +
      `  Ctrl-C stops all three.\n`,
  );
}
