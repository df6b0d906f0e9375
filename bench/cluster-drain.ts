// A three-node drain on 127.0.0.1: ROWS due rows filed on node-a, drained by CLIENTS fleet
// clients per node through /render_queue/next (limit 25, results batched into the next call); reports
// jobs/s and duplicate grants. Then FAIL_ROWS more due rows, node-c stopped by pid (SIGTERM), and the
// time until each of node-c's rows is granted on node-a or node-b.
// Run: npx tsc -p tsconfig.json && node dist/bench/cluster-drain.js
//      (ROWS=30000 CLIENTS=4 FAIL_ROWS=3000 THREADS=1 TICK=1000 LOG_LEVEL=warn by default)
import { Ownership } from '../util/cluster/ownership.js';
import { ADMIN_PASS, ADMIN_USER, startHarper, type HarperInstance } from '../test/harness.js';
import { rowKey } from '../util/schedule/rowKey.js';
import { benchUrl, drainByNext, fileAll, loadavg, machine, sleep } from './lib.js';
import { untilRowsStream } from '../test/clusterJoin.js';

const ROWS = Number(process.env.ROWS ?? 30_000);
const CLIENTS = Number(process.env.CLIENTS ?? 4);
const FAIL_ROWS = Number(process.env.FAIL_ROWS ?? 3000);
const THREADS = Number(process.env.THREADS ?? 1);
const TICK = Number(process.env.TICK ?? 1000);
const NAMES = ['node-a', 'node-b', 'node-c'];
const AUTH = 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64');
const owners = new Ownership(NAMES, 'node-a');

interface Node {
  name: string;
  h: HarperInstance;
}

async function held(n: Node): Promise<number | null> {
  const r = await n.h.fetch('/prerender_admin/overview');
  return r.status === 200 ? ((r.json.keeper?.stats?.rows as number | undefined) ?? null) : null;
}

/**
 * On a miss, what a node's table has, how many events its keeper applied and its last walk: rows that
 * replicated but were never delivered read tbl > held with no walk since; rows not yet replicated read
 * tbl < the count filed. Plus its last keeper/cluster log lines.
 */
async function factsOf(n: Node): Promise<string> {
  const s = await n.h.fetch('/prerender_admin/queue-state');
  const rows = await n.h
    .operation({ operation: 'sql', sql: 'SELECT COUNT(*) AS c FROM render_schedule.RenderSchedule' })
    .then((r: Array<{ c: number }>) => r[0]?.c)
    .catch(() => '?');
  const k = s.status === 200 ? s.json.trust.keeper : null;
  const logs = n.h
    .output()
    .split('\n')
    .filter((l) => /keeper|cluster|membership|replicat/i.test(l))
    .slice(-12)
    .join('\n  ');
  return (
    `${n.name}: tbl=${rows} held=${k?.rows} events=${k?.apply?.events} ` +
    `lastVerify=${JSON.stringify(k?.lastVerify)}\n  ${logs}`
  );
}

/** Every node sees a fresh beat from every node, each publishing the same three-node view. */
async function settled(nodes: Node[]): Promise<boolean> {
  const want = NAMES.join(',');
  for (const n of nodes) {
    const beats: Array<{ id: string; view: string[] | null; beatAt: number }> = await n.h.operation({
      operation: 'search_by_value',
      database: 'render_queue',
      table: 'QueueNode',
      search_attribute: 'id',
      search_value: '*',
      get_attributes: ['id', 'view', 'beatAt'],
    });
    for (const m of NAMES) {
      const b = beats.find((x) => x.id === m);
      if (!b || Date.now() - b.beatAt > 5000 || (b.view ?? []).join(',') !== want) return false;
    }
  }
  return true;
}

