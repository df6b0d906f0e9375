// Harper's cluster_status as the second departure signal (util/cluster/connections.ts): the watch runs
// the operation in-process on worker 0, and keeps only peer names and `connected` flags of the answer.
import { ConnectionWatch } from '../../util/cluster/connections.js';
import { log, server } from '../runtime/harper.js';

/** The watch over this Harper's cluster_status; undefined when this Harper cannot run operations. */
export function harperConnections(sleep: (ms: number) => Promise<void>): ConnectionWatch | undefined {
  const operation = server.operation;
  if (typeof operation !== 'function') return undefined;
  return new ConnectionWatch({
    clusterStatus: () => operation.call(server, { operation: 'cluster_status' }, undefined, false),
    sleep,
    log,
  });
}
