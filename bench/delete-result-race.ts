// A delete racing a result, without any crash (follow-up of a crash-soak finding): ROWS due rows are
// claimed by 24 fleet clients; then, for every claimed batch of 25, its job_results and a DELETE of
// the same urls are sent at the same instant on two different connections (so usually on two worker
// threads). Nothing files the urls again, so every url whose delete was answered 200 must have no row
// afterwards (docs/feeding.md: a result never brings a deleted row back). Prints the rows that came back.
// Run: npx tsc -p tsconfig.json && node dist/bench/delete-result-race.js [rounds] [rows]
//      (COMPONENT_DIR=<checkout> races another build)
import { startHarper, type Credentials } from '../test/harness.js';
import {
  benchUrl,
  fileAll,
  fleetClient,
  jsonClient,
  loadavg,
  machine,
  overview,
  sleep,
  until,
} from './lib.js';

const ROUNDS = Number(process.argv[2] ?? 5);
const ROWS = Number(process.argv[3] ?? 5000);
const CLIENTS = 24;
const componentDir = process.env.COMPONENT_DIR || undefined;
const fleet: Credentials = { username: 'race-fleet', password: 'race-fleet-pass' };
const feeder: Credentials = { username: 'race-feeder', password: 'race-feeder-pass' };

console.log(
  JSON.stringify({ bench: 'delete-result-race', ...machine(), rounds: ROUNDS, rows: ROWS, componentDir }),
);
const h = await startHarper({ componentDir, logLevel: 'warn' });
try {
  await h.addUser(fleet.username, fleet.password, 'render_fleet');
  await h.addUser(feeder.username, feeder.password, 'render_feeder');
  const claimers = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
  const deleters = Array.from({ length: CLIENTS }, () => jsonClient(h, feeder));
  let total = 0;
  for (let round = 1; round <= ROUNDS; round++) {
    const urls = Array.from({ length: ROWS }, (_, i) => benchUrl(`race${round}`, i));
    const mine = new Set(urls);
    const dueAt = Date.now() - 60_000;
    await fileAll(
      h,
      urls.map((url) => ({ url, dueAt })),
    );
    await until('the keeper counts the rows due', async () =>
      Number((await overview(h)).keeper.dueCount) >= ROWS ? true : undefined,
    );
    const batches: Array<{ client: number; jobs: Array<{ id: string; leaseToken: unknown }> }> = [];
    let granted = 0;
    const deadline = Date.now() + 60_000;
    await Promise.all(
      claimers.map(async (c, k) => {
        while (granted < ROWS && Date.now() < deadline) {
          const r = await c.post('/render_queue/claim', { limit: 25 });
          const jobs = ((r.json ?? []) as Array<{ id: string; leaseToken: unknown }>).filter((j) =>
            mine.has(j.id),
          );
          if (jobs.length === 0) {
            await sleep(20);
            continue;
          }
          granted += jobs.length;
          batches.push({ client: k, jobs });
        }
      }),
    );
    const deleteAcked = new Set<string>();
    const accepted = new Set<string>();
    let resultAnswers = 0;
    // Every client races its own batches, one after the other.
    await Promise.all(
      claimers.map(async (c, k) => {
        for (const b of batches.filter((x) => x.client === k)) {
          const ids = b.jobs.map((j) => j.id);
          const [res, del] = await Promise.all([
            c.post('/render_queue/job_results', {
              results: b.jobs.map((j) => ({
                id: j.id,
                leaseToken: j.leaseToken,
                outcome: 'rendered',
                statusCode: 200,
              })),
            }),
            deleters[k]!.send('DELETE', '/render_queue/targets', { urls: ids }).then(
              (r) => r.status,
              () => 0,
            ),
          ]);
          resultAnswers += b.jobs.length;
          for (const a of ((res.json as { results?: unknown[] } | undefined)?.results ?? []) as Array<{
            id: string;
            accepted: boolean;
          }>)
            if (a.accepted) accepted.add(a.id);
          if (del === 200) ids.forEach((id) => deleteAcked.add(id));
        }
      }),
    );
    const rows = (await h.operation({
      operation: 'search_by_id',
      database: 'render_schedule',
      table: 'RenderSchedule',
      ids: [...deleteAcked],
      get_attributes: ['cacheKey', 'lastRenderedAt', 'lastOutcome'],
    })) as Array<{ cacheKey: string; lastRenderedAt: number | null }>;
    const back = rows.filter((r) => r && r.cacheKey);
    // Rows the claims did not reach are deleted too, so the next round starts on an empty queue.
    const rest = urls.filter((u) => !deleteAcked.has(u));
    if (rest.length) await deleters[0]!.send('DELETE', '/render_queue/targets', { urls: rest });
    total += back.length;
    console.log(
      JSON.stringify({
        round,
        granted,
        raced: deleteAcked.size,
        resultsAccepted: accepted.size,
        resultAnswers,
        rowsBack: back.length,
        examples: back.slice(0, 3),
        loadavg: loadavg(),
      }),
    );
  }
  console.log(JSON.stringify({ summary: 'delete-result-race', rowsBack: total, loadavg: loadavg() }));
  await Promise.all([...claimers, ...deleters].map((c) => c.close()));
} finally {
  await h.destroy();
}
