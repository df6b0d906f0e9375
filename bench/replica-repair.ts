// What a replica repair round costs (docs/clusters.md, "Replica repair"):
// two linked nodes (2 threads each, repairInterval 10 s), ROWS rows filed on node-a (due in a day) once
// rows stream, then every round each node reports in queue-state `trust.keeper.lastRepair` is recorded:
//  - clean: 3 rounds on both nodes whose digest holds every row (buckets 0 expected);
//  - local delete: DEL_ROWS rows deleted on node-b through the operations API with `replicateTo: []`, a
//    delete meant to stay on node-b (if it replicates anyway, that is reported and the phase is skipped);
//  - ongoing writes: a batch of 1,000 new rows on node-a every second for 30 s while rounds run.
// Prints each round (node, kind, ms, buckets, listed, sent, received, …) and medians per node and kind.
// Run: npm run build && QK_TEST_SLOT=4 flock /tmp/qk-bench.lock node dist/bench/replica-repair.js [rows]
//      (ROWS=200000 DEL_ROWS=1000 LOG_LEVEL=warn by default)
import { execFileSync } from 'node:child_process';
import { ADMIN_PASS, ADMIN_USER, startHarper, type HarperInstance } from '../test/harness.js';
import { tableRows, untilRowsStream } from '../test/clusterJoin.js';
import { benchUrl, fileAll, loadavg, machine, median, sleep, until } from './lib.js';
import type { RepairRound as Round } from '../util/cluster/repair.js';

const ROWS = Number(process.argv[2] ?? process.env.ROWS ?? 200_000);
const DEL_ROWS = Number(process.env.DEL_ROWS ?? 1000);
const DAY = 86_400_000;
const INTERVAL = 10_000;
const LIVE_BATCHES = 30;
const LIVE_BATCH = 1000;
const AUTH = 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64');

interface Node {
  name: string;
  h: HarperInstance;
}

interface Seen {
  node: string;
  kind: string;
  r: Round;
}

const uptime = () => execFileSync('uptime', { encoding: 'utf8' }).trim();

