// Node status: empty | queued | paused | unready. Pause is operator intent in the replicated
// QueueControl table (`all` or a hostname), cached on every worker by a subscription. The derived status
// is written to the exported QueueStatus table only when it changes, so MQTT subscribers of
// `queue_status/#` wake at once and are not woken for nothing. The state lives on a NodeControl built in
// resources.ts (the composition root), which hands it to the keeper and the routes.
import type { DutyScheduler } from '../../util/duties/scheduler.js';
import { HttpError } from '../runtime/httpError.js';
import { echo } from '../../util/text.js';
import { log, table, transaction } from '../runtime/harper.js';
import { TableFollower, type TableSubscription } from '../runtime/tableFollower.js';
import { nodeName } from '../cluster/nodeName.js';
import { withStoreLock } from '../runtime/storeLock.js';

export type NodeStatus = 'empty' | 'queued' | 'paused' | 'unready';

/** How long a status write waits for another writer of the same row (one put: milliseconds). */
const STATUS_LOCK_WAIT_MS = 5000;

/** A closed or failed QueueControl subscription is opened again after this wait. */
export const CONTROL_RESUBSCRIBE_MS = 5000;

function controlTable() {
  return table('render_queue', 'QueueControl');
}
function statusTable() {
  return table('render_queue', 'QueueStatus');
}

export interface ServingView {
  /** The keeper signal says claims may be served (live, loading, or a stale set still draining). */
  serving: boolean;
  /** Due rows the keeper last reported (in flight included). */
  due: number;
  /** The load is complete, so "nothing due" is the truth and not a partial view. */
  complete: boolean;
}

/** The tri-state rule for a node, with pause on top. */
export function deriveStatus(v: ServingView, paused: boolean): NodeStatus {
  if (paused) return 'paused';
  if (!v.serving) return 'unready';
  if (v.due > 0) return 'queued';
  return v.complete ? 'empty' : 'unready';
}

/**
 * The scope of a pause or resume, a string the document's PauseScope has bounded: `all` or the name of
 * a node of the cluster (this node or a peer in system.hdb_nodes). Anything else is 400 `invalid_scope`,
 * so a pause can never be filed for a host that does not exist — and no caller can grow QueueControl one
 * row per string.
 */
export async function checkPauseScope(scope: string, peerNames: () => Promise<string[]>): Promise<string> {
  if (scope === 'all' || scope === nodeName()) return scope;
  if ((await peerNames()).includes(scope)) return scope;
  throw new HttpError(
    400,
    'invalid_scope',
    `scope ${echo(scope)} names no node of this cluster; use "all" or a node's hostname`,
  );
}

type ControlEvent = { type: string; id: string; value?: { paused?: unknown } };

export interface NodeControlDeps {
  /** Runs the resubscribe duty. */
  scheduler: DutyScheduler;
  /** The cluster's other nodes (a pause may name one). */
  peerNames: () => Promise<string[]>;
  /** The host fleets dial (services/cluster/nodeName.ts advertisedHost), named in the status row. */
  advertisedHost: () => string;
}

/**
 * Pause intent as this worker follows it (a subscription to QueueControl, reopened
 * CONTROL_RESUBSCRIBE_MS after it closes), and the node status row worker 0 writes.
 */
export class NodeControl {
  // Keyed by scope, which is `all` or a node name (checkPauseScope): the map and the table are bounded by
  // the cluster's size, never by what callers send.
  private readonly pauses = new Map<string, boolean>();
  private readonly listeners: Array<() => void> = [];
  private loaded = false;
  private readonly follower: TableFollower<ControlEvent>;

  constructor(private readonly deps: NodeControlDeps) {
    this.follower = new TableFollower<ControlEvent>({
      name: 'QueueControl',
      scheduler: deps.scheduler,
      retryMs: CONTROL_RESUBSCRIBE_MS,
      reload: () => this.load(),
      subscribe: async () =>
        (await controlTable().subscribe({ omitCurrent: true })) as TableSubscription<ControlEvent>,
      onEvent: (ev) => {
        if (ev.type === 'delete') this.pauses.delete(ev.id);
        else if (ev.value) this.pauses.set(ev.id, ev.value.paused === true);
        this.changed();
      },
      log,
    });
  }

  /** checkPauseScope over this node's peers. */
  checkScope(scope: string): Promise<string> {
    return checkPauseScope(scope, this.deps.peerNames);
  }

