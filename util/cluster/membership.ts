// Cluster membership for row ownership (docs/clusters.md), pure: the replication peers as Harper lists them,
// and one node's heartbeat plus the holding view its keeper uses. A peer is *present* while its heartbeat is
// fresh (util/cluster/holding.ts), and leaves sooner when the replication connection is also reported down
// (util/cluster/connections.ts). The heartbeat is a duty on the scheduler it is given. The Harper side
// (tables, the QueueNode rows, the config) is services/cluster/membership.ts.
import type { Counts, DutyHandle, DutyScheduler } from '../duties/scheduler.js';
import type { HandoffLease } from './handoff.js';
import {
  BeatClock,
  HoldingView,
  absenceOf,
  beatStaleAfterMs,
  presentPeers,
  type Absence,
  type NodeBeat,
} from './holding.js';

/** Beats at most once a second: a replicated write per beat per node, for a 15 s departure window. */
export const MIN_BEAT_MS = 1000;

/** How often worker 0 beats (and the keeper re-reads the membership): max(1 s, publishInterval). */
export function beatEveryMs(publishInterval: number): number {
  return Math.max(MIN_BEAT_MS, publishInterval);
}
/**
 * A view that gives rows away (a node joined or came back) is published this long after this node
 * applied it. Applying it dropped the rows and republished the ready set at once, but a claim already
 * taking one of them may still grant it; the view that lets the newcomer take the row must come after
 * that grant, so the beat carrying it also hands the lease over (util/cluster/handoff.ts). A view that
 * only gains rows (a peer left) is published at once.
 */
export const PUBLISH_SETTLE_MS = 2000;
/**
 * A view that gives rows away waits for the keeper's drop (viewApplied) at most this long: the drop runs
 * in slices that yield (about a second of worker 0's time per million rows held), and a keeper that
 * failed to report it must not keep the view from its peers for good.
 */
export const DROP_WAIT_CAP_MS = 60_000;
/** A failing beat write is logged at most this often (a down store fails every beat). */
const BEAT_WARN_EVERY_MS = 60_000;

export interface ReplicationPeersDeps {
  self: () => string;
  /** The rows of system.hdb_nodes; throws when the table is missing or unreadable. */
  nodes: () => AsyncIterable<Record<string, unknown>>;
  log: { warn(...a: unknown[]): void };
}

/** The replication peers as Harper lists them (system.hdb_nodes). One per worker. */
export class ReplicationPeers {
  /** An unreadable node table is said once per worker, not at every beat. */
  private warned = false;

  constructor(private readonly deps: ReplicationPeersDeps) {}

  /** The replication peers' names (never this node); [] when not clustered or unreadable. */
  async names(): Promise<string[]> {
    const self = this.deps.self();
    const names: string[] = [];
    try {
      for await (const r of this.deps.nodes()) {
        const name = r.name ?? r.hostname ?? r.id;
        if (typeof name === 'string' && name.length > 0 && name !== self) names.push(name);
      }
    } catch (e) {
      if (!this.warned) this.deps.log.warn('could not read system.hdb_nodes; treating this node as alone', e);
      this.warned = true;
      return [];
    }
    return names;
  }
}

/** What the membership knows of a peer's replication connection (services/cluster/connections.ts). */
export interface ConnectionView {
  /** Peer name -> since when (this node's clock) every look found its connection down. */
  downSince(now: number): Promise<ReadonlyMap<string, number>>;
}

export interface MembershipDeps {
  self: () => string;
  configuredPeers: () => Promise<string[]>;
  readBeats: () => Promise<NodeBeat[]>;
  /**
   * Writes this node's beat row. `keepHandoff`: the list is not known (the keeper has no view yet, or
   * listing failed), so the row keeps the list it has rather than losing it.
   */
  writeBeat: (beat: NodeBeat & { startedAt: number; keepHandoff?: boolean }) => Promise<void>;
  /**
   * When this process started (ms). A beat row of this node written since then came from an earlier
   * worker 0 of this process (Harper restarted the thread): its view is what claims on the other
   * workers may still be granting by, so the first view here settles against it.
   */
  processStartedAt?: number;
  now: () => number;
  beatIntervalMs: () => number;
  /** Runs the heartbeat. */
  scheduler: DutyScheduler;
  /** The second departure signal; without it only the heartbeat window counts. */
  connections?: ConnectionView;
  /**
   * The leases a beat at `now` hands over (worker 0's keeper; none when absent); `newView` when this
   * beat publishes a view the last one did not (its list must come from a scan that starts now, after
   * the settle). Null while the keeper has no view yet: the row keeps the list it has.
   */
  handoff?: (
    now: number,
    newView: boolean,
  ) => readonly HandoffLease[] | null | Promise<readonly HandoffLease[] | null>;
  log: { warn(...a: unknown[]): void; info(...a: unknown[]): void };
}

