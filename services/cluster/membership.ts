// Cluster membership for row ownership (SPEC §9): this node plus the nodes Harper replicates with
// (`system.hdb_nodes`, written by add_node / remove_node). A node alone owns every row.
import { Ownership } from '../../util/cluster/ownership.js';
import { log, table } from '../runtime/harper.js';
import { nodeName } from './nodeName.js';

let warned = false;

/** The replication peers' names; [] when not clustered or when the system table cannot be read. */
export async function peerNames(): Promise<string[]> {
  let nodes;
  try {
    nodes = table('system', 'hdb_nodes');
  } catch {
    return [];
  }
  const names: string[] = [];
  try {
    for await (const r of nodes.search({})) {
      const name = r.name ?? r.hostname ?? r.id;
      if (typeof name === 'string' && name.length > 0) names.push(name);
    }
  } catch (e) {
    if (!warned) log.warn('could not read system.hdb_nodes; treating this node as alone', e);
    warned = true;
    return [];
  }
  return names;
}

export async function currentOwnership(): Promise<Ownership> {
  return new Ownership(await peerNames(), nodeName());
}
