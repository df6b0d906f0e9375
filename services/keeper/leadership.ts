// Runs the keeper on worker 0: leadership (a briefly overlapping second worker 0 waits), the cluster
// ownership it holds rows by, the status sync and membership duties, and the held-row asks other
// workers send to worker 0. The lifecycle and its timers are KeeperService (service.ts, duties.ts), which
// resources.ts (the composition root) builds through the `keeper` factory it hands in here, once this
// worker holds the leader slot; one KeeperLeadership per worker is built there too.
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { every, type Counts, type DutyScheduler } from '../../util/duties/scheduler.js';
import type { HeldDescription } from '../../util/keeper/core.js';
import { nameHash, randomWord } from '../../util/leases/token.js';
import type { LeaseTable } from '../../util/leases/table.js';
import { threadId } from 'node:worker_threads';
import type { OwnershipView } from '../../util/cluster/ownership.js';
import type { HoldingView } from '../../util/cluster/holding.js';
import { beatEveryMs } from '../../util/cluster/membership.js';
import {
  HANDOFF_MARGIN_MS,
  HandoffLedger,
  RELEASED_HANDOFF_MS,
  type HandoffLease,
} from '../../util/cluster/handoff.js';
import { fromSharedSeconds, sharedSecondsAtOrBefore } from '../../util/time.js';
import { leaderIdFor, type KeeperSignal } from '../../util/sharedMemory/keeperSignal.js';
import { log, threads, workerIndex } from '../runtime/harper.js';
import type { KeeperService } from './service.js';
import type { KeeperDeps } from './deps.js';
import type { NodeControl, NodeStatus } from '../status/control.js';
import type { RepairRound } from '../../util/cluster/repair.js';
import { SettledWalkPlan } from '../../util/cluster/settledWalk.js';

const HELD_ASK = 'queue-keeper:held-ask';
const HELD_REPLY = 'queue-keeper:held-reply';
const HELD_ASK_TIMEOUT_MS = 1000;
/** A worker 0 that finds the leader slot held looks again this often. */
const LEADERSHIP_WAIT_MS = 1000;
/** The pause between a sliced lease reconcile's slices: one turn of the event loop. */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
/** Listed handed-over leases checked for a result between two turns of worker 0's loop. */
const REPORT_CHECK_SLICE = 4096;

/**
 * What only leadership knows when the keeper is built, handed to the `keeper` factory: which rows this
 * node holds, whether it still holds the leader slot, what follows each publish tick (the requeued pass
 * and the status sync) and what precedes each state document (the lease reconcile).
 */
export type KeeperSeat = Required<
  Pick<KeeperDeps, 'owns' | 'ownedShare' | 'holdLeadership' | 'afterPublish' | 'beforeState'>
>;

export interface KeeperLeadershipDeps {
  scheduler: DutyScheduler;
  config: () => QueueKeeperConfig;
  control: Pick<NodeControl, 'publishStatus' | 'onChange'>;
  /** Builds the keeper service (resources.ts wires every other dependency). */
  keeper: (seat: KeeperSeat) => KeeperService;
  /** Leases of `queue` expired unreported since the last tick (notify's `requeued` wakes). */
  onRequeued: (queue: string, now: number) => void;
  /** Listens for the claim path's "the set ran dry" poke from any worker; answers the undo. */
  onPoke: (fn: () => void) => () => void;
  /** A one-shot wait (the held ask's timeout). */
  sleep: (ms: number) => Promise<void>;
  /** The node's keeper signal (the leader slot) and lease table (getters: sized at first use). */
  signal: () => KeeperSignal;
  leases: () => LeaseTable;
  /** This node's status at an instant (services/keeper/servingView.ts), for the status sync. */
  nodeStatus: (now: number) => NodeStatus;
  /** `queue.keeper.publishInterval`: the leader slot's staleness, and the beat. */
  publishInterval: () => number;
  /** `maintenance.tickInterval`: the membership re-read's ceiling and the handed-over leases' pace. */
  tickInterval: () => number;
  /**
   * The cluster membership the keeper holds rows by (services/cluster), re-read every beat
   * (max(1 s, publishInterval)) or every maintenance tick when that is shorter.
   */
  currentOwnership: () => Promise<OwnershipView & Partial<Pick<HoldingView, 'handedOver' | 'settling'>>>;
  /**
   * The keeper dropped what the view over `nodes` gives away and published without it, at `at`: the view
   * may be published a settle later (util/cluster/membership.ts `viewApplied`).
   */
  viewApplied?: (nodes: readonly string[], at: number) => void;
  /**
   * Replica repair (services/cluster/repair.ts): a step every beat while clustered, over the nodes the
   * keeper holds rows by; its last round shows in queue-state `trust.keeper.lastRepair`.
   */
  repair?: { step(now: number, nodes: readonly string[]): Promise<void>; readonly last: RepairRound | null };
}

