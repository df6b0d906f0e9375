// What scale-probe.ts writes inside Harper, read from the bench side (scale.ts, devices.ts): the holds of
// the event loop by worker and duty, each duty's longest run, the lmdb statistics route, and the keeper's
// row count from the overview.
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { HarperInstance } from '../test/harness.js';
import { overview, until } from './lib.js';

export interface HeapReport {
  threadId: number;
  workerIndex: number | null;
  usedHeapBytes: number;
  heapLimitBytes: number;
  at: number;
}

/** Waits until worker 0's keeper is live and holds at least `rows` rows; answers its overview block. */
export async function keeperLive(h: HarperInstance, rows: number, timeoutMs = 1_200_000) {
  return until(
    'the keeper live with every row',
    async () => {
      const o = await overview(h).catch(() => undefined);
      const k = o?.keeper;
      return k?.phase === 'live' && Number(k.stats?.rows ?? 0) >= rows ? k : undefined;
    },
    timeoutMs,
    100,
  );
}

/** The lmdb statistics of the schedule's stores (scale-probe.ts's bench-storage route). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function storage(h: HarperInstance): Promise<any> {
  const r = await h.fetch('/prerender_admin/bench-storage');
  if (r.status !== 200) throw new Error(`bench-storage: ${r.status} ${r.text.slice(0, 200)}`);
  return r.json;
}

/** Every recorded hold of the event loop (removing the files), by worker index. */
export function readStalls(probeDir: string) {
  const workers = new Map<string, number | null>();
  for (const f of readdirSync(probeDir).filter((n) => n.startsWith('heap-'))) {
    try {
      const r = JSON.parse(readFileSync(join(probeDir, f), 'utf8')) as HeapReport;
      workers.set(String(r.threadId), r.workerIndex);
    } catch {
      // being rewritten
    }
  }
  const stalls: Array<{
    worker: number | null;
    at: number;
    ms: number;
    duties: string[];
    gcMs: number;
    /** The thread's time on a CPU and waiting for one inside the hold (from the tick before it). */
    cpuMs?: number;
    waitMs?: number;
    /** The hold's start on the monotonic clock of a CPU profile (µs), to find it in one. */
    monoUs?: number;
  }> = [];
  for (const f of readdirSync(probeDir).filter((n) => n.startsWith('stalls-'))) {
    const tid = f.slice('stalls-'.length, -'.jsonl'.length);
    for (const line of readFileSync(join(probeDir, f), 'utf8').split('\n'))
      if (line) stalls.push({ worker: workers.get(tid) ?? null, ...JSON.parse(line) });
    rmSync(join(probeDir, f));
  }
  return stalls;
}

export function dutyFigures(probeDir: string) {
  const out: Record<string, unknown> = {};
  for (const f of readdirSync(probeDir).filter((n) => n.startsWith('duties-'))) {
    const tid = f.slice('duties-'.length, -'.json'.length);
    try {
      const heap = JSON.parse(readFileSync(join(probeDir, `heap-${tid}.json`), 'utf8')) as HeapReport;
      out[`worker${heap.workerIndex}`] = JSON.parse(readFileSync(join(probeDir, f), 'utf8'));
    } catch {
      // a file of an earlier process
    }
  }
  return out;
}

/**
 * Worker 0's holds: the longest, by duty (a hold with no duty running is `none`), and counts; with the
 * thread's own CPU time in the holds, so a hold the machine's load stretched tells from one the thread ran.
 */
export function stallSummary(stalls: ReturnType<typeof readStalls>) {
  // A hold the profiler's own start or write caused (PROFILE=1) is the bench's, not the component's.
  const profiler = stalls.filter((s) => s.worker === 0 && s.duties.includes('profiler')).length;
  const w0 = stalls.filter((s) => s.worker === 0 && !s.duties.includes('profiler'));
  const byDuty: Record<string, { maxMs: number; over100: number; maxGcMs: number; maxCpuMs: number }> = {};
  for (const s of w0) {
    for (const d of s.duties.length ? s.duties : ['none']) {
      const e = (byDuty[d] ??= { maxMs: 0, over100: 0, maxGcMs: 0, maxCpuMs: 0 });
      if (s.ms > e.maxMs) {
        e.maxMs = s.ms;
        e.maxGcMs = s.gcMs;
      }
      e.maxCpuMs = Math.max(e.maxCpuMs, s.cpuMs ?? 0);
      if (s.ms > 100) e.over100++;
    }
  }
  const top = [...w0].sort((a, b) => b.ms - a.ms).slice(0, 8);
  return {
    holds: w0.length,
    ...(profiler > 0 ? { profilerHolds: profiler } : {}),
    over100: w0.filter((s) => s.ms > 100).length,
    maxMs: top[0]?.ms ?? 0,
    maxCpuMs: Math.max(0, ...w0.map((s) => s.cpuMs ?? 0)),
    over100Cpu: w0.filter((s) => (s.cpuMs ?? 0) > 100).length,
    byDuty,
    top,
    otherWorkersMaxMs: Math.max(0, ...stalls.filter((s) => s.worker !== 0).map((s) => s.ms)),
  };
}

/**
 * Files rows [0, rows) of scale-mix.ts in process through scale-probe.ts's seed route, chunks of 200,000
 * on two requests at once (one a worker thread).
 */
export async function fileSeed(h: HarperInstance, rows: number, now: number) {
  const CHUNK = 200_000;
  let next = 0;
  await Promise.all(
    [0, 1].map(async () => {
      for (;;) {
        const from = next;
        if (from >= rows) return;
        next += CHUNK;
        const r = await h.fetch('/prerender_admin/bench-seed', {
          body: { from, to: Math.min(rows, from + CHUNK), now },
          fresh: true,
          timeoutMs: 600_000,
        });
        if (r.status !== 200) throw new Error(`seed failed at ${from}: ${r.status} ${r.text.slice(0, 300)}`);
      }
    }),
  );
}
