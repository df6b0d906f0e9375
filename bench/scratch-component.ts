// A throw-away copy of the built component in a temp folder, for measurements the product offers no
// switch for: with the keeper not started (to price a schedule write without the keeper), and with an
// in-process CPU profiler on every worker (the harness strips NODE_OPTIONS, so --cpu-prof cannot reach
// Harper's workers). The product's own files are never changed; the copy is removed by the caller.
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '../test/harness.js';
import { summarizeProfile } from './cpuprofile-summary.js';
import { sleep, until } from './lib.js';

export interface ScratchOptions {
  /** Start the keeper on worker 0 (false = every schedule write reaches no subscriber). */
  keeper: boolean;
  /**
   * Profile every worker between two marker files: `<dir>/start` begins sampling, `<dir>/stop` ends it
   * and writes `<dir>/worker-<threadId>-<n>.cpuprofile`; removing both re-arms it.
   */
  profileDir?: string;
  /** Adds POST /prerender_admin/bench-read-path (admin): times the claim's point read and its parts on the worker. */
  readPathRoute?: boolean;
  /** Adds POST /prerender_admin/bench-write-path (admin): times a schedule row's rewrite by its form (write-path.ts). */
  writePathRoute?: boolean;
  /**
   * Records every keeper publish (top-K selection through the ready-set write, the window of
   * `lastPublish.ms`): wall ms, the thread's on-CPU and run-queue ms from /proc/thread-self/schedstat, and
   * the GC entries of the worker, appended as JSON lines to `<dir>/publishes-<threadId>.jsonl`.
   */
  publishProfileDir?: string;
  /**
   * Loads bench/scale-probe.ts (the stall, duty and heap files, the seed and storage routes) ahead of the
   * component's own modules; it writes to the folder in the Harper process's QK_SCALE_PROBE_DIR.
   */
  scaleProbe?: boolean;
  /**
   * The built tree to copy (its dist/, config.yaml, index.js, schema.graphql, roles.yaml, package.json,
   * web/): another build to set against this one in one run. Default: this repository.
   */
  from?: string;
  /** Adds POST /prerender_admin/bench-bare-put (admin): filing's rows by Harper's bare put (filing-floor-probe.ts). */
  filingFloorRoute?: boolean;
}

const KEEPER_START = '.then(() => leadership.start())';

function profilerSource(dir: string): string {
  return `
import { Session as QkBenchSession } from 'node:inspector';
import { existsSync as qkExists, writeFileSync as qkWrite } from 'node:fs';
import { threadId as qkThreadId } from 'node:worker_threads';
{
  const dir = ${JSON.stringify(dir)};
  const session = new QkBenchSession();
  session.connect();
  let phase = 'idle';
  let seq = 0;
  // Starting the profiler and writing a profile hold the thread for hundreds of ms: the stall probe
  // (scale-probe.ts) reads these windows and names such a hold 'profiler', not the code it interrupted.
  const windows = (globalThis.qkBenchWindows ??= []);
  const mark = () => {
    const w = { name: 'profiler', start: performance.now(), end: null };
    windows.push(w);
    return () => (w.end = performance.now() + 50);
  };
  const timer = setInterval(() => {
    if (phase === 'idle' && qkExists(dir + '/start')) {
      phase = 'running';
      const done = mark();
      session.post('Profiler.enable', () =>
        session.post('Profiler.setSamplingInterval', { interval: 250 }, () =>
          session.post('Profiler.start', done)));
    } else if (phase === 'running' && qkExists(dir + '/stop')) {
      phase = 'written';
      const n = ++seq;
      const done = mark();
      session.post('Profiler.stop', (err, res) => {
        if (!err) qkWrite(dir + '/worker-' + qkThreadId + '-' + n + '.cpuprofile', JSON.stringify(res.profile));
        done();
      });
    } else if (phase === 'written' && !qkExists(dir + '/start')) {
      phase = 'idle';
    }
  }, 50);
  timer.unref();
}
`;
}