async function main(): Promise<void> {
  const started = Date.now();
  const uptimeStart = uptime();
  const mach = machine();
  const nodes: Node[] = [];
  /** Every round seen, by node and cutoff (the last value seen wins). */
  const seen = new Map<string, Seen>();
  let kind = 'setup';
  let polling = true;
  let poller: Promise<void> = Promise.resolve();
  const notes: string[] = [];
  try {
    const booted = await Promise.allSettled(
      ['node-a', 'node-b'].map((name) =>
        startHarper({ threads: 2, logLevel: process.env.LOG_LEVEL ?? 'warn', replicationHostname: name }),
      ),
    );
    booted.forEach((b, i) => {
      if (b.status === 'fulfilled') nodes.push({ name: i === 0 ? 'node-a' : 'node-b', h: b.value });
    });
    for (const b of booted) if (b.status === 'rejected') throw b.reason;
    const [a, b] = nodes as [Node, Node];
    for (const n of nodes) {
      const r = await n.h.fetch('/prerender_admin/config', {
        body: { queue: { keeper: { repairInterval: INTERVAL, stateInterval: 1000 } } },
      });
      if (r.status !== 200) throw new Error(`config on ${n.name}: ${r.status} ${r.text}`);
    }
    await b.h.operation({
      operation: 'add_node',
      hostname: 'node-a',
      url: a.h.replicationUrl,
      authorization: AUTH,
      retain_authorization: true,
    });
    await untilRowsStream(nodes.map((n) => ({ name: n.name, inst: n.h })));

    // Every 500 ms, each node's last round (rounds end ≥ 10 s apart, so none is missed).
    poller = (async () => {
      while (polling) {
        for (const n of nodes) {
          const s = await n.h.fetch('/prerender_admin/queue-state').catch(() => null);
          const r = s?.status === 200 ? (s.json?.trust?.keeper?.lastRepair as Round | null) : null;
          if (!r) continue;
          const key = `${n.name}:${r.round}`;
          const had = seen.get(key);
          seen.set(key, { node: n.name, kind: had?.kind ?? kind, r });
        }
        await sleep(500);
      }
    })();

    let rows = ROWS;
    const urls = Array.from({ length: ROWS }, (_, i) => benchUrl('repair', i));
    kind = 'filing';
    const fileT0 = Date.now();
    const filedPerSec = await fileAll(
      a.h,
      urls.map((url) => ({ url, dueAt: Date.now() + DAY })),
    );
    await until(
      `both tables to hold ${ROWS} rows`,
      async () => ((await tableRows(a.h)) === ROWS && (await tableRows(b.h)) === ROWS ? true : undefined),
      600_000,
      1000,
    );
    const replicatedMs = Date.now() - fileT0;
    const afterFiling = Date.now();
    kind = 'clean';
    const roundsOf = (node: string, k: string, pred: (r: Round) => boolean) =>
      [...seen.values()].filter((s) => s.node === node && s.kind === k && pred(s.r));
    await until(
      '3 rounds holding every row on both nodes',
      async () =>
        nodes.every(
          (n) => roundsOf(n.name, 'clean', (r) => r.rows === ROWS && r.at > afterFiling).length >= 3,
        )
          ? true
          : undefined,
      180_000,
      500,
    );

    // A delete on node-b meant to stay there.
    kind = 'local-delete';
    const delT0 = Date.now();
    const victims = urls.filter((_, i) => i % Math.floor(ROWS / DEL_ROWS) === 0).slice(0, DEL_ROWS);
    let delError: string | null = null;
    await b.h
      .operation({
        operation: 'delete',
        database: 'render_schedule',
        table: 'RenderSchedule',
        ids: victims,
        replicateTo: [],
      })
      .catch((e: unknown) => void (delError = String(e)));
    await sleep(5000);
    const [onA, onB] = [await tableRows(a.h), await tableRows(b.h)];
    if (delError !== null) {
      notes.push(`local delete failed: ${delError}`);
    } else if (onA === ROWS && onB === ROWS - DEL_ROWS) {
      notes.push(`local delete of ${DEL_ROWS} rows on node-b stayed local (5 s later: a ${onA}, b ${onB})`);
      // Repair should delete them on node-a too (the deletion is newer than node-a's rows).
      await until(
        'node-a to lose the rows node-b deleted',
        async () => ((await tableRows(a.h)) === ROWS - DEL_ROWS ? true : undefined),
        120_000,
        1000,
      ).catch((e: unknown) => notes.push(`local delete not repaired: ${String(e)}`));
      notes.push(`node-a matched node-b ${Math.round((Date.now() - delT0) / 1000)} s after the delete`);
      rows = ROWS - DEL_ROWS;
    } else {
      notes.push(
        `the delete with replicateTo: [] replicated (5 s later: a ${onA}, b ${onB} of ${ROWS}); no local difference`,
      );
      await until(
        'both tables to agree after the delete',
        async () => ((await tableRows(a.h)) === (await tableRows(b.h)) ? true : undefined),
        60_000,
        1000,
      );
      rows = await tableRows(a.h);
    }
    // Two more rounds on both nodes before the next phase, so its rounds start from agreement.
    const settleFrom = Date.now();
    await until(
      'two rounds on both nodes after the delete',
      async () =>
        nodes.every((n) => roundsOf(n.name, 'local-delete', (r) => r.at > settleFrom).length >= 2)
          ? true
          : undefined,
      120_000,
      500,
    );

    // Ongoing writes: 1,000 new rows on node-a every second for 30 s.
    kind = 'writes';
    const liveT0 = Date.now();
    for (let i = 0; i < LIVE_BATCHES; i++) {
      const at = Date.now();
      const batch = Array.from({ length: LIVE_BATCH }, (_, j) => ({
        url: benchUrl('repair-live', i * LIVE_BATCH + j),
        dueAt: Date.now() + DAY,
      }));
      const r = await a.h.fetch('/render_queue/targets', { body: { targets: batch } });
      if (r.status !== 200) throw new Error(`live filing: ${r.status} ${r.text.slice(0, 300)}`);
      await sleep(Math.max(0, 1000 - (Date.now() - at)));
    }
    const liveMs = Date.now() - liveT0;
    rows += LIVE_BATCHES * LIVE_BATCH;
    kind = 'after-writes';
    await until(
      `rounds holding all ${rows} rows on both nodes`,
      async () =>
        nodes.every((n) => roundsOf(n.name, 'after-writes', (r) => r.rows === rows).length >= 1)
          ? true
          : undefined,
      120_000,
      500,
    ).catch((e: unknown) => notes.push(String(e)));
    polling = false;
    await poller;

    const all = [...seen.values()]
      .filter((s) => s.kind !== 'setup')
      .sort((x, y) => x.r.round - y.r.round || x.node.localeCompare(y.node));
    const cols = [
      'rows',
      'node',
      'kind',
      'round',
      'ms',
      'buckets',
      'listed',
      'sent',
      'received',
      'deleted',
      'recent',
      'deferred',
      'unfinished',
    ];
    console.log(cols.join('\t'));
    for (const { node, kind: k, r } of all)
      console.log(
        [
          r.rows,
          node,
          k,
          new Date(r.round).toISOString().slice(11, 19),
          r.ms,
          r.buckets,
          r.listed,
          r.sent,
          r.received,
          r.deleted,
          r.recent,
          r.deferred,
          r.unfinished ? `yes (${r.waitingOn.join(',')})` : '',
        ].join('\t'),
      );
    const medians: Record<string, unknown> = {};
    for (const n of nodes)
      for (const k of ['filing', 'clean', 'local-delete', 'writes', 'after-writes'])
        for (const differ of [false, true]) {
          const rs = all.filter((s) => s.node === n.name && s.kind === k && s.r.buckets > 0 === differ);
          if (rs.length === 0) continue;
          medians[`${n.name} ${k} ${differ ? 'differ' : 'equal'}`] = {
            n: rs.length,
            ms: median(rs.map((s) => s.r.ms)),
            buckets: median(rs.map((s) => s.r.buckets)),
            listed: median(rs.map((s) => s.r.listed)),
            sent: median(rs.map((s) => s.r.sent)),
            received: median(rs.map((s) => s.r.received)),
          };
        }
    const logs = nodes.map((n) => ({
      node: n.name,
      repairLines: n.h
        .output()
        .split('\n')
        .filter((l) => /replica repair/i.test(l))
        .slice(-8),
      errorLines: n.h
        .output()
        .split('\n')
        .filter((l) => /\berror\b/i.test(l))
        .slice(-8),
    }));
    console.log(
      JSON.stringify(
        {
          machine: mach,
          rows: ROWS,
          filing: { rowsPerSec: Math.round(filedPerSec), bothTablesFullMs: replicatedMs },
          liveWrites: { batches: LIVE_BATCHES, batch: LIVE_BATCH, ms: liveMs },
          medians,
          notes,
          logs,
          uptimeStart,
          uptimeEnd: uptime(),
          loadAfter: loadavg(),
          totalS: Math.round((Date.now() - started) / 1000),
        },
        null,
        2,
      ),
    );
  } finally {
    polling = false;
    await poller.catch(() => undefined);
    await Promise.all(nodes.map((n) => n.h.destroy()));
  }
}

await main();
