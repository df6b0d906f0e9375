// Harper's entry point (loaded on every worker, never on the main thread). It installs the HTTP front,
// loads configuration and starts worker 0's services.
import { registerAdmin } from './services/api/admin.js';
import { registerFeeding } from './services/api/feeding.js';
import { startConfig } from './services/config.js';
import { log } from './services/harper.js';
import { installHttp } from './services/http.js';
import { registerWorker } from './services/sharedMemory.js';

registerFeeding();
registerAdmin();
installHttp();

startConfig()
  .then(() => registerWorker())
  .catch((e: unknown) => log.error('queue-keeper failed to start', e));