// Wraps a publish on the worker that publishes (worker 0): ReadySet.publishWith runs the keeper's walk
// inside it, so its window is the walk and the write. schedstat's first two fields are the thread's time
// on a CPU and waiting for one (ns): a publish's wall time minus its CPU time is the machine taking the
// core away (or a GC on another thread's behalf); the GC entries say when the worker's own collector ran.
function publishProfileSource(dir: string): string {
  return `
import { ReadySet as QkPpReady } from './util/sharedMemory/readySet.js';
import { appendFileSync as qkPpAppend, readFileSync as qkPpRead } from 'node:fs';
import { PerformanceObserver as QkPpObserver } from 'node:perf_hooks';
import { threadId as qkPpThread } from 'node:worker_threads';
{
  const dir = ${JSON.stringify(dir)};
  const sched = () => {
    try {
      const f = qkPpRead('/proc/thread-self/schedstat', 'utf8').split(' ');
      return [Number(f[0]), Number(f[1])];
    } catch {
      return [NaN, NaN];
    }
  };
  const rows = [];
  const gcs = [];
  new QkPpObserver((list) => {
    for (const e of list.getEntries()) gcs.push([e.startTime, e.duration, e.detail?.kind ?? -1]);
  }).observe({ entryTypes: ['gc'] });
  const flush = () =>
    qkPpAppend(dir + '/publishes-' + qkPpThread + '.jsonl', JSON.stringify({ rows: rows.splice(0), gcs: gcs.splice(0) }) + '\\n');
  // The publish's window: the keeper's walk through the ready-set write, both inside publishWith.
  const publish = QkPpReady.prototype.publishWith;
  QkPpReady.prototype.publishWith = function (...args) {
    const open = { t0: performance.now(), s0: sched() };
    const r = publish.apply(this, args);
    const s1 = sched();
    const ms = performance.now() - open.t0;
    rows.push([open.t0, ms, (s1[0] - open.s0[0]) / 1e6, (s1[1] - open.s0[1]) / 1e6, r.published]);
    if (rows.length >= 20) flush();
    return r;
  };
  setInterval(() => rows.length > 0 && flush(), 2000).unref();
}
`;
}

// Times, on the worker that serves the request, the point read a claim does per candidate (readRow) and
// the two layers under it: the store's decoded get and its raw bytes. Appended to resources.js, it
// registers on that module's `router` (routes are looked up per request, so after install() is fine).
const READ_PATH_ROUTE = `
import { reply as qkReply } from './services/http/router.js';
import { readRow as qkReadRow } from './services/schedule/store.js';
import { table as qkTable } from './services/runtime/harper.js';
import { threadId as qkReadThread } from 'node:worker_threads';
router.route('POST', '/prerender_admin/bench-read-path', 'admin', async (req) => {
  const { keys, reps, turnKeys } = req.body;
  const fresh = turnKeys ?? keys;
  const store = qkTable('render_schedule', 'RenderSchedule').primaryStore;
  const usPer = (fn) => {
    const t = process.hrtime.bigint();
    for (let r = 0; r < reps; r++) for (const k of keys) fn(k);
    return Number(process.hrtime.bigint() - t) / 1000 / (reps * keys.length);
  };
  const readRowUs = usPer((k) => qkReadRow(k));
  const storeGetUs = usPer((k) => store.get(k));
  const getBinaryUs = typeof store.getBinary === 'function' ? usPer((k) => store.getBinary(k)) : null;
  // As a claim reads: 25 distinct keys, then a new event-loop turn (the next request), timing the reads only.
  let ns = 0n;
  let n = 0;
  for (let i = 0; i < fresh.length; i += 25) {
    await new Promise((r) => setImmediate(r));
    const t = process.hrtime.bigint();
    for (const k of fresh.slice(i, i + 25)) qkReadRow(k);
    ns += process.hrtime.bigint() - t;
    n += Math.min(25, fresh.length - i);
  }
  const readRowPerTurnUs = Number(ns) / 1000 / n;
  return qkReply({ thread: qkReadThread, reads: reps * keys.length, readRowUs, storeGetUs, getBinaryUs, readRowPerTurnUs });
});
`;

// Rewrites existing schedule rows in transactions of `batch` rows through one form of write (bench/write-path.ts),
// timing wall and this thread's on-CPU time (/proc/thread-self/schedstat) per row, commits awaited.
const WRITE_PATH_ROUTE = `
import { reply as qkWReply } from './services/http/router.js';
import { readRow as qkWReadRow } from './services/schedule/store.js';
import { table as qkWTable, transaction as qkWTxn } from './services/runtime/harper.js';
import { readFileSync as qkWRead } from 'node:fs';
import { threadId as qkWThread } from 'node:worker_threads';
router.route('POST', '/prerender_admin/bench-write-path', 'admin', async (req) => {
  const { form, batch, keys } = req.body;
  const T = qkWTable('render_schedule', 'RenderSchedule');
  const store = T.primaryStore;
  const cpuNs = () => Number(qkWRead('/proc/thread-self/schedstat', 'utf8').split(' ')[0]);
  const rows = keys.map((k) => qkWReadRow(k));
  const c0 = cpuNs();
  const t0 = performance.now();
  for (let i = 0; i < keys.length; i += batch) {
    const at = Date.now() + 86_400_000;
    if (form === 'owner') {
      // The product's result write: group commit, key locks, read, rule, put, commit, read-back.
      await schedule.applyResults(keys.slice(i, i + batch).map((url) => ({ url, outcome: 'rendered', statusCode: 200, completedAt: Date.now() })));
      continue;
    }
    if (form === 'rawPut') {
      let last;
      for (let j = i; j < Math.min(i + batch, keys.length); j++) last = store.put(keys[j], { ...rows[j], nextRenderTime: at });
      await last;
      continue;
    }
    // putTxnPath: Harper's commit takes one transaction callback instead of the per-write ifVersion
    // chain when writes + store.retryRisk reach 100 (its own switch); this forces that path at any size.
    if (form === 'putTxnPath') store.retryRisk = 100;
    await qkWTxn(async (txn) => {
      for (let j = i; j < Math.min(i + batch, keys.length); j++) {
        if (form === 'put' || form === 'putTxnPath') await T.put(keys[j], { ...rows[j], nextRenderTime: at, lastRenderedAt: at - 1, lastOutcome: 'rendered', strikes: 0 }, txn);
        else await T.patch(keys[j], { nextRenderTime: at, lastRenderedAt: at - 1, lastOutcome: 'rendered', strikes: 0 }, txn);
      }
    });
  }
  const wallUs = ((performance.now() - t0) * 1000) / keys.length;
  const cpuUs = (cpuNs() - c0) / 1000 / keys.length;
  return qkWReply({ thread: qkWThread, form, batch, rows: keys.length, wallUsPerRow: wallUs, cpuUsPerRow: cpuUs });
});
`;

