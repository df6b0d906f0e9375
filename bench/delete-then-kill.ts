// Does an acknowledged DELETE survive a SIGKILL soon after? (follow-up of a crash-soak finding: rows
// deleted with a 200 came back after a kill 0.6 s later.) Each round files ROWS rows, waits, deletes
// them all (answered 200), optionally writes something else, SIGKILLs Harper WAIT_MS after the delete's
// answer, restarts on the same root and counts the deleted rows that are there again. No fleet, no
// results: only the feeder's two calls and the kill.
// Run: npx tsc -p tsconfig.json && node dist/bench/delete-then-kill.js [rounds] [rows] [waitMs...]
//      (COMPONENT_DIR=<checkout> for another build)
import { startHarper, type HarperInstance } from '../test/harness.js';
import { benchUrl, fileAll, loadavg, machine, sleep } from './lib.js';

const ROUNDS = Number(process.argv[2] ?? 3);
const ROWS = Number(process.argv[3] ?? 200);
const WAITS = process.argv.slice(4).map(Number);
if (WAITS.length === 0) WAITS.push(50, 500, 2000);
const componentDir = process.env.COMPONENT_DIR || undefined;
const PUT_FIRST = process.env.PUT_FIRST === '1';

async function rowsPresent(h: HarperInstance, urls: string[]): Promise<number> {
  const rows = (await h.operation({
    operation: 'search_by_id',
    database: 'render_schedule',
    table: 'RenderSchedule',
    ids: urls,
    get_attributes: ['cacheKey'],
  })) as Array<{ cacheKey?: string } | null>;
  return rows.filter((r) => r && r.cacheKey).length;
}

console.log(
  JSON.stringify({
    bench: 'delete-then-kill',
    ...machine(),
    rounds: ROUNDS,
    rows: ROWS,
    waits: WAITS,
    putFirst: PUT_FIRST,
  }),
);
let h = await startHarper({ componentDir, logLevel: 'warn' });
const root = h.root;
let n = 0;
try {
  for (let round = 1; round <= ROUNDS; round++) {
    for (const waitMs of WAITS) {
      n++;
      const urls = Array.from({ length: ROWS }, (_, i) => benchUrl(`dk${n}`, i));
      await fileAll(
        h,
        urls.map((url) => ({ url })),
      );
      await sleep(1000);
      // PUT_FIRST=1: the rows are written again (a re-filing, due now) just before the delete, as a
      // result's write was in the soak; the delete waits for that write's locks.
      const [, del] = await Promise.all([
        PUT_FIRST
          ? fileAll(
              h,
              urls.map((url) => ({ url, dueAt: Date.now() - 60_000 })),
            )
          : Promise.resolve(0),
        sleep(PUT_FIRST ? 2 : 0).then(() =>
          h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls }, fresh: true }),
        ),
      ]);
      const answeredAt = Date.now();
      const goneBeforeKill = ROWS - (await rowsPresent(h, urls));
      await sleep(Math.max(0, waitMs - (Date.now() - answeredAt)));
      await h.kill();
      h = await startHarper({ root, componentDir, logLevel: 'warn' });
      const back = await rowsPresent(h, urls);
      console.log(
        JSON.stringify({
          round,
          waitMs,
          deleteStatus: del.status,
          deleted: del.json?.deleted,
          goneBeforeKill,
          rowsBackAfterRestart: back,
          loadavg: loadavg(),
        }),
      );
    }
  }
} finally {
  await h.destroy();
}