export class KeeperLeadership {
  private service: KeeperService | undefined;
  private ownership: OwnershipView | undefined;
  /** The leases this node hands over with rows it no longer holds (util/cluster/handoff.ts). */
  private readonly handoff = new HandoffLedger();
  /** The walk owed once a membership change has settled (util/cluster/settledWalk.ts). */
  private readonly settled = new SettledWalkPlan();
  /** When handed-over leases were last recorded (at every change, else once a tick). */
  private lastAdoptAt = -Infinity;
  private readonly heldAsks = new Map<number, (held: HeldDescription | null) => void>();
  private heldAskSeq = 0;
  private heldListening = false;
  private stopped = false;
  private readonly undo: Array<() => void> = [];

  constructor(private readonly deps: KeeperLeadershipDeps) {}

  /** The keeper service on this worker (undefined off worker 0, and before it holds leadership). */
  keeper(): KeeperService | undefined {
    return this.service;
  }

  /** The cluster membership the keeper holds rows by (undefined before the keeper starts). */
  clusterOwnership(): OwnershipView | undefined {
    return this.ownership;
  }

  /** Every worker: worker 0 answers held asks, the others listen for the replies. */
  listenForHeldAsks(): void {
    if (this.heldListening) return;
    this.heldListening = true;
    if (workerIndex() === 0) {
      threads().onMessageByType?.(HELD_ASK, (msg: { id?: unknown; url?: unknown; now?: unknown }, port) => {
        if (typeof msg.url !== 'string' || typeof msg.now !== 'number') return;
        const held = this.service?.core.describe(msg.url, msg.now) ?? null;
        port?.postMessage({ type: HELD_REPLY, id: msg.id, held });
      });
    } else {
      threads().onMessageByType?.(HELD_REPLY, (msg: { id?: unknown; held?: HeldDescription | null }) => {
        if (typeof msg.id !== 'number') return;
        this.heldAsks.get(msg.id)?.(msg.held ?? null);
        this.heldAsks.delete(msg.id);
      });
    }
  }

  /**
   * What the keeper holds for a URL. The keeper lives on worker 0; any other worker asks it over the
   * thread ports (null when worker 0 does not answer within a second, e.g. while it restarts).
   */
  async describeHeld(url: string, now: number): Promise<HeldDescription | null> {
    if (this.service) return this.service.core.describe(url, now);
    if (workerIndex() === 0) return null;
    this.listenForHeldAsks();
    const id = ++this.heldAskSeq;
    return new Promise((resolve) => {
      this.heldAsks.set(id, resolve);
      // A one-shot timeout, not a duty: whichever comes first, the reply or the second, answers.
      void this.deps.sleep(HELD_ASK_TIMEOUT_MS).then(() => {
        if (this.heldAsks.delete(id)) resolve(null);
      });
      for (const port of threads()) port.postMessage({ type: HELD_ASK, id, url, now });
    });
  }

  /**
   * Resolves true once this worker holds the leader slot, false when stopped first. Another worker 0 (a
   * restart overlap) may still heartbeat: then a duty looks again every LEADERSHIP_WAIT_MS until the slot
   * is free, and stop() ends the wait at once.
   */
  private holdLeaderSlot(signal: KeeperSignal, ownerId: number): Promise<boolean> {
    const { publishInterval, scheduler } = this.deps;
    const claim = (now: number) => signal.claimLeadership(ownerId, now, publishInterval());
    if (this.stopped) return Promise.resolve(false);
    if (claim(Date.now())) return Promise.resolve(true);
    return new Promise((resolve) => {
      const wait = scheduler.add(
        {
          name: 'keeper leader wait',
          runOnce: (now): Counts => {
            if (!claim(now)) return {};
            void wait.stop();
            resolve(true);
            return { claimed: 1 };
          },
        },
        every(() => LEADERSHIP_WAIT_MS),
      );
      this.undo.push(() => {
        void wait.stop();
        resolve(false);
      });
    });
  }

