// The write floor under filing, inside Harper, in a scratch copy of the component only
// (scratch-component.ts `filingFloorRoute`); the product never loads it. Its route writes the rows filing
// would write straight to the schedule table with Harper's own put, so bench/filing-floor.ts can set
// POST /render_queue/targets and the in-process filing path against what the table costs by itself.
//   POST /prerender_admin/bench-bare-put  {from, to, now, txn} (admin): rows [from, to) of scale-mix.ts,
//        10,000 targets at a time as the seed route takes them (scale-probe.ts), each made into the row a
//        fresh filing writes (util/schedule/rules.ts upsertTarget, one per configured device, under its
//        `<url>|<device>` key), then `txn` rows per transaction of Table.put, each commit awaited. No
//        checks, no key locks, no read before or after, no failing-list lookup: what filing adds on top.
//        Answers the rows, the ms and the worker index that wrote them.
//   GET  /prerender_admin/bench-row-count  (admin): the schedule's string keys, counted from its primary
//        store (lmdb's entry count also counts an entry that is no row).
import { reply, type Router } from '../services/http/router.js';
import { table, transaction, workerIndex } from '../services/runtime/harper.js';
import type { QueueKeeperConfig } from '../util/config/schema.js';
import { upsertTarget } from '../util/schedule/rules.js';
import { rowKey } from '../util/schedule/rowKey.js';
import { scaleTargets } from './scale-mix.js';

/** The seed route's batch: the targets one call of the schedule owner files. */
const BATCH = 10_000;

export function registerFilingFloor(router: Router, config: () => QueueKeeperConfig): void {
  router.route('POST', '/prerender_admin/bench-bare-put', 'admin', async (req) => {
    const { from, to, now, txn } = req.body as { from: number; to: number; now: number; txn: number };
    const schedule = table('render_schedule', 'RenderSchedule');
    const t0 = performance.now();
    let rows = 0;
    for (let i = from; i < to; i += BATCH) {
      const cfg = config();
      const devices = cfg.render.deviceTypes;
      const records: Array<[string, Record<string, unknown>]> = [];
      for (const t of scaleTargets(i, Math.min(to, i + BATCH), now)) {
        const row = upsertTarget(undefined, t, now, cfg);
        for (const device of devices) {
          const key = rowKey(t.url, device);
          records.push([key, { ...row, cacheKey: key }]);
        }
      }
      for (let j = 0; j < records.length; j += txn) {
        await transaction(async (tx) => {
          for (const [key, record] of records.slice(j, j + txn)) await schedule.put(key, record, tx);
        });
      }
      rows += records.length;
    }
    return reply({ rows, ms: performance.now() - t0, worker: workerIndex() ?? null });
  });
  router.route('GET', '/prerender_admin/bench-row-count', 'admin', () => {
    let rows = 0;
    for (const key of table('render_schedule', 'RenderSchedule').primaryStore.getKeys({}))
      if (typeof key === 'string') rows++;
    return Promise.resolve(reply({ rows }));
  });
}
