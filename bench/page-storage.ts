// Page storage on disk (docs/page-storage.md): N pages × R rounds of renders through the real HTTP API (claim +
// job_results, 4 fleet clients) with 50 KiB and 500 KiB bodies, in a real Harper with 2 worker threads.
// Reports the database folder (every .mdb, render_queue.mdb alone) and the blob store against the live
// page bytes: before the first render, after every round, and again once Harper's own audit cleanup
// has run (it removes log entries older than `logging.auditRetention`, and with them the blob files of
// replaced pages). Also the job_results write throughput with large pages.
//
//   node dist/bench/page-storage.js [N=100] [R=10] [--with-string]
//   AUDIT_RETENTION=3m (Harper syntax: a bare number or "s" is seconds, m minutes, h hours, d days, M months)
//
// --with-string also runs the old design (body: String) from a temp copy of the built component with
// the schema and the compiled page store patched; the product files are never changed.
import { randomBytes } from 'node:crypto';
import {
  cpSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot, startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import {
  benchUrl,
  fileAll,
  fleetClient,
  loadavg,
  machine,
  sleep,
  summarize,
  type FleetClient,
} from './lib.js';

const N = Number(process.argv[2] ?? 100);
const R = Number(process.argv[3] ?? 10);
const WITH_STRING = process.argv.includes('--with-string');
const RETENTION = process.env.AUDIT_RETENTION ?? '3m';
const SIZES_KIB = [50, 500];
const CLIENTS = 4;
const LIMIT = 25;
const KIB = 1024;
const MIN = 60_000;
const MB = 1e6;
const fleet: Credentials = { username: 'fleet', password: 'fleet-pass' };

/** Harper's convertToMS (4.7.29): the last character picks the unit, anything else is seconds. */
function retentionMs(v: string): number {
  const n = parseFloat(v);
  const unit = v.slice(-1);
  const s =
    unit === 'M'
      ? 86400 * 30
      : unit === 'd' || unit === 'D'
        ? 86400
        : unit === 'h' || unit === 'H'
          ? 3600
          : unit === 'm'
            ? 60
            : 1;
  return n * s * 1000;
}

interface Usage {
  databaseMB: number;
  renderQueueMdbMB: number;
  blobMB: number;
  blobFiles: number;
}

/** Allocated bytes (st_blocks × 512) under a folder, and how many files. */
function allocated(path: string): { bytes: number; files: number } {
  let bytes = 0;
  let files = 0;
  let entries;
  try {
    entries = readdirSync(path, { withFileTypes: true });
  } catch {
    return { bytes, files };
  }
  for (const e of entries) {
    const p = join(path, e.name);
    if (e.isDirectory()) {
      const sub = allocated(p);
      bytes += sub.bytes;
      files += sub.files;
    } else {
      bytes += statSync(p).blocks * 512;
      files++;
    }
  }
  return { bytes, files };
}

function usage(h: HarperInstance): Usage {
  const root = join(h.root, 'hdb');
  const db = allocated(join(root, 'database'));
  const blobs = allocated(join(root, 'blobs'));
  const mdb = statSync(join(root, 'database', 'render_queue.mdb'), { throwIfNoEntry: false });
  const mb = (b: number) => Math.round((b / MB) * 10) / 10;
  return {
    databaseMB: mb(db.bytes),
    renderQueueMdbMB: mb((mdb?.blocks ?? 0) * 512),
    blobMB: mb(blobs.bytes),
    blobFiles: blobs.files,
  };
}

const diskMB = (u: Usage) => u.databaseMB + u.blobMB;

/** The old design, for comparison: a temp copy of the built component with `body: String`. */
function stringComponent(): string {
  const dir = mkdtempSync(join(tmpdir(), 'qk-bench-string-pages-'));
  for (const f of ['config.yaml', 'roles.yaml', 'package.json']) cpSync(join(repoRoot, f), join(dir, f));
  for (const d of ['dist', 'web']) cpSync(join(repoRoot, d), join(dir, d), { recursive: true });
  symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'), 'dir');
  const schema = readFileSync(join(repoRoot, 'schema.graphql'), 'utf8');
  if (!schema.includes('  body: Blob\n')) throw new Error('schema.graphql no longer has `body: Blob`');
  writeFileSync(join(dir, 'schema.graphql'), schema.replace('  body: Blob\n', '  body: String\n'));
  const storePath = join(dir, 'dist', 'services', 'pages', 'store.js');
  const store = readFileSync(storePath, 'utf8');
  const blobWrite = /body: make\(Buffer\.from\(p\.body, 'utf8'\), \{[^}]*\}\),/;
  if (!blobWrite.test(store))
    throw new Error('dist/services/pages/store.js no longer writes the body as this bench expects');
  writeFileSync(storePath, store.replace(blobWrite, 'body: p.body,'));
  return dir;
}