async function waitFor(what: string, fn: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** Claims with CLIENTS loops per node until every URL of `want` was granted; counts every grant by job id. */
async function drain(nodes: Node[], want: Set<string>, grants: Map<string, number>): Promise<void> {
  // A job's id is its row's key: the URL's desktop row (the only device listed here).
  const keys = [...want].map((url) => rowKey(url, 'desktop'));
  await drainByNext(nodes, CLIENTS, grants, () => keys.some((k) => !grants.has(k)), 20);
}

async function main(): Promise<void> {
  const load = loadavg();
  const nodes: Node[] = [];
  try {
    for (const name of NAMES) {
      // Replication on each node's HTTP port (test/harness.ts `replicationHostname`).
      const h = await startHarper({
        threads: THREADS,
        logLevel: process.env.LOG_LEVEL ?? 'warn',
        replicationHostname: name,
      });
      nodes.push({ name, h });
    }
    const [a, b, c] = nodes as [Node, Node, Node];
    const link = (from: Node, to: Node) =>
      from.h.operation({
        operation: 'add_node',
        hostname: to.name,
        url: to.h.replicationUrl,
        authorization: AUTH,
        retain_authorization: true,
      });
    await link(b, a);
    await link(c, a);
    await link(c, b);
    for (const n of nodes)
      await n.h.fetch('/prerender_admin/config', { body: { maintenance: { tickInterval: TICK } } });
    // Filing while the links are still coming up (Harper's initial full copies) left 681 of 30,000 rows
    // missing on node-c's table for 120 s in one run: wait until every node holds by one 3-node view.
    await waitFor('all three nodes to see each other and hold by one view', () => settled(nodes), 120_000);
    // The settled view says render_queue streams; a probe row says render_schedule's copy is over too.
    await untilRowsStream(nodes.map((n) => ({ name: n.name, inst: n.h })));

    const urls = Array.from({ length: ROWS }, (_, i) => benchUrl('cluster', i));
    await fileAll(
      a.h,
      urls.map((url) => ({ url, dueAt: Date.now() - 60_000 })),
    );
    const shares = NAMES.map((n) => urls.filter((u) => owners.ownerOf(u) === n).length);
    let lastHeld: Array<number | null> = [];
    await waitFor(
      `each node to hold its share (${shares.join('/')}; last seen ${lastHeld.join('/')})`,
      async () => (lastHeld = await Promise.all(nodes.map(held))).every((h, i) => h === shares[i]),
      120_000,
    ).catch(async (e: unknown) => {
      const seen = await Promise.all(nodes.map(factsOf));
      throw new Error(
        `${String(e)}: expected ${shares.join('/')}, held ${lastHeld.join('/')}\n${seen.join('\n')}`,
      );
    });
    const grants = new Map<string, number>();
    const t0 = performance.now();
    await drain(nodes, new Set(urls), grants);
    const drainMs = performance.now() - t0;
    const duplicates = [...grants.values()].reduce((s, n) => s + (n - 1), 0);

    const failUrls = Array.from({ length: FAIL_ROWS }, (_, i) => benchUrl('cluster-leave', i));
    await fileAll(
      a.h,
      failUrls.map((url) => ({ url, dueAt: Date.now() - 60_000 })),
    );
    const ofC = failUrls.filter((u) => owners.ownerOf(u) === 'node-c');
    await waitFor(
      'node-c to hold its new rows',
      async () => (await held(c)) === shares[2]! + ofC.length,
      60_000,
    );
    // Only node-a's and node-b's rows are drained first, so every later grant is one of node-c's rows.
    const abGrants = new Map<string, number>();
    await drain([a, b], new Set(failUrls.filter((u) => owners.ownerOf(u) !== 'node-c')), abGrants);
    const stoppedAt = Date.now();
    await c.h.stop();
    const cGrants = new Map<string, number>();
    let firstGrantMs: number | null = null;
    const want = new Set(ofC);
    const watch = setInterval(() => {
      if (firstGrantMs === null && cGrants.size > 0) firstGrantMs = Date.now() - stoppedAt;
    }, 10);
    await drain([a, b], want, cGrants);
    clearInterval(watch);
    const allMs = Date.now() - stoppedAt;
    const failDuplicates = [...cGrants.values()].reduce((s, n) => s + (n - 1), 0);
    console.log(
      JSON.stringify(
        {
          machine: machine(),
          loadBefore: load,
          loadAfter: loadavg(),
          threadsPerNode: THREADS,
          tickMs: TICK,
          rows: ROWS,
          clientsPerNode: CLIENTS,
          shares,
          drain: { ms: Math.round(drainMs), jobsPerSec: Math.round(ROWS / (drainMs / 1000)), duplicates },
          stop: {
            rowsOfStoppedNode: ofC.length,
            firstClaimableElsewhereMs: firstGrantMs,
            allClaimedElsewhereMs: allMs,
            duplicates: failDuplicates,
          },
        },
        null,
        2,
      ),
    );
  } finally {
    await Promise.all(nodes.map((n) => n.h.destroy()));
  }
}

await main();
