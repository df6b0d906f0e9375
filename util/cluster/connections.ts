// The replication connections as a second departure signal: Harper's `cluster_status` operation says, per
// peer and database, whether this node's replication socket to it is connected. A stopped peer's sockets
// close at once (loopback: well under a second), long before its last heartbeat is 15 s old;
// util/cluster/holding.ts lets a peer leave early only when both agree — its connection down for the quick
// window and its beat as old. The answer carries retained credentials in clear text in Harper 4.7.29: only
// names and `connected` flags are kept, nothing of it is ever logged. services/cluster/connections.ts runs
// the operation.
import type { ConnectionView } from './membership.js';

/** The database whose socket carries the heartbeats (QueueNode). */
const BEAT_DATABASE = 'render_queue';
/** cluster_status is asked at most this often; presence is read every tick and every peer-wait poll. */
const LOOK_EVERY_MS = 250;
/**
 * An answer later than this is given up on. Off the main thread Harper keeps one resolver for the reply,
 * so a cluster_status asked by someone else meanwhile can leave ours unanswered for good.
 */
export const LOOK_TIMEOUT_MS = 2000;
/** A failing look is logged at most this often (a Harper without replication fails every look). */
const LOOK_WARN_EVERY_MS = 60_000;

/** Which peers' beat sockets are down, from one cluster_status answer; unknown shapes say nothing. */
export function peersDown(status: unknown): Set<string> {
  const down = new Set<string>();
  const connections = (status as { connections?: unknown } | null)?.connections;
  if (!Array.isArray(connections)) return down;
  for (const c of connections as Array<{ name?: unknown; database_sockets?: unknown }>) {
    if (typeof c?.name !== 'string' || !Array.isArray(c.database_sockets)) continue;
    const socket = (c.database_sockets as Array<{ database?: unknown; connected?: unknown }>).find(
      (s) => s?.database === BEAT_DATABASE,
    );
    if (socket?.connected === false) down.add(c.name);
  }
  return down;
}

export interface ConnectionWatchDeps {
  /** One cluster_status answer; may throw (then nothing is known and nobody counts as down). */
  clusterStatus: () => Promise<unknown>;
  /** A one-shot wait (the look's timeout). */
  sleep: (ms: number) => Promise<void>;
  /** Each peer's socket going down or coming back is said once; a failing look at most once a minute. */
  log: { info(...a: unknown[]): void; warn(...a: unknown[]): void };
}

/** Tracks since when each peer's beat socket has been down, from looks at cluster_status. */
export class ConnectionWatch implements ConnectionView {
  private readonly since = new Map<string, number>();
  private lastLookAt = -Infinity;
  private looking: Promise<void> | null = null;
  private lastWarnAt = -Infinity;

  constructor(private readonly deps: ConnectionWatchDeps) {}

  async downSince(now: number): Promise<ReadonlyMap<string, number>> {
    if (now - this.lastLookAt >= LOOK_EVERY_MS) {
      this.lastLookAt = now;
      this.looking ??= this.look(now).finally(() => (this.looking = null));
    }
    await this.looking;
    return this.since;
  }

  private async look(now: number): Promise<void> {
    let down: Set<string>;
    try {
      const status = await Promise.race([
        this.deps.clusterStatus(),
        this.deps.sleep(LOOK_TIMEOUT_MS).then(() => Promise.reject(new Error('cluster_status timed out'))),
      ]);
      down = peersDown(status);
    } catch (e) {
      // Unknown is not down: the heartbeat window alone decides.
      this.since.clear();
      if (now - this.lastWarnAt >= LOOK_WARN_EVERY_MS) {
        this.lastWarnAt = now;
        this.deps.log.warn(
          `cluster: cluster_status gave no answer (${e instanceof Error ? e.message : String(e)}); ` +
            'peers leave by the heartbeat window alone',
        );
      }
      return;
    }
    for (const name of [...this.since.keys()])
      if (!down.has(name)) {
        this.since.delete(name);
        this.deps.log.info(
          `cluster: cluster_status reports ${name}'s ${BEAT_DATABASE} socket connected again`,
        );
      }
    for (const name of down)
      if (!this.since.has(name)) {
        this.since.set(name, now);
        this.deps.log.info(`cluster: cluster_status reports ${name}'s ${BEAT_DATABASE} socket down`);
      }
  }
}
