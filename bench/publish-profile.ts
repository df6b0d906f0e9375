// Where a slow publish's time goes, inside a real Harper (2 worker threads): ROWS rows
// (~100-character URLs), DUE of them due (past due times spread over 10 hours, so they carry the urgent
// mark), the rest due over the next days. Once the keeper counts them due, one light client claims 5 and
// reports every 150 ms for SECS seconds while the keeper publishes on its tick (1 s) and on early
// publishes. A scratch copy of the component (scratch-component.ts) records every publish: wall ms, the
// worker's on-CPU and run-queue ms (schedstat), and the worker's GC entries that overlap it.
// Prints p50/p99 of each and, for the publishes over 5 ms, how much of their time each cause took.
// Run: npx tsc -p tsconfig.json && node dist/bench/publish-profile.js [rows] [due] [secs]
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startHarper, type Credentials } from '../test/harness.js';
import { fileAll, fleetClient, loadavg, machine, overview, sleep, summarize, until } from './lib.js';
import { removeScratch, scratchComponent } from './scratch-component.js';

const ROWS = Number(process.argv[2] ?? 1_000_000);
const DUE = Number(process.argv[3] ?? 300_000);
const SECS = Number(process.argv[4] ?? 60);
const SLOW_MS = 5;
const HOUR = 3_600_000;
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

const urlOf = (i: number): string =>
  `https://www.example-shop.com/catalog/products/item-${i.toString(36)}-${'abcdefghij'.repeat(10)}`.slice(
    0,
    100,
  );

/** [start, wall ms, on-CPU ms, run-queue ms, entries published] */
type Row = [number, number, number, number, number];
/** [start, duration ms, kind (1 minor, 4 major, 8 incremental, 16 weak callbacks)] */
type Gc = [number, number, number];

function readProfile(dir: string): { rows: Row[]; gcs: Gc[] } {
  const rows: Row[] = [];
  const gcs: Gc[] = [];
  for (const f of readdirSync(dir).filter((n) => n.startsWith('publishes-')))
    for (const line of readFileSync(join(dir, f), 'utf8').split('\n').filter(Boolean)) {
      const chunk = JSON.parse(line) as { rows: Row[]; gcs: Gc[] };
      rows.push(...chunk.rows);
      gcs.push(...chunk.gcs);
    }
  return { rows, gcs };
}

/** GC time inside [start, start + ms), split into major (kind 4) and the rest. */
function gcOverlap(gcs: Gc[], start: number, ms: number): { major: number; other: number } {
  const out = { major: 0, other: 0 };
  for (const [s, d, kind] of gcs) {
    const o = Math.min(start + ms, s + d) - Math.max(start, s);
    if (o > 0) out[kind === 4 ? 'major' : 'other'] += o;
  }
  return out;
}

const round1 = (x: number) => Math.round(x * 10) / 10;

console.log(JSON.stringify({ bench: 'publish-profile', ...machine(), rows: ROWS, due: DUE, secs: SECS }));
const dir = mkdtempSync(join(tmpdir(), 'qk-publish-profile-'));
const component = scratchComponent({ keeper: true, publishProfileDir: dir });
const h = await startHarper({ componentDir: component, logLevel: 'warn' });
try {
  await h.addUser(fleet.username, fleet.password, 'render_fleet');
  const c = await h.fetch('/prerender_admin/config', {
    body: { queue: { keeper: { publishInterval: 1000, stateInterval: 1000 } } },
  });
  if (c.status !== 200) throw new Error(`config: ${c.status} ${c.text}`);
  const now = Date.now();
  const filedPerSec = await fileAll(
    h,
    Array.from({ length: ROWS }, (_, i) => ({
      url: urlOf(i),
      dueAt: i < DUE ? now - HOUR - (i % 600) * 60_000 : now + HOUR + (i % 4000) * 60_000,
    })),
  );
  await until(
    'the keeper counts the rows due',
    async () => (Number((await overview(h)).keeper.dueCount) >= DUE ? true : undefined),
    900_000,
    1000,
  );
  // Only the publishes of the steady phase count: the filing's own early publishes are left out.
  await sleep(2500); // the profile flushes every 2 s
  const skip = readProfile(dir).rows.length;
  const loadBefore = loadavg();
  const client = fleetClient(h, fleet);
  const end = Date.now() + SECS * 1000;
  while (Date.now() < end) {
    const r = await client.post('/render_queue/claim', { limit: 5 });
    const jobs = r.json as Array<{ id: string; leaseToken: string }>;
    if (jobs.length)
      await client.post('/render_queue/job_results', {
        results: jobs.map((j) => ({
          id: j.id,
          leaseToken: j.leaseToken,
          outcome: 'rendered',
          statusCode: 200,
        })),
      });
    await sleep(150);
  }
  await client.close();
  await sleep(2500);
  const { rows: all, gcs } = readProfile(dir);
  const rows = all.slice(skip);
  const slow = rows.filter((r) => r[1] > SLOW_MS);
  const sum = (xs: number[]) => round1(xs.reduce((a, b) => a + b, 0));
  const overlaps = slow.map((r) => gcOverlap(gcs, r[0], r[1]));
  console.log(
    JSON.stringify({
      filedPerSec: Math.round(filedPerSec),
      loadBefore,
      loadAfter: loadavg(),
      publishes: rows.length,
      published: rows.at(-1)?.[4],
      wallMs: summarize(rows.map((r) => r[1])),
      cpuMs: summarize(rows.map((r) => r[2])),
      runQueueMs: summarize(rows.map((r) => r[3])),
      slow: {
        over: SLOW_MS,
        n: slow.length,
        wallMs: sum(slow.map((r) => r[1])),
        cpuMs: sum(slow.map((r) => r[2])),
        runQueueMs: sum(slow.map((r) => r[3])),
        majorGcMs: sum(overlaps.map((o) => o.major)),
        otherGcMs: sum(overlaps.map((o) => o.other)),
        slowestFive: slow
          .map((r, k) => ({
            wall: round1(r[1]),
            cpu: round1(r[2]),
            runQueue: round1(r[3]),
            gc: overlaps[k]!,
          }))
          .sort((a, b) => b.wall - a.wall)
          .slice(0, 5),
      },
    }),
  );
} finally {
  await h.destroy();
  removeScratch(component);
  rmSync(dir, { recursive: true, force: true });
}
