// Cluster membership for row ownership (SPEC §9), and the only module that names QueueNode. Configured
// peers are the nodes Harper replicates with (`system.hdb_nodes`, written by add_node / remove_node);
// a peer is *present* while its heartbeat in the replicated QueueNode table is fresh. Worker 0 of each
// node beats every max(1 s, publishInterval) with the node list its keeper holds rows by, and the keeper
// holds a row only as util/cluster/holding.ts decides: owned under its own view, and claimed by no
// present peer's published view. A node alone owns every row.
import { HoldingView, beatStaleAfterMs, presentPeers, type NodeBeat } from '../../util/cluster/holding.js';
import type { Ownership } from '../../util/cluster/ownership.js';
import { config } from '../runtime/config.js';
import { log, table, transaction } from '../runtime/harper.js';
import { nodeName } from './nodeName.js';

const nodeTable = () => table('render_queue', 'QueueNode');

/** Beats at most once a second: a replicated write per beat per node, for a 15 s departure window. */
const MIN_BEAT_MS = 1000;
/** A failing beat write is logged at most this often (a down store fails every beat). */
const BEAT_WARN_EVERY_MS = 60_000;

let warnedNodes = false;

/** The replication peers' names (never this node); [] when not clustered or unreadable. */
export async function peerNames(): Promise<string[]> {
  let nodes;
  try {
    nodes = table('system', 'hdb_nodes');
  } catch {
    return [];
  }
  const self = nodeName();
  const names: string[] = [];
  try {
    for await (const r of nodes.search({})) {
      const name = r.name ?? r.hostname ?? r.id;
      if (typeof name === 'string' && name.length > 0 && name !== self) names.push(name);
    }
  } catch (e) {
    if (!warnedNodes) log.warn('could not read system.hdb_nodes; treating this node as alone', e);
    warnedNodes = true;
    return [];
  }
  return names;
}

export interface MembershipDeps {
  self: () => string;
  configuredPeers: () => Promise<string[]>;
  readBeats: () => Promise<NodeBeat[]>;
  writeBeat: (beat: NodeBeat & { startedAt: number }) => Promise<void>;
  now: () => number;
  beatIntervalMs: () => number;
  log: { warn(...a: unknown[]): void; info(...a: unknown[]): void };
}

export interface PeerPresence {
  configured: string[];
  present: NodeBeat[];
  missing: string[];
}

/** One node's membership: its heartbeat, and the holding view its keeper uses. */
export class ClusterMembership {
  /** The view last handed to the keeper; beats publish it. Null until the keeper has one. */
  private applied: readonly string[] | null = null;
  private timer: NodeJS.Timeout | null = null;
  private readonly startedAt: number;
  private lastWarnAt = -Infinity;

  constructor(private readonly deps: MembershipDeps) {
    this.startedAt = deps.now();
  }

  /** Starts beating (idempotent). The first beat goes out at once. */
  start(): void {
    if (this.timer) return;
    const loop = (): void => {
      void this.beatOnce(this.deps.now()).finally(() => {
        if (!this.timer) return;
        this.timer = setTimeout(loop, Math.max(MIN_BEAT_MS, this.deps.beatIntervalMs()));
        this.timer.unref?.();
      });
    };
    this.timer = setTimeout(loop, 0);
    this.timer.unref?.();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  async beatOnce(now: number): Promise<boolean> {
    try {
      await this.deps.writeBeat({
        node: this.deps.self(),
        beatAt: now,
        view: this.applied,
        startedAt: this.startedAt,
      });
      return true;
    } catch (e) {
      if (now - this.lastWarnAt >= BEAT_WARN_EVERY_MS) {
        this.lastWarnAt = now;
        this.deps.log.warn('cluster heartbeat write failed; peers will count this node as gone', e);
      }
      return false;
    }
  }

  staleAfterMs(): number {
    return beatStaleAfterMs(Math.max(MIN_BEAT_MS, this.deps.beatIntervalMs()));
  }

  /** The configured peers, which of them beat recently, and which did not. */
  async presence(now = this.deps.now()): Promise<PeerPresence> {
    const self = this.deps.self();
    const configured = await this.deps.configuredPeers();
    const present = presentPeers(self, configured, await this.deps.readBeats(), now, this.staleAfterMs());
    const seen = new Set(present.map((b) => b.node));
    return { configured, present, missing: configured.filter((n) => !seen.has(n)) };
  }

  /**
   * The holding view now. The caller (the keeper) applies it at once — drops what it no longer holds
   * before anything else runs — so the next beat may publish it as applied.
   */
  async currentOwnership(): Promise<HoldingView> {
    this.start();
    const { present } = await this.presence();
    const view = new HoldingView(this.deps.self(), present);
    this.applied = view.nodes;
    return view;
  }
}

function toBeat(r: Record<string, unknown>): NodeBeat | null {
  if (typeof r.id !== 'string' || typeof r.beatAt !== 'number') return null;
  const view = Array.isArray(r.view) ? r.view.filter((n): n is string => typeof n === 'string') : null;
  return { node: r.id, beatAt: r.beatAt, view };
}

// process-wide: worker 0's one membership (its beat timer and the view its keeper holds by). The keeper
// asks through currentOwnership(); the peer wait (services/cluster/peerWait.ts) shares the same beats.
let processWideMembership: ClusterMembership | undefined;

export function membership(): ClusterMembership {
  processWideMembership ??= new ClusterMembership({
    self: nodeName,
    configuredPeers: peerNames,
    readBeats: async () => {
      const beats: NodeBeat[] = [];
      for await (const r of nodeTable().search({})) {
        const b = toBeat(r);
        if (b) beats.push(b);
      }
      return beats;
    },
    writeBeat: (b) =>
      transaction(async (txn) => {
        await nodeTable().put(
          b.node,
          { id: b.node, view: b.view ? [...b.view] : null, beatAt: b.beatAt, startedAt: b.startedAt },
          txn,
        );
      }),
    now: () => Date.now(),
    beatIntervalMs: () => config().queue.keeper.publishInterval,
    log,
  });
  return processWideMembership;
}

export async function currentOwnership(): Promise<Ownership> {
  return membership().currentOwnership();
}
