// Node status (SPEC §3): empty | queued | paused | unready. Pause is operator intent in the replicated
// QueueControl table (`all` or a hostname), cached on every worker by a subscription. The derived status
// is written to the exported QueueStatus table only when it changes, so MQTT subscribers of
// `queue_status/#` wake at once and are not woken for nothing.
import { HttpError, echo } from '../../util/http/errors.js';
import { log, table, transaction } from '../runtime/harper.js';
import { peerNames } from '../cluster/membership.js';
import { nodeName } from '../cluster/nodeName.js';

export type NodeStatus = 'empty' | 'queued' | 'paused' | 'unready';

// Keyed by scope, which is `all` or a node name (checkPauseScope): the map and the table are bounded by
// the cluster's size, never by what callers send.
const pauses = new Map<string, boolean>();
let lastWritten: NodeStatus | undefined;
let controlStarted = false;

function controlTable() {
  return table('render_queue', 'QueueControl');
}
function statusTable() {
  return table('render_queue', 'QueueStatus');
}

export function isPaused(): boolean {
  return pauses.get('all') === true || pauses.get(nodeName()) === true;
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
export function deriveStatus(v: ServingView, paused = isPaused()): NodeStatus {
  if (paused) return 'paused';
  if (!v.serving) return 'unready';
  if (v.due > 0) return 'queued';
  return v.complete ? 'empty' : 'unready';
}

async function loadControl(): Promise<void> {
  for await (const row of controlTable().search({})) {
    if (typeof row.id === 'string') pauses.set(row.id, row.paused === true);
  }
}

const controlListeners: Array<() => void> = [];

/** Runs `fn` after each QueueControl change on this worker (worker 0 writes the status). */
export function onControlChange(fn: () => void): void {
  controlListeners.push(fn);
}

function controlChanged(): void {
  for (const fn of controlListeners) {
    try {
      fn();
    } catch (e) {
      log.error('QueueControl listener failed', e);
    }
  }
}

/**
 * Follows QueueControl on this worker. Every worker starts it before it serves a claim — worker 0
 * included, before it waits for the keeper's leader slot — so a worker 0 that overlaps its
 * predecessor never hands out the draining set of a paused queue.
 */
export async function startControl(): Promise<void> {
  if (controlStarted) return;
  controlStarted = true;
  await loadControl();
  void (async () => {
    for (;;) {
      try {
        const sub = await controlTable().subscribe({ omitCurrent: true });
        for await (const ev of sub) {
          if (ev.type === 'delete') pauses.delete(ev.id);
          else if (ev.value) pauses.set(ev.id, ev.value.paused === true);
          controlChanged();
        }
      } catch (e) {
        log.error('QueueControl subscription failed; retrying in 5 s', e);
      }
      await new Promise((r) => setTimeout(r, 5000));
      await loadControl().catch(() => undefined);
    }
  })();
}

/**
 * The scope of a pause or resume (API.md): required, `all` or the name of a node of the cluster (this
 * node or a peer in system.hdb_nodes). Anything else is 400 `invalid_scope`, so a pause can never be
 * filed for a host that does not exist — and no caller can grow QueueControl one row per string.
 */
export async function checkPauseScope(scope: unknown): Promise<string> {
  if (scope === undefined || scope === null)
    throw new HttpError(400, 'invalid_scope', 'scope is required: "all" or the hostname of a node');
  if (typeof scope !== 'string' || scope.length === 0 || scope.length > 253)
    throw new HttpError(400, 'invalid_scope', 'scope must be "all" or the hostname of a node');
  if (scope === 'all' || scope === nodeName()) return scope;
  if ((await peerNames()).includes(scope)) return scope;
  throw new HttpError(
    400,
    'invalid_scope',
    `scope ${echo(scope)} names no node of this cluster; use "all" or a node's hostname`,
  );
}

/**
 * Records operator intent; returns the new pause state for the scope. A resume deletes the scope's row
 * (absent means not paused), so the table holds only scopes paused now.
 */
export async function setPause(scope: string, paused: boolean): Promise<boolean> {
  await transaction(async (txn) => {
    if (paused) await controlTable().put(scope, { id: scope, paused, updatedAt: Date.now() }, txn);
    else await controlTable().delete(scope, txn);
  });
  if (paused) pauses.set(scope, true);
  else pauses.delete(scope);
  return paused;
}

/** Test view: how many scopes this worker holds. */
export function pauseScopesHeld(): number {
  return pauses.size;
}

export function currentStatusWritten(): NodeStatus | undefined {
  return lastWritten;
}

/**
 * Writes this node's status row when it differs from the last one written. An unforced update never
 * moves the node off `paused`; only a resume (forced) does.
 */
export async function publishStatus(next: NodeStatus, force = false): Promise<boolean> {
  if (lastWritten === undefined) {
    const row = await statusTable().get(nodeName());
    lastWritten = (row?.status as NodeStatus | undefined) ?? undefined;
  }
  if (!force && lastWritten === 'paused' && isPaused()) return false;
  if (next === lastWritten && !force) return false;
  const host = nodeName();
  lastWritten = next;
  await transaction(async (txn) => {
    await statusTable().put(host, { id: host, hostname: host, status: next, updatedTime: Date.now() }, txn);
  });
  return true;
}
