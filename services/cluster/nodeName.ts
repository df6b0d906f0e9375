// This node's name: the replication hostname when clustered, else the OS hostname. It keys
// QueueStatus rows (MQTT topic queue_status/<hostname>) and per-host pause.
import { hostname as osHostname } from 'node:os';
import { server } from '../runtime/harper.js';

export function nodeName(): string {
  const repl = (server.config as { replication?: { hostname?: string } } | undefined)?.replication?.hostname;
  return typeof repl === 'string' && repl.length > 0 ? repl : osHostname();
}
