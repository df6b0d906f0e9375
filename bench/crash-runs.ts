// Crash runs (losing the keeper or the leases must cost latency, never work). One root, ROWS rows
// (default 1,000,000, 30 % due), then:
//   a) restart, SIGKILL Harper while the keeper is loading, restart again: time from spawn to the first
//      grant, and rows lost (table count vs filed; trust.keeper.rows vs filed)
//   b) 24 clients claim 25 and report each batch; SIGKILL mid-drain; restart while the clients keep
//      claiming: time to the first grant, then a drain of every row still due: duplicate grants after the
//      restart (ids granted before the crash and again after) against the leases in flight at the crash, and acknowledged results granted again
//      (must be 0: an acknowledged result that vanished would be a lost write), rows lost.
// Run: npx tsc -p tsconfig.json && node dist/bench/crash-runs.js [rows]
import { startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import {
  benchUrl,
  fileAll,
  fleetClient,
  loadavg,
  machine,
  overview,
  sleep,
  until,
  type FleetClient,
} from './lib.js';

const ROWS = Number(process.argv[2] ?? 1_000_000);
const CLIENTS = 24;
const GRANTS_BEFORE_KILL = 20_000;
/** The drain after the restart ends once no grant came for this long (the due rows are used up). */
const IDLE_AFTER_DRAIN_MS = 5000;
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

async function tableCount(h: HarperInstance): Promise<number> {
  const d = await h.operation({
    operation: 'describe_table',
    database: 'render_schedule',
    table: 'RenderSchedule',
  });
  return Number(d.record_count);
}

async function keeperRows(h: HarperInstance): Promise<number> {
  return until(
    'the keeper live',
    async () => {
      const r = await h.fetch('/prerender_admin/queue-state');
      return r.status === 200 ? Number(r.json.trust.keeper.rows) : undefined;
    },
    600_000,
    100,
  );
}

/** Spawns Harper on the root while one client claims from the first instant; ms to the first grant. */
async function restartAndFirstGrant(
  root: string,
  c: FleetClient,
  onGrant: (id: string) => void = () => undefined,
) {
  const spawnAt = performance.now();
  let h: HarperInstance | undefined;
  let readyAt = NaN;
  const boot = startHarper({ root, logLevel: 'warn', readyTimeoutMs: 300_000 }).then((x) => {
    readyAt = performance.now();
    h = x;
    return x;
  });
  let firstGrantMs = NaN;
  for (;;) {
    try {
      const r = await c.post('/render_queue/claim', { limit: 1 });
      const jobs = (r.json ?? []) as Array<{ id: string; leaseToken: string }>;
      if (r.status === 200 && jobs.length) {
        firstGrantMs = performance.now() - spawnAt;
        for (const j of jobs) onGrant(j.id);
        await c.post('/render_queue/job_results', {
          results: jobs.map((j) => ({
            id: j.id,
            leaseToken: j.leaseToken,
            outcome: 'rendered',
            statusCode: 200,
          })),
        });
        break;
      }
    } catch {
      // not listening yet
    }
    await sleep(20);
  }
  await boot;
  return { h: h!, firstGrantMs: Math.round(firstGrantMs), readyMs: Math.round(readyAt - spawnAt) };
}

const info = machine();
console.log(JSON.stringify({ bench: 'crash-runs', ...info, rows: ROWS }));
let h = await startHarper({ logLevel: 'warn' });
const root = h.root;
try {
  await h.addUser(fleet.username, fleet.password, 'render_fleet');
  const now = Date.now();
  const due = Math.round(ROWS * 0.3);
  const targets = Array.from({ length: ROWS }, (_, i) =>
    i < due ? { url: benchUrl('crash', i), dueAt: now - 3_600_000 } : { url: benchUrl('crash', i) },
  );
  const fileRate = await fileAll(h, targets);
  const filed = await tableCount(h);
  console.log(JSON.stringify({ filed, fileRowsPerSec: Math.round(fileRate) }));
  await h.stop();

  // a) kill during the load.
  h = await startHarper({ root, logLevel: 'warn' });
  const phase = await until(
    'the keeper loading',
    async () => {
      const p = (await overview(h)).keeper.phase as string;
      return p === 'loading' || p === 'live' ? p : undefined;
    },
    120_000,
    20,
  );
  await sleep(Math.random() * 500);
  const phaseAtKill = (await overview(h)).keeper.phase;
  await h.kill();
  const probe = fleetClient(h, fleet);
  const a = await restartAndFirstGrant(root, probe);
  h = a.h;
  const rowsA = await keeperRows(h);
  const countA = await tableCount(h);
  console.log(
    JSON.stringify({
      run: 'kill during load',
      phaseSeen: phase,
      phaseAtKill,
      firstGrantAfterSpawnMs: a.firstGrantMs,
      readyAfterSpawnMs: a.readyMs,
      load: (await h.fetch('/prerender_admin/queue-state')).json.trust.keeper.load,
      keeperRows: rowsA,
      tableRows: countA,
      filed,
      rowsLost: filed - countA,
      loadavg: loadavg(),
    }),
  );

  // b) kill while 24 clients claim and report.
  const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
  const before = new Set<string>();
  const acked = new Set<string>();
  let stopBefore = false;
  const drain = (onGrant: (id: string) => void, stop: () => boolean, log?: Set<string>) =>
    Promise.all(
      clients.map(async (c) => {
        while (!stop()) {
          try {
            const r = await c.post('/render_queue/claim', { limit: 25 });
            const jobs = (r.status === 200 ? r.json : []) as Array<{ id: string; leaseToken: string }>;
            if (!jobs.length) {
              await sleep(10);
              continue;
            }
            for (const j of jobs) onGrant(j.id);
            const res = await c.post('/render_queue/job_results', {
              results: jobs.map((j) => ({
                id: j.id,
                leaseToken: j.leaseToken,
                outcome: 'rendered',
                statusCode: 200,
              })),
            });
            for (const ans of (res.json as { results?: Array<{ id: string; accepted: boolean }> } | undefined)
              ?.results ?? [])
              if (ans.accepted) log?.add(ans.id);
          } catch {
            await sleep(20);
          }
        }
      }),
    );
  const beforeDrain = drain(
    (id) => before.add(id),
    () => stopBefore,
    acked,
  );
  await until(
    'grants before the kill',
    async () => (before.size >= GRANTS_BEFORE_KILL ? true : undefined),
    300_000,
    5,
  );
  await h.kill();
  stopBefore = true;
  await beforeDrain;
  const inFlight = [...before].filter((id) => !acked.has(id)).length;
  const after = new Set<string>();
  let dupAfter = 0;
  let ackedAgain = 0;
  const onGrant = (id: string) => {
    if (before.has(id)) {
      if (acked.has(id)) ackedAgain++;
      else dupAfter++;
    }
    after.add(id);
  };
  const b = await restartAndFirstGrant(root, clients[0]!, onGrant);
  h = b.h;
  // Drain everything still due, so every in-flight row that survived the crash as due is granted again.
  let lastAfterGrant = performance.now();
  await drain(
    (id) => {
      lastAfterGrant = performance.now();
      onGrant(id);
    },
    () => performance.now() - lastAfterGrant > IDLE_AFTER_DRAIN_MS,
  );
  const rowsB = await keeperRows(h);
  const countB = await tableCount(h);
  console.log(
    JSON.stringify({
      run: 'kill while 24 clients claim',
      grantedBeforeKill: before.size,
      ackedBeforeKill: acked.size,
      inFlightAtKill: inFlight,
      firstGrantAfterSpawnMs: b.firstGrantMs,
      readyAfterSpawnMs: b.readyMs,
      grantedAfterRestart: after.size,
      duplicateGrantsAfterRestart: dupAfter,
      acknowledgedGrantedAgain: ackedAgain,
      keeperRows: rowsB,
      tableRows: countB,
      filed,
      rowsLost: filed - countB,
      loadavg: loadavg(),
    }),
  );
  await Promise.all(clients.map((c) => c.close()));
  await probe.close();
} finally {
  await h.destroy();
}
