// Three nodes on 127.0.0.1 at scale (docs/sizing.md "Three nodes"): ROWS rows of scale-mix.ts's mix
// (10 % due) seed-filed on node-a and replicated, then
//   replicated  every node's table holds every row: wall time from the seed's end;
//   held     each keeper holds its rendezvous share: wall time from then, rows per node, and
//            per node worker 0's heap used and the process's RssAnon;
//   drain    every due row claimed through /render_queue/next (CLIENTS loops a node, limit 25, results in
//            the next call): jobs/s and rows granted more than once;
//   return   node-c stopped (SIGTERM, data kept): time from the stop until node-a and node-b hold every row;
//            then started on its data: time from its HTTP answer until every node holds its share again,
//            and node-c's worker 0 holds ≥ 50 ms from the restart to the end of its walk once the
//            membership settled.
// Each node runs a scratch copy of the component with the scale probe (bench/scale-probe.ts): one probe
// folder a node. THREADS worker threads a node (1 by default: three nodes share the 2-core machine).
// Run: npm run build && flock /work/bench.lock node dist/bench/cluster-scale.js
//   env: ROWS (3000000), CLIENTS (4), THREADS (1), TICK (1000), LOG (Harper's log level, warn),
//   LOGDIR (a folder for each node's Harper output), TIMELINE (0: no 2-s samples of each node)
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ownership } from '../util/cluster/ownership.js';
import { rowKey } from '../util/schedule/rowKey.js';
import { startHarper, type HarperInstance } from '../test/harness.js';
import { addNode, heldByOneView, untilRowsStream } from '../test/clusterJoin.js';
import { drainByNext, loadavg, machine, overview, rssKb, sleep, until } from './lib.js';
import { fileSeed, readStalls, stallSummary, storage, type HeapReport } from './probe-files.js';
import { isDue, scaleRoutes, scaleUrl } from './scale-mix.js';
import { removeScratch, scratchComponent } from './scratch-component.js';

const ROWS = Number(process.env.ROWS ?? 3_000_000);
const CLIENTS = Number(process.env.CLIENTS ?? 4);
const THREADS = Number(process.env.THREADS ?? 1);
const TICK = Number(process.env.TICK ?? 1000);
const NAMES = ['node-a', 'node-b', 'node-c'] as const;
const ms = (x: number) => Math.round(x);

interface Node {
  name: string;
  h: HarperInstance;
  probe: string;
}

const emit = (what: string, o: Record<string, unknown>) =>
  console.log(JSON.stringify({ phase: what, load: loadavg(), ...o }));

async function boot(name: string, component: string, probe: string, root?: string): Promise<HarperInstance> {
  return startHarper({
    componentDir: component,
    threads: THREADS,
    logLevel: process.env.LOG ?? 'warn',
    replicationHostname: name,
    env: { QK_SCALE_PROBE_DIR: probe },
    readyTimeoutMs: 900_000,
    ...(root ? { root } : {}),
  });
}

async function heldRows(n: Node): Promise<number | null> {
  const o = await overview(n.h).catch(() => undefined);
  return o?.keeper?.phase === 'live' ? Number(o.keeper.stats?.rows ?? 0) : null;
}

/** Worker 0's last heap report (the probe writes one every 2 s). */
function worker0Heap(probe: string): HeapReport | undefined {
  for (const f of readdirSync(probe).filter((x) => x.startsWith('heap-'))) {
    try {
      const r = JSON.parse(readFileSync(join(probe, f), 'utf8')) as HeapReport;
      if (r.workerIndex === 0) return r;
    } catch {
      // being rewritten
    }
  }
  return undefined;
}

async function configure(n: Node, body: Record<string, unknown>): Promise<void> {
  const r = await n.h.fetch('/prerender_admin/config', { body, fresh: true });
  if (r.status !== 200) throw new Error(`config on ${n.name}: ${r.status} ${r.text}`);
}

/** Claims with CLIENTS loops a node until `due` rows were granted (or 2,000 empty answers in a row). */
async function drain(nodes: Node[], due: number): Promise<{ granted: number; twice: number }> {
  const grants = new Map<string, number>();
  await drainByNext(nodes, CLIENTS, grants, (empty) => grants.size < due && empty < 2000, 50);
  return { granted: grants.size, twice: [...grants.values()].filter((c) => c > 1).length };
}