  /** Starts the keeper on this worker once it holds leadership. Call on worker 0 only. */
  async start(): Promise<void> {
    const { config, control, publishInterval, tickInterval } = this.deps;
    const ownerId = leaderIdFor(threadId, randomWord());
    const signal = this.deps.signal();
    const leases = this.deps.leases();
    if (!(await this.holdLeaderSlot(signal, ownerId))) return;
    const release = () => signal.releaseLeadership(ownerId);
    process.on('exit', release);
    this.undo.push(() => process.off('exit', release));

    // Row ownership over the cluster's members, re-read every beat (docs/clusters.md). A worker 0
    // that restarts in a live process finds the lease table as the last one left it: its first beats
    // scan it too, in case the view changed meanwhile.
    const first = await this.deps.currentOwnership();
    // Nothing to drop under the first view (the load takes only the rows it holds): a first view that
    // gives rows away (an earlier worker 0 of this process published another) goes out a settle from now.
    this.deps.viewApplied?.(first.nodes, Date.now());
    this.ownership = first;
    this.handoff.changed(Date.now());
    this.adoptHandedOver(first, Date.now());
    if (this.ownership.nodes.length > 1) {
      log.info(`keeper: clustered with ${this.ownership.nodes.join(', ')}; holding the rows this node owns`);
      // The load walks under the views of this moment, which the peers may still be moving from (a node
      // that returns): the walk once they settle is owed as after any change.
      this.settled.changed(Date.now());
    }

    const syncStatus = () => control.publishStatus(this.deps.nodeStatus(Date.now()));
    const svc = this.deps.keeper({
      owns: (key) => this.ownership?.owns(key) ?? true,
      ownedShare: () => 1 / Math.max(1, this.ownership?.nodes.length ?? 1),
      holdLeadership: (now) => signal.claimLeadership(ownerId, now, publishInterval()),
      afterPublish: async (now) => {
        // requeued at expiry (docs/wakes.md): one pass over the lease slots finds leases that ran out
        // unreported.
        const requeued = this.requeuedPass(now);
        await syncStatus();
        return { requeued };
      },
      beforeState: async (now) => void (await leases.upkeep.reconcileInSlices(now, nextTurn)),
    });
    this.service = svc;
    svc.withdraw(Date.now());
    this.undo.push(
      control.onChange(() => void syncStatus().catch((e) => log.error('status write failed', e))),
    );
    await syncStatus().catch((e) => log.error('status write failed', e));
    // The exhausted-set poke: a claim on any worker found the set used up while due rows remain.
    this.undo.push(this.deps.onPoke(() => svc.publishSoon()));
    if (this.stopped) return;

    await svc.start();
    svc.addDuty(
      {
        name: 'keeper status sync',
        runOnce: async (now) => {
          await leases.upkeep.reconcileInSlices(now, nextTurn);
          await syncStatus();
          return {};
        },
      },
      every(() => config().queue.statusSyncInterval),
    );
    svc.addDuty(
      { name: 'keeper membership', runOnce: () => this.refreshMembership(svc) },
      // Every beat, not only every tick: a peer that joins or returns is held by once its beats arrive
      // (read once a 30 s tick, a fresh link would leave every node holding every row for up to a tick,
      // and rows a peer let go unheld for another).
      every(() => Math.min(tickInterval(), beatEveryMs(publishInterval()))),
    );
    const repair = this.deps.repair;
    if (repair)
      svc.addDuty(
        {
          name: 'replica repair',
          runOnce: async (now) => {
            await repair.step(now, this.ownership?.nodes ?? []);
            svc.stats.lastRepair = repair.last;
            return {};
          },
        },
        every(() => beatEveryMs(publishInterval())),
      );
  }

  /** Stops the keeper (its duties, its subscriptions) and the listeners this instance added. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const fn of this.undo.splice(0)) fn();
    await this.service?.stop();
  }

  /** Leases expired unreported since the last pass: one `requeued` event per queue; answers how many. */
  private requeuedPass(now: number): number {
    const expired = new Set<number>();
    this.deps.leases().upkeep.collectExpired(now, (q) => expired.add(q));
    if (expired.size === 0) return 0;
    const names = this.queueNames();
    let n = 0;
    for (const q of expired) {
      const name = names.get(q);
      if (name === undefined) continue;
      this.deps.onRequeued(name, now);
      n++;
    }
    return n;
  }

  /** The queue names an expired lease's queue hash can stand for: the routes now, plus `unrouted`. */
  private queueNames(): Map<number, string> {
    const names = new Map<number, string>([[nameHash('unrouted'), 'unrouted']]);
    for (const r of this.deps.config().render.routes) names.set(nameHash(r.name), r.name);
    return names;
  }

