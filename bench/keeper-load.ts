// The keeper's load in-process, over a real Harper 4.7.29 store: KeeperService.load
// itself (the raw walk, KeeperCore.apply, the publishes while loading into a real ReadySet), without
// Harper's HTTP workers, so a CPU profile names only the load. `seed` files the rows of keeper-scale.ts
// (three prefix routes plus unrouted, ~30 % due, 10 % with their own cadence) through the API of a real
// Harper and keeps its root; `measure` opens that root in this process (Harper's in-process mode) and times
// `rounds` fresh loads: wall and this thread's CPU, with the load average before and after each.
// Run: npx tsc -p tsconfig.json
//      node dist/bench/keeper-load.js seed 1000000 /tmp/qk-load-root
//      ROOTPATH=/tmp/qk-load-root/hdb HOME=/tmp/qk-load-root/home node dist/bench/keeper-load.js measure 3
import { mkdirSync } from 'node:fs';
import { startHarper } from '../test/harness.js';
import { CONFIG_ROUTES, SCALE_SEED, scaleTargets, seededRandom } from './fixtures.js';
import { fileAll, loadavg, machine } from './lib.js';
import type { ScheduleSource } from '../services/keeper/deps.js';

async function seedRoot(rows: number, root: string): Promise<void> {
  mkdirSync(root, { recursive: true });
  const h = await startHarper({ root, logLevel: 'warn' });
  const r = await h.fetch('/prerender_admin/config', { body: { render: { routes: CONFIG_ROUTES } } });
  if (r.status !== 200) throw new Error(`config: ${r.status} ${r.text}`);
  const targets = scaleTargets(rows, Date.now(), seededRandom(SCALE_SEED));
  const rate = await fileAll(h, targets);
  console.log(JSON.stringify({ seeded: rows, root, fileRowsPerSec: Math.round(rate) }));
  await h.stop();
}

async function measure(rounds: number): Promise<void> {
  const raw: Record<string, unknown> = await import('../services/schedule/rawRecords.js');
  const walkScheduleRaw = raw.walkScheduleRaw as ScheduleSource['walk'];
  // The held-fields walk where this build has it (the keeper's own source uses it for the load).
  // (Typed loosely: the same script also times builds without the held-fields walk.)
  const walkHeld = raw.walkScheduleHeld as
    ((o: object, visit: (k: string, f: never) => void) => void) | undefined;
  // The store's row count, which sizes the held-row table once, where this build has it.
  const estimateRows = raw.scheduleRowEstimate as (() => number) | undefined;
  const { readRow } = await import('../services/schedule/store.js');
  const { KeeperService } = await import('../services/keeper/service.js');
  const { applyValues, checkPartial, defaultConfig } = await import('../util/config/schema.js');
  const { DutyScheduler, realTimer } = await import('../util/duties/scheduler.js');
  const { MIN_KEY_BYTES_PER_SLOT, ReadySet } = await import('../util/sharedMemory/readySet.js');
  const { KeeperSignal } = await import('../util/sharedMemory/keeperSignal.js');
  const { StateDoc } = await import('../util/sharedMemory/stateDoc.js');
  const cfg = applyValues(defaultConfig(), checkPartial({ render: { routes: CONFIG_ROUTES } }).values);
  const capacity = cfg.queue.ready.capacity;
  const keyBytes = Math.max(MIN_KEY_BYTES_PER_SLOT, capacity * 160);
  const ready = new ReadySet(new ArrayBuffer(ReadySet.byteLength(capacity, keyBytes)), capacity, keyBytes);
  const quiet = { info: () => undefined, warn: () => undefined, error: console.error };
  for (let round = 1; round <= rounds; round++) {
    const svc = new KeeperService({
      source: {
        subscribe: () => Promise.reject(new Error('unused')),
        walk: walkScheduleRaw,
        ...(walkHeld ? { walkHeld } : {}),
        ...(estimateRows ? { estimateRows } : {}),
        read: readRow,
      },
      ready,
      signal: new KeeperSignal(new ArrayBuffer(KeeperSignal.byteLength())),
      state: new StateDoc<unknown>(new ArrayBuffer(StateDoc.byteLength(1 << 16)), 1 << 16),
      config: () => cfg,
      publishInterval: () => cfg.queue.keeper.publishInterval,
      stateInterval: () => cfg.queue.keeper.stateInterval,
      isLeased: () => false,
      leasedUntilHash: () => 0,
      inFlight: () => 0,
      nodeView: () => ({ paused: false, status: 'queued' }),
      log: quiet,
      scheduler: new DutyScheduler({
        now: () => Date.now(),
        timer: realTimer,
        log: { debug: () => undefined, error: console.error },
      }),
    });
    const loadBefore = loadavg();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await svc.load(() => Date.now());
    const wallMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const cpuMs = (cpu.user + cpu.system) / 1000;
    const rows = svc.stats.loadRows;
    console.log(
      JSON.stringify({
        round,
        rows,
        held: svc.core.size,
        wallMs: Math.round(wallMs),
        cpuMs: Math.round(cpuMs),
        rowsPerSecWall: Math.round((rows / wallMs) * 1000),
        rowsPerSecCpu: Math.round((rows / cpuMs) * 1000),
        walk: walkHeld ? 'walkHeld' : 'walk',
        lastPublishMs: Math.round((svc.stats.lastPublish?.ms ?? NaN) * 100) / 100,
        loadBefore,
        loadAfter: loadavg(),
      }),
    );
  }
}

const [mode, a, b] = process.argv.slice(2);
if (mode === 'seed') {
  console.log(JSON.stringify({ bench: 'keeper-load seed', ...machine() }));
  await seedRoot(Number(a ?? 1_000_000), b ?? '/tmp/qk-load-root');
} else if (mode === 'measure') {
  console.log(JSON.stringify({ bench: 'keeper-load', ...machine(), rounds: Number(a ?? 3) }));
  await measure(Number(a ?? 3));
} else {
  throw new Error('usage: keeper-load.js seed <rows> <root> | measure <rounds>');
}
process.exit(0);