/** Why a peer that was present left: one of the two windows, or Harper no longer lists it. */
export type Departure = (Absence | { kind: 'unconfigured' } | { kind: 'no-beat' }) & { at: number };

export interface PeerPresence {
  configured: string[];
  present: NodeBeat[];
  missing: string[];
}

/** One node's membership: its heartbeat, and the holding view its keeper uses. */
export class ClusterMembership {
  /**
   * The view last handed to the keeper, and from when its beats may publish it. `settleFrom`: a view that
   * gives rows away waits for the keeper's drop (viewApplied), then a settle, and never less than this.
   */
  private applied: { nodes: readonly string[]; publishFrom: number; settleFrom?: number } | null = null;
  /** The view beats publish: the applied one once it settled. Null until the keeper has one. */
  private published: readonly string[] | null = null;
  private beat: DutyHandle | null = null;
  /** The view the last beat published (joined), to tell the handoff when a beat publishes a new one. */
  private lastBeatView: string | null | undefined = undefined;
  /** Whether presence() has looked at the beats yet (the first look reads this node's own row). */
  private looked = false;
  private readonly startedAt: number;
  private lastWarnAt = -Infinity;
  /** The peers present at the last look (a departure is a peer in here that is no longer present). */
  private wasPresent = new Set<string>();
  private readonly lastDepartures = new Map<string, Departure>();
  /** When this node heard each peer's beat: a beat's age counts from then (util/cluster/holding.ts). */
  private readonly beatClock = new BeatClock();

  constructor(private readonly deps: MembershipDeps) {
    this.startedAt = deps.now();
  }

  /** Starts beating (idempotent). The first beat goes out at once, then every max(1 s, publishInterval). */
  start(): void {
    if (this.beat) return;
    this.beat = this.deps.scheduler.add(
      {
        name: 'cluster heartbeat',
        runOnce: async (now): Promise<Counts> => ((await this.beatOnce(now)) ? {} : { failed: 1 }),
      },
      { next: (_now, last) => (last ? this.beatEveryMs() : 0) },
    );
  }

  async stop(): Promise<void> {
    const b = this.beat;
    this.beat = null;
    await b?.stop();
  }

