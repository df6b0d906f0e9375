// Harper's entry point (loaded on every worker, never on the main thread) and the composition root: it
// builds the duty scheduler, the runtime config, the pause control and the keeper, connects their
// events, installs the HTTP front, and on worker 0 starts the queue keeper and the maintenance tick.
import { DutyScheduler, realTimer } from './util/duties/scheduler.js';
import { registerAdmin } from './services/http/routes/admin.js';
import { registerConsole } from './services/http/routes/console.js';
import { registerFeeding } from './services/http/routes/feeding.js';
import { registerNotify } from './services/http/routes/notify.js';
import { registerQueue, vouchedState } from './services/http/routes/queue.js';
import { registerStall } from './services/http/routes/stall.js';
import { config, installProcessWideConfig, RuntimeConfig } from './services/runtime/config.js';
import { log, workerIndex } from './services/runtime/harper.js';
import { healthRecordDuty } from './services/metrics/healthFigures.js';
import { installHttp } from './services/http/router.js';
import { KeeperLeadership } from './services/keeper/leadership.js';
import { startMaintenance } from './services/keeper/maintenance.js';
import { peerNames } from './services/cluster/membership.js';
import { onDueSummary, onRequeued, secretCleanupDuty, startNotify } from './services/notify/wakes.js';
import { pageSweepDuty } from './services/pages/store.js';
import { readRow } from './services/schedule/store.js';
import { registerWorker } from './services/runtime/sharedBuffers.js';
import { stallSweepDuty } from './services/stall/sweep.js';
import { NodeControl } from './services/status/control.js';

// Longer than any replication lag we expect between the page and schedule databases after a reconnect.
const PAGE_SWEEP_PEER_GRACE_MS = 60 * 60_000;

// Every timer of this worker is a duty on this scheduler; a `timers` config key re-arms the waiting ones.
const duties = new DutyScheduler({ now: () => Date.now(), timer: realTimer, log });
const settings = new RuntimeConfig({ scheduler: duties });
installProcessWideConfig(settings);
settings.onChange((_next, _prev, changed) => duties.configChanged(changed));
const control = new NodeControl({ scheduler: duties });
const keeper = new KeeperLeadership({
  scheduler: duties,
  config,
  onConfigChange: (l) => settings.onChange(l),
  control,
  events: {
    onDue: onDueSummary,
    onRequeued: (queue, now) => onRequeued(queue, now, keeper.keeper()),
  },
});

registerFeeding();
registerAdmin({ keeper, control, settings });
registerQueue(control);
registerNotify();
registerStall();
registerConsole();
installHttp();

async function start(): Promise<void> {
  await settings.start();
  // Pauses are followed before anything is served — on worker 0 too, before it waits for leadership.
  await control.start();
  keeper.listenForHeldAsks();
  if (workerIndex() === 0) {
    startNotify();
    startMaintenance(duties, config, [
      stallSweepDuty(keeper),
      secretCleanupDuty(),
      healthRecordDuty(vouchedState),
      pageSweepDuty({
        hasRow: (url) => readRow(url) !== undefined,
        // Clustered, a page can arrive before its row (util/pages/sweep.ts): leave it alone for a while.
        graceMs: async () => ((await peerNames()).length > 0 ? PAGE_SWEEP_PEER_GRACE_MS : 0),
      }),
    ]);
    void keeper.start().catch((e: unknown) => log.error('queue keeper failed to start', e));
  }
  registerWorker();
}

start().catch((e: unknown) => log.error('queue-keeper failed to start', e));