/** Rows of the seed a node's record store lacks (absent or deleted), by tenth of the seed's index. */
async function missing(n: Node): Promise<unknown> {
  const r = await n.h.fetch('/prerender_admin/bench-missing', {
    body: { from: 0, to: ROWS },
    timeoutMs: 120_000,
  });
  return r.status === 200 ? r.json : `${r.status} ${r.text.slice(0, 200)}`;
}

/** Per peer and database, from cluster_status: connected, s since the last receipt (local / the peer's clock), status. */
async function socketLag(n: Node): Promise<string> {
  const st = await n.h.operation({ operation: 'cluster_status' }).catch(() => undefined);
  const age = (t: unknown) => {
    const v = typeof t === 'number' ? t : typeof t === 'string' ? Date.parse(t) : NaN;
    return Number.isFinite(v) ? ((Date.now() - v) / 1000).toFixed(1) : '?';
  };
  const out: string[] = [];
  for (const c of st?.connections ?? [])
    for (const d of c.database_sockets ?? [])
      if (d.database === 'render_queue' || d.database === 'render_schedule')
        out.push(
          `${String(c.name).slice(-1)}.${String(d.database).slice(7, 8)}:${d.connected ? '' : 'DOWN,'}` +
            `${age(d.lastReceivedLocalTime)}/${age(d.lastReceivedRemoteTime)},${String(d.lastReceivedStatus ?? '?').slice(0, 4)},${Math.round(Number(d.backPressurePercent ?? 0))}%`,
        );
  return out.join(' ');
}

/** Every 2 s until stopped: each node's record-store entries, keeper phase and rows held. */
function timeline(nodes: Node[]): () => void {
  let on = true;
  const t0 = performance.now();
  void (async () => {
    while (on) {
      const sample = await Promise.all(
        nodes.map(async (n) => {
          const entries = await storage(n.h).then(
            (s) => Number(s.record.entries),
            () => null,
          );
          const o = await overview(n.h).catch(() => undefined);
          const links = process.env.CSTATUS === '1' ? ` [${await socketLag(n)}]` : '';
          return `${entries}/${o?.keeper?.phase ?? '-'}:${o?.keeper?.stats?.rows ?? '-'}${links}`;
        }),
      );
      if (on) emit('tick', { t: ms((performance.now() - t0) / 1000), nodes: sample.join(' ') });
      await sleep(2000);
    }
  })();
  return () => {
    on = false;
  };
}