  async beatOnce(now: number): Promise<boolean> {
    try {
      // The first look comes before the first write: this beat would otherwise overwrite the row an
      // earlier worker 0 of this process left (adoptEarlierWorkersView) before anything read it.
      if (!this.looked) {
        const self = this.deps.self();
        let own: NodeBeat | undefined;
        try {
          own = (await this.deps.readBeats()).find((b) => b.node === self);
        } catch (e) {
          // Beats matter more: without them the peers count this node gone.
          this.deps.log.warn(
            "cluster heartbeat: could not read this node's own beat row; beating without it",
            e,
          );
        }
        if (!this.looked) this.adoptEarlierWorkersView(own);
      }
      const view = this.publishedView(now);
      const viewText = view?.join(',') ?? null;
      const newView = viewText !== this.lastBeatView;
      this.lastBeatView = viewText;
      let handoff: readonly HandoffLease[] | null = [];
      try {
        handoff = this.deps.handoff ? await this.deps.handoff(now, newView) : [];
      } catch (e) {
        // The beat itself matters more than the list: without beats the peers count this node gone.
        handoff = null;
        this.deps.log.warn(
          'cluster heartbeat: could not list the leases to hand over; beating with the list the row has',
          e,
        );
      }
      await this.deps.writeBeat({
        node: this.deps.self(),
        beatAt: now,
        view,
        startedAt: this.startedAt,
        ...(handoff === null ? { keepHandoff: true } : handoff.length > 0 ? { handoff } : {}),
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

  private beatEveryMs(): number {
    return beatEveryMs(this.deps.beatIntervalMs());
  }

  staleAfterMs(): number {
    return beatStaleAfterMs(this.beatEveryMs());
  }

  /** The configured peers, which of them beat recently, and which did not. */
  async presence(now = this.deps.now()): Promise<PeerPresence> {
    const self = this.deps.self();
    const configured = await this.deps.configuredPeers();
    const read = await this.deps.readBeats();
    // Alone (no configured peers) there is no connection to watch: cluster_status is not asked (on a
    // Harper without replication every look fails, and would warn once a minute for nothing).
    const connection =
      this.deps.connections && configured.length > 0
        ? { downSince: await this.deps.connections.downSince(now), beatEveryMs: this.beatEveryMs() }
        : undefined;
    if (!this.looked) this.adoptEarlierWorkersView(read.find((b) => b.node === self));
    const beats = this.beatClock.read(read, now);
    const present = presentPeers(self, configured, beats, now, this.staleAfterMs(), connection);
    const seen = new Set(present.map((b) => b.node));
    for (const node of this.wasPresent) {
      if (seen.has(node)) continue;
      const beat = beats.find((b) => b.node === node);
      const why: Absence | { kind: 'unconfigured' } | { kind: 'no-beat' } = !configured.includes(node)
        ? { kind: 'unconfigured' }
        : !beat
          ? { kind: 'no-beat' }
          : (absenceOf(beat, now, this.staleAfterMs(), connection) ?? { kind: 'no-beat' });
      this.lastDepartures.set(node, { ...why, at: now });
      this.deps.log.info(`cluster: ${node} left (${why.kind}): ${describe(why, this.staleAfterMs())}`);
    }
    this.wasPresent = seen;
    return { configured, present, missing: configured.filter((n) => !seen.has(n)) };
  }

  /** The last departure of each peer that left since this membership started, and why. */
  departures(): ReadonlyMap<string, Departure> {
    return this.lastDepartures;
  }

  /**
   * The holding view now. The caller (the keeper) applies it: drops what it no longer holds, in slices,
   * then says so (viewApplied). Beats publish it at once when it only adds rows; when it gives rows away,
   * PUBLISH_SETTLE_MS after the keeper's drop ended (at most DROP_WAIT_CAP_MS after the change).
   */
  async currentOwnership(): Promise<HoldingView> {
    this.start();
    const now = this.deps.now();
    const { present } = await this.presence(now);
    const view = new HoldingView(this.deps.self(), present);
    const was = this.applied;
    if (was === null || was.nodes.join(',') !== view.nodes.join(',')) {
      // A node in the new list that the old one lacked takes some of this node's rows. A change during
      // another's settle waits for that one too: the rows the first gave away are given away by this one.
      const givesAway = was !== null && view.nodes.some((n) => !was.nodes.includes(n));
      const floor = Math.max(givesAway ? now + PUBLISH_SETTLE_MS : now, was?.publishFrom ?? -Infinity);
      this.applied = givesAway
        ? { nodes: view.nodes, publishFrom: Math.max(floor, now + DROP_WAIT_CAP_MS), settleFrom: floor }
        : { nodes: view.nodes, publishFrom: floor };
    }
    this.publishedView(now);
    return view;
  }

  /**
   * The keeper dropped the rows the view over `nodes` gives away and published without them, at `at`:
   * claims on this node no longer take them after a settle, so the view may go out then. A report for a
   * view that is no longer the applied one (a later change came first) changes nothing.
   */
  viewApplied(nodes: readonly string[], at: number): void {
    const a = this.applied;
    if (a?.settleFrom === undefined || a.nodes.join(',') !== nodes.join(',')) return;
    this.applied = { nodes: a.nodes, publishFrom: Math.max(a.settleFrom, at + PUBLISH_SETTLE_MS) };
  }

  /**
   * On the first look: a beat row of this node written since this process started came from an earlier
   * worker 0 of this process (Harper restarted the thread). Its view is the applied one — the other
   * workers' claims may still grant by the ready set it left — so beats go on publishing it, and a first
   * view here that gives rows away settles against it as any change does. A row from before this
   * process (a restart of the node) holds nothing now: the first view goes out at once, as it did.
   */
  private adoptEarlierWorkersView(own: NodeBeat | undefined): void {
    this.looked = true;
    const since = this.deps.processStartedAt;
    if (since === undefined || !own || own.view === null || own.beatAt < since || this.applied !== null)
      return;
    this.applied = { nodes: own.view, publishFrom: -Infinity };
    this.published = own.view;
    this.lastBeatView = own.view.join(',');
    this.deps.log.info(
      `cluster: carrying on the view ${own.view.join(', ')} an earlier worker of this process published`,
    );
  }

  /** The view a beat at `now` publishes (the applied one once it settled, else the one before). */
  private publishedView(now: number): readonly string[] | null {
    if (this.applied !== null && now >= this.applied.publishFrom) this.published = this.applied.nodes;
    return this.published;
  }
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

function describe(
  why: Absence | { kind: 'unconfigured' } | { kind: 'no-beat' },
  staleAfterMs: number,
): string {
  switch (why.kind) {
    case 'heartbeat':
      return `no new beat heard for ${seconds(why.beatAgeMs)} (heartbeat window ${seconds(staleAfterMs)})`;
    case 'connection':
      return (
        `cluster_status has reported its replication socket down for ${seconds(why.downForMs)} ` +
        `and no new beat heard for ${seconds(why.beatAgeMs)}`
      );
    case 'unconfigured':
      return 'it is no longer in system.hdb_nodes';
    case 'no-beat':
      return 'its heartbeat row is gone';
  }
}
