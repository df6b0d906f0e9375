// What the scale bench (scale.ts) adds inside Harper, in a scratch copy of the component only
// (scratch-component.ts `scaleProbeDir`): the copy's dist/resources.js imports this module first, so its
// patch of the duty scheduler is in place before any duty is added, and calls registerScaleProbe with
// its router and schedule owner at its end. The product never loads it.
//
// On every worker, written under `dir`:
//   stalls-<threadId>.jsonl  each time the event loop was held ≥ STALL_MS (a 5 ms timer that fired late):
//                            when, how long, the duties whose run overlapped the hold, the GC time of
//                            this worker inside it, and the thread's time on a CPU and waiting for one
//                            over the hold (/proc/thread-self/schedstat): on a loaded machine a hold's
//                            wall time is partly the machine's, its CPU time is the thread's own;
//   duties-<threadId>.json   per duty name: runs, the longest run's wall ms, and the longest first
//                            synchronous slice (runOnce up to its first await), every 2 s;
//   heap-<threadId>.json     v8 heap statistics, the worker index and the event loop delay max, every 2 s.
// Routes (admin):
//   POST /prerender_admin/bench-seed     {from, to, now}: rows [from, to) of scale-mix.ts filed through
//                                        the same validation and schedule write as POST
//                                        /render_queue/targets, 10,000 per write, without HTTP or JSON;
//                                        answers the rows, the ms and the worker index that filed them;
//   GET  /prerender_admin/bench-storage  the lmdb statistics of the schedule's stores (record, audit
//                                        log, failing list) and of its database file.
import { writeFileSync, appendFileSync, readFileSync } from 'node:fs';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import { threadId } from 'node:worker_threads';
import { DutyScheduler, type Duty } from '../util/duties/scheduler.js';
import { checkTargetsBody } from '../util/schedule/targetChecks.js';
import { isProblem } from '../util/problem.js';
import { reply, type Router } from '../services/http/router.js';
import { table, workerIndex } from '../services/runtime/harper.js';
import type { TargetInput } from '../util/schedule/rules.js';
import { scaleTargets, scaleUrl } from './scale-mix.js';
import { rowKey } from '../util/schedule/rowKey.js';
import { storedIsDeletion } from '../util/schedule/rawRecord.js';

const dir = process.env.QK_SCALE_PROBE_DIR;
/** A hold of the event loop at least this long is written down. */
const STALL_MS = 50;
const TICK_MS = 5;

interface RunWindow {
  name: string;
  start: number;
  end: number | null;
}

interface DutyFigures {
  runs: number;
  maxWallMs: number;
  maxFirstSliceMs: number;
}

// Shared with the profiler the scratch component may load (scratch-component.ts), which adds its own.
const windows: RunWindow[] = ((globalThis as { qkBenchWindows?: RunWindow[] }).qkBenchWindows ??= []);
const figures = new Map<string, DutyFigures>();
const gcs: Array<[number, number]> = [];

function wrap(duty: Duty): Duty {
  return {
    name: duty.name,
    runOnce: (now: number) => {
      const w: RunWindow = { name: duty.name, start: performance.now(), end: null };
      windows.push(w);
      if (windows.length > 2000) windows.splice(0, windows.length - 1000);
      const f = figures.get(duty.name) ?? { runs: 0, maxWallMs: 0, maxFirstSliceMs: 0 };
      figures.set(duty.name, f);
      const done = () => {
        w.end = performance.now();
        f.runs++;
        f.maxWallMs = Math.max(f.maxWallMs, w.end - w.start);
      };
      let r: ReturnType<Duty['runOnce']>;
      try {
        r = duty.runOnce(now);
      } catch (e) {
        done();
        throw e;
      }
      f.maxFirstSliceMs = Math.max(f.maxFirstSliceMs, performance.now() - w.start);
      return Promise.resolve(r).finally(done);
    },
  };
}