  /**
   * What this node's beat hands over (util/cluster/handoff.ts). A few times after a membership change
   * (SCANS_AFTER_CHANGE_MS: the change, after the settle, once more), and in every beat that publishes
   * a new view (`newView`: the one that gives rows away, after its settle), the beat scans the lease
   * table in slices for leases on rows this node no longer holds; what it found stays in the list until
   * each lease ends (null before the keeper has a view: the beat row keeps its list). Every beat checks
   * the listed leases still live for a result that came since (in slices too), so their new holder
   * counts no miss for them. The same array while nothing changed (the beat encodes it once).
   */
  async handoffFor(now: number, newView = false): Promise<readonly HandoffLease[] | null> {
    const ownership = this.ownership;
    // No view yet (the peer wait): an earlier worker 0 of this process may have left a list whose leases
    // still run, and this one cannot tell yet; the beat row keeps it.
    if (!ownership) return null;
    // Alone there is nobody to hand leases to (and the scan of a 1M-lease table costs ~90 ms).
    if (ownership.nodes.length === 1) return [];
    const ledger = this.handoff;
    if (newView || ledger.scanDue(now)) {
      const found = await this.deps
        .leases()
        .upkeep.handoffScanInSlices(
          now,
          (hi, lo) => ownership.ownsHash(hi, lo),
          RELEASED_HANDOFF_MS,
          nextTurn,
        );
      const added = ledger.note(found, now);
      if (added > 0)
        log.info(
          `keeper: handing over ${added} leases out on rows this node no longer holds (${ledger.size} in all)`,
        );
    }
    ledger.prune(sharedSecondsAtOrBefore(now));
    if (ledger.size > 0) {
      const leases = this.deps.leases();
      const reported: HandoffLease[] = [];
      let looked = 0;
      for (const l of ledger.unreleased()) {
        if (leases.reportedHash(l.hi, l.lo)) reported.push(l);
        // A full list (50,000) is tens of ms of window walks: worker 0 publishes between slices.
        if (++looked % REPORT_CHECK_SLICE === 0) await nextTurn();
      }
      for (const l of reported) ledger.release(l.hi, l.lo);
    }
    const { leases, left } = ledger.list();
    if (left > 0 && ledger.sayOverflow())
      log.warn(
        `keeper: ${left} leases on rows this node gave away do not fit the heartbeat and are not handed over; ` +
          'their new holder may grant those rows again before the leases end',
      );
    return leases;
  }

  /**
   * Records, as leases of this node's table, the leases present peers hand over on rows this node holds
   * under `view`: before the keeper picks those rows up, so it never publishes or grants them while a
   * fleet renders them under the old holder's lease.
   */
  private adoptHandedOver(view: Partial<Pick<HoldingView, 'handedOver'>>, now: number): void {
    const handed = view.handedOver?.() ?? [];
    if (handed.length === 0) return;
    const leases = this.deps.leases();
    const adopted = new Map<string, number>();
    let refused = 0;
    for (const { from, lease } of handed) {
      // Held off HANDOFF_MARGIN_MS past the giver's end: its clock may run behind ours, and a result that
      // came near the end writes the row through another database than the beat (it may arrive late).
      const held = { ...lease, until: lease.until + Math.ceil(HANDOFF_MARGIN_MS / 1000) };
      if (fromSharedSeconds(held.until) <= now) continue;
      if (leases.adopt(held, now)) adopted.set(from, (adopted.get(from) ?? 0) + 1);
      else if (!leases.isLeasedHash(lease.hi, lease.lo, now)) refused++;
    }
    for (const [from, n] of adopted)
      log.info(
        `keeper: took over ${n} leases ${from} has out on rows this node now holds; they are not granted here before they end`,
      );
    if (refused > 0)
      log.warn(
        `keeper: could not record ${refused} leases handed over (lease table full); those rows may be granted twice`,
      );
  }

  private async refreshMembership(svc: KeeperService): Promise<Counts> {
    const next = await this.deps.currentOwnership();
    const same = this.ownership !== undefined && next.sameMembership(this.ownership);
    const tick = this.deps.tickInterval();
    // Recorded before a change is applied (the rows must not be granted here before those leases end),
    // and besides once a tick rather than every beat: a list can run to 50,000.
    if (!same || Date.now() - this.lastAdoptAt >= tick) {
      this.lastAdoptAt = Date.now();
      this.adoptHandedOver(next, this.lastAdoptAt);
    }
    if (!same) {
      log.info(`keeper: cluster membership is now ${next.nodes.join(', ')}`);
      this.ownership = next;
      this.handoff.changed(Date.now());
      this.settled.changed(Date.now());
      const r = await svc.membershipChanged(
        () => Date.now(),
        (at) => this.deps.viewApplied?.(next.nodes, at),
      );
      return { dropped: r.dropped, gained: r.gained };
    }
    // Once the change settled: one more walk, under the views every node now publishes. It also covers a
    // walk at the change that failed (the duty's error is logged; the walk stays owed until one completes).
    if (!this.settled.due(Date.now(), tick, (next.settling?.().length ?? 0) > 0)) return {};
    const startedAt = Date.now();
    const walk = await svc.settledWalk(() => Date.now());
    if (walk?.purpose !== 'settled') return {};
    this.settled.walked(startedAt);
    return walk.recovered > 0 ? { recovered: walk.recovered } : {};
  }
}