/** Incompressible bodies (base64 of random bytes, plus non-ASCII), one pool per size, made unique per render. */
function bodyPool(kib: number): string[] {
  return Array.from({ length: 8 }, () =>
    randomBytes(Math.floor((kib * KIB * 3) / 4) - 64).toString('base64'),
  );
}

function bodyFor(pool: string[], url: string, round: number, i: number): string {
  return `<!-- ${url} round ${round} é日🎉 -->${pool[(i + round) % pool.length]!}`;
}

interface RoundResult {
  results: number;
  resultMB: number;
  postingMs: number;
  jobResultsMs: ReturnType<typeof summarize>;
}

/** Renders every URL once: the clients claim and post job_results until none of `urls` is left. */
async function renderRound(
  clients: FleetClient[],
  urls: string[],
  round: number,
  pool: string[],
  live: Map<string, number>,
): Promise<RoundResult> {
  const pending = new Set(urls);
  const index = new Map(urls.map((u, i) => [u, i]));
  const latencies: number[] = [];
  let results = 0;
  let bytes = 0;
  let first = NaN;
  let last = NaN;
  const deadline = Date.now() + 10 * MIN;
  await Promise.all(
    clients.map(async (c) => {
      while (pending.size > 0) {
        if (Date.now() > deadline) throw new Error(`round ${round} stuck with ${pending.size} pages left`);
        const r = await c.post('/render_queue/claim', { limit: LIMIT });
        const jobs = (r.status === 200 ? r.json : []) as Array<{ id: string; leaseToken: number }>;
        const mine = jobs.filter((j) => pending.has(j.id));
        if (mine.length === 0) {
          await sleep(50); // set used up, or the keys are inside their 5 s release grace
          continue;
        }
        for (const j of mine) pending.delete(j.id);
        const batch = mine.map((j) => {
          const body = bodyFor(pool, j.id, round, index.get(j.id)!);
          const size = Buffer.byteLength(body);
          live.set(j.id, size);
          bytes += size;
          return {
            id: j.id,
            leaseToken: j.leaseToken,
            outcome: 'rendered',
            statusCode: 200,
            contentType: 'text/html',
            body,
          };
        });
        const s = performance.now();
        if (Number.isNaN(first)) first = s;
        const res = await c.post('/render_queue/job_results', { results: batch });
        const e = performance.now();
        last = e;
        latencies.push(e - s);
        const answers = (res.json as { results?: Array<{ accepted: boolean }> } | undefined)?.results ?? [];
        if (res.status !== 200 || answers.some((a) => !a.accepted))
          throw new Error(`job_results failed: ${res.status} ${JSON.stringify(res.json).slice(0, 300)}`);
        results += batch.length;
      }
    }),
  );
  return {
    results,
    resultMB: Math.round(bytes / MB),
    postingMs: Math.round(last - first),
    jobResultsMs: summarize(latencies),
  };
}

