// Worker 0's maintenance tick (`maintenance.tickInterval`): every tick runs each duty's
// runOnce(now) in turn on the duty scheduler (util/duties/scheduler.ts). A failing duty is logged and the
// others still run; the next tick is armed only after the current one has finished, so two ticks never
// overlap (a slow sweep must not meet a second sweep of itself, which would plan from the same ledger
// twice). Results are counts; the tick itself stays silent when every count is zero. A changed
// `maintenance.tickInterval` (a `timers` key) re-arms the waiting tick.
import { every, type Duty, type DutyHandle, type DutyScheduler } from './scheduler.js';

/** Starts the tick on `scheduler` (call on worker 0 only); the handle's stop() ends it. */
export function startMaintenance(
  scheduler: DutyScheduler,
  tickInterval: () => number,
  duties: readonly Duty[],
): DutyHandle {
  return scheduler.addGroup('maintenance', duties, every(tickInterval));
}