/** Makes the copy and returns its folder. */
export function scratchComponent(opts: ScratchOptions): string {
  const dir = mkdtempSync(join(tmpdir(), 'qk-scratch-component-'));
  const from = opts.from ?? repoRoot;
  for (const f of ['config.yaml', 'index.js', 'schema.graphql', 'roles.yaml', 'package.json'])
    cpSync(join(from, f), join(dir, f));
  if (existsSync(join(from, 'web'))) cpSync(join(from, 'web'), join(dir, 'web'), { recursive: true });
  cpSync(join(from, 'dist'), join(dir, 'dist'), { recursive: true });
  symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'), 'dir');
  const entry = join(dir, 'dist', 'resources.js');
  let src = readFileSync(entry, 'utf8');
  if (!opts.keeper) {
    if (!src.includes(KEEPER_START))
      throw new Error('resources.js no longer starts the keeper the way this copy expects');
    src = src.replace(KEEPER_START, '.then(() => undefined)');
  }
  if (opts.profileDir) src += profilerSource(opts.profileDir);
  if (opts.readPathRoute) src += READ_PATH_ROUTE;
  if (opts.writePathRoute) src += WRITE_PATH_ROUTE;
  if (opts.publishProfileDir) src += publishProfileSource(opts.publishProfileDir);
  if (opts.filingFloorRoute)
    src += `\nimport { registerFilingFloor as qkFilingFloor } from './bench/filing-floor-probe.js';\nqkFilingFloor(router, config);\n`;
  if (opts.scaleProbe) {
    // First import, so its patch of the duty scheduler precedes every duty the component adds.
    src = `import { registerScaleProbe as qkScaleProbe } from './bench/scale-probe.js';\n${src}`;
    src += '\nqkScaleProbe(router, schedule);\n';
  }
  writeFileSync(entry, src);
  return dir;
}

export function removeScratch(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Runs `run` with every worker of a scratch component built with `profileDir` sampling itself, then
 * prints each worker's summary (areas, self and inclusive top `top`) and keeps its profile in that
 * folder as `<label>-worker-<threadId>-<n>.cpuprofile`.
 */
export async function profiledRun<T>(
  profileDir: string,
  label: string,
  run: () => Promise<T>,
  top = 20,
): Promise<T> {
  writeFileSync(join(profileDir, 'start'), '');
  await sleep(300);
  const result = await run();
  writeFileSync(join(profileDir, 'stop'), '');
  const want = (f: string) => f.startsWith('worker-') && f.endsWith('.cpuprofile');
  await until(
    'profiles from both workers',
    async () => (readdirSync(profileDir).filter(want).length >= 2 ? true : undefined),
    30_000,
  );
  await sleep(500);
  rmSync(join(profileDir, 'start'));
  rmSync(join(profileDir, 'stop'));
  for (const f of readdirSync(profileDir).filter(want)) {
    const s = summarizeProfile(JSON.parse(readFileSync(join(profileDir, f), 'utf8')), top);
    console.log(
      `--- ${label} ${f}: ${s.busyMs} ms busy of ${s.totalMs} ms; areas ${JSON.stringify(s.areasPctOfBusy)}`,
    );
    console.log('self:\n' + s.selfTop.join('\n'));
    console.log('inclusive:\n' + s.inclusiveTop.join('\n'));
    writeFileSync(join(profileDir, `${label}-${f}`), readFileSync(join(profileDir, f)));
    rmSync(join(profileDir, f));
  }
  return result;
}
