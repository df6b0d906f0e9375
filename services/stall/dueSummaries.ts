// The only module that names QueueDueSummary: each clustered node's worker 0 publishes its per-queue due
// view (only the rows it owns) and its last requeue per queue, so the stall sweep on a pair's owner node
// and the queue's judge of `created`/`requeued` (util/cluster/clusterEdges.ts) can see a queue whole.
// Rows are rewritten when they change and refreshed before they would look stale; a node whose rows are
// stale or missing makes the cluster view incomplete (charges still happen, drains and `created` do not).
import type { NodeQueueView } from '../../util/cluster/clusterEdges.js';
import type { HarperTable } from '../runtime/harper.js';

/** The table this module owns, as [database, table] for the runtime's `table()`. */
export const DUE_SUMMARY_TABLE = ['render_queue', 'QueueDueSummary'] as const;

export interface DueSummaryDeps {
  /** The QueueDueSummary table (resources.ts: `table(...DUE_SUMMARY_TABLE)`). */
  table: () => Pick<HarperTable, 'put' | 'delete' | 'search'>;
  transaction: <T>(fn: (txn: unknown) => Promise<T>) => Promise<T>;
}

const idOf = (node: string, queue: string) => JSON.stringify([node, queue]);

/** The heartbeat row (queue ''): a node with nothing due still shows it is alive and looked. */
const HEARTBEAT = '';

function signature(v: NodeQueueView): string {
  const o = v.oldestGateDue;
  return JSON.stringify([
    v.hasGateDue,
    o?.key ?? null,
    o?.dueMs ?? null,
    o?.fromSitemap ?? null,
    v.requeuedAt,
  ]);
}

/** This node's side of the board: what it last wrote, so it writes only changes and refreshes. */
export class DueSummaryBoard {
  private readonly written = new Map<string, { sig: string; at: number }>();
  private heartbeatAt = -Infinity;

  constructor(private readonly deps: DueSummaryDeps) {}

  /**
   * Writes this node's views that changed (a new requeue mark is a change) or are due a refresh, and the
   * heartbeat; queues it has neither due work nor a mark in any more are deleted. Nothing to write, no transaction. `written` is updated only after the
   * commit, so a failed write is tried again on the next tick. Returns rows written.
   */
  async publish(
    node: string,
    views: readonly NodeQueueView[],
    now: number,
    refreshMs: number,
  ): Promise<number> {
    const written = this.written;
    const current = new Map(views.filter((v) => v.queue !== HEARTBEAT).map((v) => [v.queue, v]));
    const puts: Array<{ queue: string; sig: string; record: Record<string, unknown> }> = [];
    for (const [queue, v] of current) {
      const sig = signature(v);
      const last = written.get(queue);
      if (last && last.sig === sig && now - last.at < refreshMs) continue;
      const o = v.oldestGateDue;
      puts.push({
        queue,
        sig,
        record: {
          id: idOf(node, queue),
          node,
          queue,
          hasGateDue: v.hasGateDue,
          oldestKey: o?.key ?? null,
          oldestDueMs: o?.dueMs ?? null,
          oldestFromSitemap: o?.fromSitemap ?? null,
          requeuedAt: v.requeuedAt,
          updatedAt: now,
        },
      });
    }
    const beat = now - this.heartbeatAt >= refreshMs;
    const gone = [...written.keys()].filter((queue) => !current.has(queue));
    if (puts.length === 0 && !beat && gone.length === 0) return 0;
    const summaries = this.deps.table;
    await this.deps.transaction(async (txn) => {
      for (const p of puts) await summaries().put(idOf(node, p.queue), p.record, txn);
      if (beat)
        await summaries().put(
          idOf(node, HEARTBEAT),
          { id: idOf(node, HEARTBEAT), node, queue: HEARTBEAT, hasGateDue: false, updatedAt: now },
          txn,
        );
      for (const queue of gone) await summaries().delete(idOf(node, queue), txn);
    });
    for (const p of puts) written.set(p.queue, { sig: p.sig, at: now });
    if (beat) this.heartbeatAt = now;
    for (const queue of gone) written.delete(queue);
    return puts.length + (beat ? 1 : 0) + gone.length;
  }

  /**
   * The views of the other nodes, each only if refreshed within `maxAgeMs`; `missing` names the nodes
   * with no fresh row at all (down, partitioned, or not yet published).
   */
  async peers(
    self: string,
    nodes: readonly string[],
    now: number,
    maxAgeMs: number,
  ): Promise<{ views: NodeQueueView[][]; missing: string[] }> {
    const byNode = new Map<string, NodeQueueView[]>();
    const fresh = new Set<string>();
    for await (const r of this.deps.table().search({})) {
      const node = String(r.node);
      if (node === self || !nodes.includes(node)) continue;
      if (!(now - Number(r.updatedAt) <= maxAgeMs)) continue;
      fresh.add(node);
      if (r.queue === HEARTBEAT) continue;
      const list = byNode.get(node) ?? [];
      list.push({
        queue: String(r.queue),
        hasGateDue: r.hasGateDue === true,
        oldestGateDue:
          typeof r.oldestKey === 'string'
            ? { key: r.oldestKey, dueMs: Number(r.oldestDueMs), fromSitemap: r.oldestFromSitemap === true }
            : null,
        requeuedAt: typeof r.requeuedAt === 'number' ? r.requeuedAt : null,
      });
      byNode.set(node, list);
    }
    return { views: [...byNode.values()], missing: nodes.filter((n) => n !== self && !fresh.has(n)) };
  }
}
