// Harper's entry point (loaded on every worker, never on the main thread). It installs the HTTP front,
// loads configuration and, on worker 0, starts the queue keeper.
import { registerAdmin } from './services/api/admin.js';
import { registerFeeding } from './services/api/feeding.js';
import { registerQueue } from './services/api/queue.js';
import { startConfig } from './services/config.js';
import { log, workerIndex } from './services/harper.js';
import { installHttp } from './services/http.js';
import { startKeeper } from './services/keeper.js';
import { registerWorker } from './services/sharedMemory.js';
import { startControl } from './services/status.js';

registerFeeding();
registerAdmin();
registerQueue();
installHttp();

async function start(): Promise<void> {
  await startConfig();
  if (workerIndex() === 0) {
    void startKeeper().catch((e: unknown) => log.error('queue keeper failed to start', e));
  } else {
    await startControl();
  }
  registerWorker();
}

start().catch((e: unknown) => log.error('queue-keeper failed to start', e));