const component = scratchComponent({ keeper: true, scaleProbe: true });
const nodes: Node[] = [];
/** node-c's data folder once it was restarted on it (the harness removes only roots it made). */
let keptRoot: string | undefined;
console.log(
  JSON.stringify({
    bench: 'cluster-scale',
    ...machine(),
    uptime: execFileSync('uptime', { encoding: 'utf8' }).trim(),
    rows: ROWS,
    threads: THREADS,
  }),
);
try {
  for (const name of NAMES) {
    const probe = mkdtempSync(join(tmpdir(), `qk-cluster-probe-${name}-`));
    nodes.push({ name, h: await boot(name, component, probe), probe });
  }
  const [a, b, c] = nodes as [Node, Node, Node];
  const link = (from: Node, to: Node) => addNode(from.h, to.name, to.h);
  await link(b, a);
  await link(c, a);
  await link(c, b);
  for (const n of nodes)
    await configure(n, { render: { routes: scaleRoutes() }, maintenance: { tickInterval: TICK } });
  const list = nodes.map((n) => ({ name: n.name, inst: n.h }));
  await until('the three nodes to hold by one view', () => heldByOneView(list), 180_000, 250);
  await untilRowsStream(list);

  // Each keeper's share: ownership by the URL of each row's key.
  const owners = new Ownership([...NAMES], 'node-a');
  const shares = NAMES.map(() => 0);
  let due = 0;
  for (let i = 0; i < ROWS; i++) {
    shares[NAMES.indexOf(owners.ownerOf(rowKey(scaleUrl(i), 'desktop')) as (typeof NAMES)[number])]!++;
    if (isDue(i)) due++;
  }

  const stopTimeline = process.env.TIMELINE === '0' ? () => {} : timeline(nodes);
  const f0 = performance.now();
  const now = Date.now();
  await fileSeed(a.h, ROWS, now);
  const seededMs = performance.now() - f0;
  emit('seed', { rows: ROWS, seconds: ms(seededMs / 1000), rowsPerSec: ms((ROWS / seededMs) * 1000) });

  // Replication to the two other nodes runs behind the seed: the figures below are of a replicated table.
  const r0 = performance.now();
  let entries: number[] = [];
  await until(
    'every node to hold the whole table',
    async () =>
      (entries = await Promise.all(
        nodes.map(async (n) => Number((await storage(n.h)).record.entries)),
      )).every((e) => e >= ROWS),
    3_600_000,
    2000,
  ).catch((e: unknown) => {
    throw new Error(`${String(e)}; table entries ${entries.join('/')}`);
  });
  emit('replicated', { afterSeedS: ms((performance.now() - r0) / 1000) });
  const h0 = performance.now();
  let last: Array<number | null> = [];
  await until(
    `each keeper holding its share (${shares.join('/')})`,
    async () => (last = await Promise.all(nodes.map(heldRows))).every((x, i) => x === shares[i]),
    3_600_000,
    2000,
  ).catch((e: unknown) => {
    throw new Error(`${String(e)}; last held ${last.join('/')}`);
  });
  await sleep(10_000); // heap reports of the settled nodes
  const perNode = await Promise.all(
    nodes.map(async (n) => {
      const heap = worker0Heap(n.probe);
      const st = (await storage(n.h)).record;
      return {
        node: n.name,
        held: await heldRows(n),
        tableEntries: st.entries,
        worker0HeapMB: heap ? ms(heap.usedHeapBytes / 2 ** 20) : null,
        heapLimitMB: heap ? ms(heap.heapLimitBytes / 2 ** 20) : null,
        rssAnonMB: ms(rssKb(n.h.pid).rssAnonKb / 1024),
      };
    }),
  );
  emit('held', { shares, heldAfterSeedS: ms((performance.now() - h0) / 1000), perNode });
  if (perNode.some((p) => Number(p.tableEntries) < ROWS))
    emit(
      'missing',
      Object.fromEntries(await Promise.all(nodes.map(async (n) => [n.name, await missing(n)]))),
    );

  const d0 = performance.now();
  const drained = await drain(nodes, due);
  const drainMs = performance.now() - d0;
  stopTimeline();
  emit('drain', {
    due,
    ...drained,
    seconds: ms(drainMs / 1000),
    jobsPerSec: ms((drained.granted / drainMs) * 1000),
  });

  // node-c away until the two others hold every row, then back on its data.
  const root = (keptRoot = c.h.root);
  const s0 = performance.now();
  await c.h.stop();
  const two = [a, b];
  await until(
    'node-a and node-b holding every row',
    async () =>
      (await Promise.all(two.map(heldRows))).reduce<number>((s, x) => s + (x ?? -Infinity), 0) === ROWS,
    1_800_000,
    1000,
  );
  const takenOverS = (performance.now() - s0) / 1000;
  readStalls(c.probe); // what node-c recorded before its stop is not the return's
  c.h = await boot('node-c', component, c.probe, root);
  const answered = performance.now();
  await until(
    'every keeper holding its share again',
    async () => (last = await Promise.all(nodes.map(heldRows))).every((x, i) => x === shares[i]),
    1_800_000,
    500,
  ).catch((e: unknown) => {
    throw new Error(`${String(e)}; last held ${last.join('/')}`);
  });
  const heldAgainS = (performance.now() - answered) / 1000;
  const settled = await until(
    "node-c's walk once the return settled",
    async () => {
      const s = await c.h.fetch('/prerender_admin/queue-state');
      return s.status === 200 ? (s.json.trust.keeper.lastSettledWalk ?? undefined) : undefined;
    },
    1_800_000,
    1000,
  );
  await sleep(2500); // the probe writes a hold 200 ms after it
  emit('return', {
    takenOverS: Math.round(takenOverS * 10) / 10,
    heldAgainAfterHttpS: Math.round(heldAgainS * 10) / 10,
    settledWalk: settled,
    nodeCHolds: stallSummary(readStalls(c.probe)),
  });
} finally {
  for (const n of nodes) {
    const errors = n.h
      .output()
      .split('\n')
      .filter((l) => /\berror\b|heap|out of memory/i.test(l));
    if (process.env.LOGDIR) writeFileSync(join(process.env.LOGDIR, `${n.name}.log`), n.h.output());
    if (errors.length) emit('harper-log', { node: n.name, lines: errors.length, last: errors.slice(-3) });
  }
  await Promise.all(nodes.map((n) => n.h.destroy()));
  removeScratch(component);
  if (keptRoot) rmSync(keptRoot, { recursive: true, force: true });
  for (const n of nodes) rmSync(n.probe, { recursive: true, force: true });
}
console.log(JSON.stringify({ done: true, uptime: execFileSync('uptime', { encoding: 'utf8' }).trim() }));
