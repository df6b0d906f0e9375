// Harper's entry point (loaded on every worker, never on the main thread). It installs the HTTP front,
// loads configuration and, on worker 0, starts the queue keeper.
import { registerAdmin } from './services/http/routes/admin.js';
import { registerConsole } from './services/http/routes/console.js';
import { registerFeeding } from './services/http/routes/feeding.js';
import { registerNotify } from './services/http/routes/notify.js';
import { registerQueue, vouchedState } from './services/http/routes/queue.js';
import { registerStall } from './services/http/routes/stall.js';
import { startConfig } from './services/runtime/config.js';
import { log, workerIndex } from './services/runtime/harper.js';
import { healthRecordDuty } from './services/metrics/healthFigures.js';
import { installHttp } from './services/http/router.js';
import { startHeldAsks, startKeeper } from './services/keeper/leadership.js';
import { startMaintenance } from './services/keeper/maintenance.js';
import { peerNames } from './services/cluster/membership.js';
import { peerWait } from './services/cluster/peerWait.js';
import { onDueSummary, onRequeued, secretCleanupDuty, startNotify } from './services/notify/wakes.js';
import { pageSweepDuty } from './services/pages/store.js';
import { readRow } from './services/schedule/store.js';
import { registerWorker } from './services/runtime/sharedBuffers.js';
import { stallSweepDuty } from './services/stall/sweep.js';
import { startControl } from './services/status/control.js';

// Longer than any replication lag we expect between the page and schedule databases after a reconnect.
const PAGE_SWEEP_PEER_GRACE_MS = 60 * 60_000;

registerFeeding();
registerAdmin();
registerQueue();
registerNotify();
registerStall();
registerConsole();
installHttp();

async function start(): Promise<void> {
  await startConfig();
  // Pauses are followed before anything is served — on worker 0 too, before it waits for leadership.
  await startControl();
  startHeldAsks();
  if (workerIndex() === 0) {
    startNotify();
    startMaintenance([
      stallSweepDuty(),
      secretCleanupDuty(),
      healthRecordDuty(vouchedState),
      pageSweepDuty({
        hasRow: (url) => readRow(url) !== undefined,
        // Clustered, a page can arrive before its row (util/pages/sweep.ts): leave it alone for a while.
        graceMs: async () => ((await peerNames()).length > 0 ? PAGE_SWEEP_PEER_GRACE_MS : 0),
      }),
    ]);
    // Clustered, wait (capped) to see the peers before loading, so ownership is decided over them (SPEC §9).
    void peerWait()
      .then(() => startKeeper({ onDue: onDueSummary, onRequeued }))
      .catch((e: unknown) => log.error('queue keeper failed to start', e));
  }
  registerWorker();
}

start().catch((e: unknown) => log.error('queue-keeper failed to start', e));
