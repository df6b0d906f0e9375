// Cluster membership over Harper (docs/clusters.md), and the only module that names QueueNode. Configured
// peers are the nodes Harper replicates with (`system.hdb_nodes`, written by add_node / remove_node); a peer
// is present while its heartbeat in the replicated QueueNode table is fresh. Worker 0 of each node beats
// every max(1 s, publishInterval) with the node list its keeper holds rows by, and the keeper holds a row
// only as util/cluster/holding.ts decides. The logic is util/cluster/membership.ts; the instances are built
// once per worker in resources.ts (the composition root).
import type { DutyScheduler } from '../../util/duties/scheduler.js';
import type { NodeBeat } from '../../util/cluster/holding.js';
import { decodeHandoff, encodeHandoff, type HandoffLease } from '../../util/cluster/handoff.js';
import { ClusterMembership, ReplicationPeers, type ConnectionView } from '../../util/cluster/membership.js';
import { log, table, transaction } from '../runtime/harper.js';
import { nodeName } from './nodeName.js';

const nodeTable = () => table('render_queue', 'QueueNode');

/** Harper's node table as ReplicationPeers reads it (a node without replication has none). */
export function harperPeers(): ReplicationPeers {
  return new ReplicationPeers({
    self: nodeName,
    nodes: () => table('system', 'hdb_nodes').search({}),
    log,
  });
}

type DecodedHandoffs = Map<string, { text: unknown; list: HandoffLease[] }>;

function toBeat(r: Record<string, unknown>, decoded: DecodedHandoffs): NodeBeat | null {
  if (typeof r.id !== 'string' || typeof r.beatAt !== 'number') return null;
  const view = Array.isArray(r.view) ? r.view.filter((n): n is string => typeof n === 'string') : null;
  let cached = decoded.get(r.id);
  if (cached === undefined || cached.text !== r.handoff) {
    cached = { text: r.handoff, list: decodeHandoff(r.handoff) };
    decoded.set(r.id, cached);
  }
  const handoff = cached.list;
  return { node: r.id, beatAt: r.beatAt, view, ...(handoff.length > 0 ? { handoff } : {}) };
}

/** The membership over Harper's tables. Only worker 0 starts it (the peer wait, then the keeper). */
export function harperMembership(deps: {
  scheduler: DutyScheduler;
  peers: ReplicationPeers;
  connections?: ConnectionView;
  /** The leases each beat hands over (worker 0's keeper leadership). */
  handoff?: (now: number, newView: boolean) => Promise<readonly HandoffLease[] | null>;
  /** `queue.keeper.publishInterval`: worker 0 beats every max(1 s, publishInterval). */
  publishInterval: () => number;
}): ClusterMembership {
  // The list stays one array while it does not change: encode it once, not every beat.
  let last: { list: readonly HandoffLease[]; text: string } | null = null;
  const encoded = (list: readonly HandoffLease[]): string => {
    if (last?.list !== list) last = { list, text: encodeHandoff(list) };
    return last.text;
  };
  // Each peer's last handoff list, decoded: the keeper reads the beats every second, and a peer rewrites
  // the same list (up to 50,000 leases) every beat until it changes, so it is decoded once per change.
  const decodedHandoffs: DecodedHandoffs = new Map();
  return new ClusterMembership({
    self: nodeName,
    configuredPeers: () => deps.peers.names(),
    readBeats: async () => {
      const beats: NodeBeat[] = [];
      for await (const r of nodeTable().search({})) {
        const b = toBeat(r, decodedHandoffs);
        if (b) beats.push(b);
      }
      return beats;
    },
    writeBeat: (b) =>
      transaction(async (txn) => {
        // The list is not known (no view yet, or listing failed): keep the row's, whose leases still run.
        const kept = b.keepHandoff ? ((await nodeTable().get(b.node, txn))?.handoff ?? null) : undefined;
        await nodeTable().put(
          b.node,
          {
            id: b.node,
            view: b.view ? [...b.view] : null,
            beatAt: b.beatAt,
            startedAt: b.startedAt,
            // Null, not absent: a put replaces the row, and an old list must not outlive its leases.
            handoff:
              kept !== undefined ? kept : b.handoff && b.handoff.length > 0 ? encoded(b.handoff) : null,
          },
          txn,
        );
      }),
    now: () => Date.now(),
    processStartedAt: Date.now() - process.uptime() * 1000,
    beatIntervalMs: deps.publishInterval,
    scheduler: deps.scheduler,
    connections: deps.connections,
    handoff: deps.handoff,
    log,
  });
}