  isPaused(): boolean {
    return this.pauses.get('all') === true || this.pauses.get(nodeName()) === true;
  }

  /**
   * True once this worker has read QueueControl. Until then a pause made before it started is unknown
   * here: Harper routes requests to a worker whose start() is still running, and a worker 0 that
   * overlaps its predecessor would otherwise hand out the draining set of a paused queue.
   */
  pauseKnown(): boolean {
    return this.loaded;
  }

  /** Runs `fn` after each QueueControl change on this worker (worker 0 writes the status); answers the unsubscribe. */
  onChange(fn: () => void): () => void {
    this.listeners.push(fn);
    return () => {
      const i = this.listeners.indexOf(fn);
      if (i >= 0) this.listeners.splice(i, 1);
    };
  }

  /**
   * Follows QueueControl on this worker. Every worker starts it before it serves a claim — worker 0
   * included, before it waits for the keeper's leader slot — so a worker 0 that overlaps its
   * predecessor never hands out the draining set of a paused queue.
   */
  async start(): Promise<void> {
    await this.follower.start();
  }

  /** Closes the subscription and stops the resubscribe duty. */
  async stop(): Promise<void> {
    await this.follower.stop();
  }

  /** Reads every scope afresh: after a gap in the subscription, a resume made meanwhile is seen too. */
  private async load(): Promise<void> {
    const read = new Map<string, boolean>();
    for await (const row of controlTable().search({})) {
      if (typeof row.id === 'string') read.set(row.id, row.paused === true);
    }
    this.pauses.clear();
    for (const [scope, paused] of read) this.pauses.set(scope, paused);
    const again = this.loaded;
    this.loaded = true;
    if (again) this.changed();
  }

  private changed(): void {
    for (const fn of this.listeners) {
      try {
        fn();
      } catch (e) {
        log.error('QueueControl listener failed', e);
      }
    }
  }

  /**
   * Records operator intent; returns the new pause state for the scope. A resume deletes the scope's row
   * (absent means not paused), so the table holds only scopes paused now. Resuming `all` deletes every
   * row, the hostnames' too: "resume all nodes" leaves no node paused by an earlier pause of its own.
   */
  async setPause(scope: string, paused: boolean): Promise<boolean> {
    const resumed = !paused && scope === 'all' ? await this.storedScopes() : paused ? [] : [scope];
    await transaction(async (txn) => {
      if (paused) await controlTable().put(scope, { id: scope, paused, updatedAt: Date.now() }, txn);
      for (const s of resumed) await controlTable().delete(s, txn);
    });
    if (paused) this.pauses.set(scope, true);
    for (const s of resumed) this.pauses.delete(s);
    return paused;
  }

  /** Every scope with a row now (`all` among them whether or not it has one). */
  private async storedScopes(): Promise<string[]> {
    const scopes = new Set<string>(['all']);
    for await (const row of controlTable().search({})) if (typeof row.id === 'string') scopes.add(row.id);
    return [...scopes];
  }

  /**
   * Writes this node's status row when it differs from the row stored (only changes are written,
   * so MQTT subscribers are not woken twice for one change). The read and the write run under the row's
   * store lock: a pause answered on one worker and worker 0's reaction to the same control change
   * cannot both write it. True when written.
   */
  async publishStatus(next: NodeStatus): Promise<boolean> {
    const host = nodeName();
    // Fleets dial the message's hostname (docs/prerender-fleet.md): the host of the advertised origin.
    // The row, the topic and the pause scope stay the node's name, which `node` names when they differ.
    const hostname = this.deps.advertisedHost();
    const store = statusTable().primaryStore;
    const r = await withStoreLock(store, 'status', host, STATUS_LOCK_WAIT_MS, async () => {
      const row = store.get(host) as { status?: unknown; hostname?: unknown } | undefined;
      if (row?.status === next && row.hostname === hostname) return false;
      await transaction(async (txn) => {
        await statusTable().put(
          host,
          {
            id: host,
            hostname,
            ...(hostname !== host ? { node: host } : {}),
            status: next,
            updatedTime: Date.now(),
          },
          txn,
        );
      });
      return true;
    });
    if (!r.locked) {
      log.warn(
        `status: the ${host} status row stayed locked for ${STATUS_LOCK_WAIT_MS} ms; ${next} not written`,
      );
      return false;
    }
    return r.value;
  }
}