async function run(variant: 'blob' | 'string', kib: number) {
  const componentDir = variant === 'string' ? stringComponent() : undefined;
  const h = await startHarper({
    componentDir,
    harperConfig: { logging: { level: 'warn', stdStreams: false, auditRetention: RETENTION } },
  });
  const clients: FleetClient[] = [];
  try {
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    const cfg = await h.fetch('/prerender_admin/config', {
      body: { queue: { keeper: { publishInterval: 200 } } },
    });
    if (cfg.status !== 200) throw new Error(`config: ${cfg.status} ${cfg.text}`);
    const urls = Array.from({ length: N }, (_, i) => benchUrl(`pages-${variant}-${kib}`, i));
    const due = () =>
      urls.map((url) => ({ url, dueAt: Date.now() - MIN, cadenceMs: 60 * MIN, fromSitemap: true }));
    await fileAll(h, due());
    for (let i = 0; i < CLIENTS; i++) clients.push(fleetClient(h, fleet));
    const pool = bodyPool(kib);
    const live = new Map<string, number>();
    const before = usage(h);
    const t0 = Date.now();
    const rounds = [];
    for (let round = 1; round <= R; round++) {
      if (round > 1) await fileAll(h, due()); // due again at once (never-demote keeps the earlier time)
      const r = await renderRound(clients, urls, round, pool, live);
      rounds.push({ round, ...r, ...usage(h) });
      console.error(`${variant} ${kib} KiB round ${round}: ${JSON.stringify(rounds[rounds.length - 1])}`);
    }
    const renderMs = Date.now() - t0;
    const liveMB = Math.round(([...live.values()].reduce((a, b) => a + b, 0) / MB) * 10) / 10;
    const afterRounds = usage(h);
    // Harper's cleanup: the last worker removes log entries older than the retention (and the blob files
    // only they still name) on a timer that backs off to retention/10 when there is nothing to remove.
    // Every replaced page is older than the retention once the last round is; allow two cleanup passes.
    const expired = Date.now() + retentionMs(RETENTION);
    const limit = expired + 2 * MIN;
    let afterCleanup = usage(h);
    for (;;) {
      await sleep(5000);
      afterCleanup = usage(h);
      const blobsDone = variant === 'blob' && afterCleanup.blobMB <= 1.1 * liveMB;
      if (blobsDone || Date.now() > limit || (variant === 'string' && Date.now() > expired + 30_000)) break;
    }
    const cleanupWaitMs = Date.now() - t0 - renderMs;
    const posted = rounds.reduce((a, r) => a + r.results, 0);
    const postedMB = rounds.reduce((a, r) => a + r.resultMB, 0);
    const postingMs = rounds.reduce((a, r) => a + r.postingMs, 0);
    const constantMB = diskMB(before);
    return {
      variant,
      bodyKiB: kib,
      pages: N,
      rounds: R,
      auditRetention: RETENTION,
      liveMB,
      before,
      afterRounds,
      afterRoundsRatio: Math.round(((diskMB(afterRounds) - constantMB) / liveMB) * 100) / 100,
      afterCleanup,
      afterCleanupRatio: Math.round(((diskMB(afterCleanup) - constantMB) / liveMB) * 100) / 100,
      cleanupWaitS: Math.round(cleanupWaitMs / 1000),
      renderS: Math.round(renderMs / 1000),
      jobResults: {
        resultsPerS: Math.round((posted / postingMs) * 1000),
        MBPerS: Math.round((postedMB / postingMs) * 1000 * 10) / 10,
        batchMs: summarize(rounds.flatMap((r) => [r.jobResultsMs.p50])),
        p99BatchMsWorstRound: Math.max(...rounds.map((r) => r.jobResultsMs.p99)),
      },
      verdict:
        diskMB(afterCleanup) - constantMB <= 1.5 * liveMB
          ? 'meets: disk after cleanup ≤ 1.5 × live + the empty-database constant'
          : 'misses: disk after cleanup > 1.5 × live + the empty-database constant',
      rounds_: rounds.map((r) => ({
        round: r.round,
        diskMB: Math.round(diskMB(r) * 10) / 10,
        blobFiles: r.blobFiles,
      })),
    };
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await h.destroy();
    if (componentDir) rmSync(componentDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const out: Record<string, unknown> = { machine: machine(), N, R, retention: RETENTION, runs: [] };
  const runs = out.runs as unknown[];
  for (const kib of SIZES_KIB) {
    runs.push(await run('blob', kib));
    if (WITH_STRING) runs.push(await run('string', kib));
  }
  out.loadavgAfter = loadavg();
  console.log(JSON.stringify(out, null, 2));
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
