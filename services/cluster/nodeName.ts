// This node's name and the origin fleets reach it at. The name (the replication hostname when
// clustered, else the OS hostname) keys QueueStatus rows (MQTT topic queue_status/<name>) and per-node
// pause. The origin (docs/prerender-fleet.md) is what jobs carry as callbackOrigin, and its host is the
// `hostname` of the node's queue_status message.
import { hostname as osHostname } from 'node:os';
import { normaliseOrigin } from '../../util/config/origin.js';
import { derivedOrigin, originHost } from '../../util/prerender/origin.js';
import { server } from '../runtime/harper.js';

/** The environment variable that gives one node its origin when render.callbackOrigin is unset. */
export const CALLBACK_ORIGIN_ENV = 'QUEUE_KEEPER_CALLBACK_ORIGIN';

export function nodeName(): string {
  const repl = (server.config as { replication?: { hostname?: string } } | undefined)?.replication?.hostname;
  return typeof repl === 'string' && repl.length > 0 ? repl : osHostname();
}

/** The environment's origin, or null when it is unset or not an origin (resources.ts logs that once). */
export function environmentOrigin(): string | null {
  const v = process.env[CALLBACK_ORIGIN_ENV];
  if (v === undefined || v === '') return null;
  try {
    return normaliseOrigin(v);
  } catch {
    return null;
  }
}

/**
 * Where prerender fleets reach this node: `configured` (render.callbackOrigin), else
 * QUEUE_KEEPER_CALLBACK_ORIGIN, else the fleet's own rule over the node name and Harper's HTTP port.
 */
export function callbackOrigin(configured: string | null): string {
  return (
    configured ??
    environmentOrigin() ??
    derivedOrigin(nodeName(), (server.config as { http?: unknown } | undefined)?.http)
  );
}

/** The host fleets dial: the `hostname` of this node's queue_status message (`configured` as above). */
export function advertisedHost(configured: string | null): string {
  return originHost(callbackOrigin(configured));
}