if (dir) {
  const add = DutyScheduler.prototype.add;
  DutyScheduler.prototype.add = function (duty, cadence) {
    return add.call(this, wrap(duty), cadence);
  };
  const addGroup = DutyScheduler.prototype.addGroup;
  DutyScheduler.prototype.addGroup = function (name, duties, cadence) {
    return addGroup.call(this, name, duties.map(wrap), cadence);
  };

  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if (e.duration >= 5) gcs.push([e.startTime, e.duration]);
    if (gcs.length > 5000) gcs.splice(0, gcs.length - 2500);
  }).observe({ entryTypes: ['gc'] });

  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  /** The thread's ns on a CPU and waiting for one, so far. */
  const sched = (): [number, number] => {
    try {
      const f = readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ');
      return [Number(f[0]), Number(f[1])];
    } catch {
      return [NaN, NaN];
    }
  };
  let last = performance.now();
  let lastSched = sched();
  const tick = setInterval(() => {
    const t = performance.now();
    const now = sched();
    const cpuMs = (now[0] - lastSched[0]) / 1e6;
    const waitMs = (now[1] - lastSched[1]) / 1e6;
    lastSched = now;
    const held = t - last - TICK_MS;
    const detectedUs = Number(process.hrtime.bigint() / 1000n);
    if (held >= STALL_MS) {
      const from = last + TICK_MS;
      const duties = [
        ...new Set(windows.filter((w) => w.start <= t && (w.end ?? t) >= from).map((w) => w.name)),
      ];
      // The GC entries are delivered after the hold: give them a moment before summing.
      setTimeout(() => {
        const gcMs = gcs
          .filter(([s, d]) => s + d >= from && s <= t)
          .reduce((sum, [s, d]) => sum + Math.min(s + d, t) - Math.max(s, from), 0);
        appendFileSync(
          `${dir}/stalls-${threadId}.jsonl`,
          JSON.stringify({
            at: Math.round(performance.timeOrigin + from),
            ms: Math.round(held),
            duties,
            gcMs: Math.round(gcMs),
            cpuMs: Math.round(cpuMs),
            waitMs: Math.round(waitMs),
            // The hold's start on the monotonic clock a CPU profile's startTime and samples use (µs).
            monoUs: Math.round(detectedUs - (t - from) * 1000),
          }) + '\n',
        );
      }, 200).unref();
    }
    last = t;
  }, TICK_MS);
  tick.unref();

  const report = setInterval(() => {
    const h = getHeapStatistics();
    writeFileSync(
      `${dir}/heap-${threadId}.json`,
      JSON.stringify({
        at: Date.now(),
        threadId,
        workerIndex: workerIndex() ?? null,
        usedHeapBytes: h.used_heap_size,
        totalHeapBytes: h.total_heap_size,
        heapLimitBytes: h.heap_size_limit,
        externalBytes: h.external_memory,
        loopDelayMaxMs: Math.round(delay.max / 1e6),
      }),
    );
    writeFileSync(`${dir}/duties-${threadId}.json`, JSON.stringify(Object.fromEntries(figures)));
  }, 2000);
  report.unref();
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Store = any;

function storeStats(store: Store) {
  if (!store?.getStats) return null;
  const s = store.getStats();
  const pages =
    Number(s.treeBranchPageCount ?? 0) + Number(s.treeLeafPageCount ?? 0) + Number(s.overflowPages ?? 0);
  return { entries: Number(s.entryCount ?? 0), pages, bytes: pages * Number(s.pageSize ?? 4096) };
}

export function registerScaleProbe(
  router: Router,
  schedule: { fileTargets(targets: readonly TargetInput[], now: number): Promise<number> },
): void {
  if (!dir) return;
  router.route('POST', '/prerender_admin/bench-seed', 'admin', async (req) => {
    const { from, to, now } = req.body as { from: number; to: number; now: number };
    const t0 = performance.now();
    let rows = 0;
    for (let i = from; i < to; i += 10_000) {
      const checked = checkTargetsBody({ targets: scaleTargets(i, Math.min(to, i + 10_000), now) }, now);
      if (isProblem(checked)) throw new Error(checked.message);
      const { accepted } = checked;
      rows += await schedule.fileTargets(
        accepted.map((a) => a.target),
        now,
      );
    }
    return reply({ rows, ms: performance.now() - t0, worker: workerIndex() ?? null });
  });
  // Which seed rows (index from..to, device desktop) the record store lacks: absent, or a deletion's marker.
  router.route('POST', '/prerender_admin/bench-missing', 'admin', async (req) => {
    const { from, to } = req.body as { from: number; to: number };
    const store = (table('render_schedule', 'RenderSchedule') as Store).primaryStore;
    let absent = 0;
    let deleted = 0;
    const sample: number[] = [];
    const byTenth = new Array<number>(10).fill(0);
    for (let i = from; i < to; i++) {
      const bytes = store.getBinaryFast(rowKey(scaleUrl(i), 'desktop')) as Uint8Array | undefined;
      const gone = bytes === undefined ? 'absent' : storedIsDeletion(bytes, bytes.length) ? 'deleted' : null;
      if (gone === null) continue;
      if (gone === 'absent') absent++;
      else deleted++;
      byTenth[Math.min(9, Math.floor(((i - from) * 10) / (to - from)))]!++;
      if (sample.length < 40) sample.push(i);
    }
    return reply({ absent, deleted, byTenth, sample });
  });
  router.route('GET', '/prerender_admin/bench-storage', 'admin', async () => {
    const rs = table('render_schedule', 'RenderSchedule') as Store;
    const failing = table('render_schedule', 'RenderFailing') as Store;
    const env = rs.primaryStore?.env ?? rs.primaryStore;
    let file: unknown = null;
    try {
      const s = rs.primaryStore.getStats();
      file = {
        pageSize: s.pageSize,
        lastPageNumber: s.lastPageNumber,
        mapSize: s.mapSize,
        free: s.free,
        usedBytes: Number(s.lastPageNumber ?? 0) * Number(s.pageSize ?? 4096),
      };
    } catch {
      file = null;
    }
    return reply({
      record: storeStats(rs.primaryStore),
      audit: storeStats(rs.auditStore),
      failing: storeStats(failing.primaryStore),
      envPath: env?.path ?? null,
      file,
    });
  });
}
