// Where a lease is granted, on every worker, with no mutex: the ready set hands out candidates,
// the lease table decides exclusivity, the row decides whether the work is still due. Results are
// applied in results.ts; the claim marks the stall sweep reads are written by claimMarks.ts.
import type { GrantHolders } from '../../util/leases/holders.js';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { nameHash } from '../../util/leases/token.js';
import type { Caller } from './caller.js';
import type { LeaseTable } from '../../util/leases/table.js';
import type { ReadyEntry, ReadySet } from '../../util/sharedMemory/readySet.js';
import type { MetricName } from '../../util/metrics/catalogue.js';
import { classifyUrl } from '../../util/schedule/rules.js';
import { splitRowKey } from '../../util/schedule/rowKey.js';
import type { ClaimRow } from '../../util/schedule/rawRecord.js';
import type { QueueScope } from './fleetScope.js';
import type { NodeStatus } from '../status/control.js';
import type { SchedulerTimer } from '../../util/duties/scheduler.js';
// The wire type of a granted job is the fleet client's, the one declaration (type-only: nothing of the
// client is loaded at run time). Its leaseToken is the grant instant and 64 random bits
// (util/leases/token.ts); its callbackOrigin is this node's (docs/prerender-fleet.md).
import type { Job } from '../../client/src/types.js';

// A claim takes up to this many entries per job wanted: leased or stale entries cost no place.
const OVER_TAKE = 4;
// And up to this many more per job wanted that turn out leased or no longer due: a refill published
// while claims took from the set before it begins with rows those claims leased during its walk (and
// rows already reported since), and a claim must get past them rather than answer short. A leased one
// costs a lease-table probe, one no longer due a point read of three fields (bench/due-burst.ts).
const SKIPPED_OVER_TAKE = 32;
// A queue's "last claim" mark is written at most this often per worker (read by the stall sweep).
export const CLAIM_MARK_EVERY_MS = 5000;
/** A full lease window is warned about at most this often per worker, not once per refused key. */
export const FULL_WARN_EVERY_MS = 10_000;

export interface ClaimResult {
  jobs: Job[];
  status: NodeStatus;
  /**
   * Set when the claim found the set used up while the keeper had left due rows out of it: the set's
   * generation then, which the next publish moves on.
   */
  refillFrom?: number;
}

/**
 * A claim that finds the set used up while the keeper has left due rows out of it waits up to this long
 * for the refill it asked for, instead of answering []: a fleet would back off longer than the refill takes.
 */
export const REFILL_WAIT_MS = 100;
/** How often the wait reads the set's generation (one shared-memory load). */
const REFILL_POLL_MS = 2;

/** What every job carries for a prerender fleet: where to post its result (its device is its row's). */
export interface JobTarget {
  callbackOrigin: string;
}

/** What a claim needs to know of the keeper: the serving view every worker derives from its signal. */
export interface ServingRead {
  serving: boolean;
  due: number;
  /** The last publish left due, unleased rows out of the set. */
  leftOut: boolean;
}

export interface ClaimDeps {
  /** The node's ready set and lease table (shared memory; a getter, as they are sized at first use). */
  readySet: () => Pick<ReadySet, 'take' | 'takeSection' | 'section' | 'snapshot'>;
  leases: () => Pick<LeaseTable, 'isLeased' | 'grant'>;
  /**
   * A local point read of the fields a claim uses, as stored now (undefined: no row). Wired to the raw
   * read (services/schedule/rawRecords.ts), which answers exactly what a full readRow does.
   */
  readRow: (key: string) => ClaimRow | undefined;
  /** Records the queues' last claim instant (never moves a mark back). Not awaited by the claim. */
  writeClaimMarks: (queues: readonly string[], now: number) => Promise<void>;
  /** The trailing write of claims the pacing held back (unref'd, like every timer of the worker). */
  timer: SchedulerTimer;
  isPaused: () => boolean;
  /** False until this worker has read the pause intent (NodeControl.pauseKnown): claims answer unready. */
  pauseKnown: () => boolean;
  servingView: (now: number) => ServingRead;
  nodeStatus: (now: number) => NodeStatus;
  /** Asks the keeper to publish now: the set ran dry while rows are due. */
  pokeKeeper: (now: number) => void;
  config: () => QueueKeeperConfig;
  /** This node's advertised origin and the configured device type (docs/prerender-fleet.md). */
  jobTarget: () => JobTarget;
  count: (name: MetricName, n: number) => void;
  log: { warn: (...args: unknown[]) => void };
  /** Where each grant's holder is noted by name (the rows view, util/leases/holders.ts). */
  holders?: Pick<GrantHolders, 'note'>;
}

/** How a claim's take went: entries taken off the set, and whether it found the set used up. */
interface Took {
  taken: number;
  wantsPublish: boolean;
}

/** What one claim did with the entries it looked at (counted into the metrics at the end). */
interface ClaimTally {
  jobs: Job[];
  queues: Set<string>;
  stale: number;
  wedged: number;
  refusedFull: number;
  /** Entries skipped because a lease holds their key. */
  leased: number;
}

export class ClaimService {
  /** Per queue, when this worker last wrote its claim mark. */
  private readonly lastMark = new Map<string, number>();
  /** Per queue, this worker's latest claim the pacing has not written yet. */
  private readonly unwritten = new Map<string, number>();
  /** The armed trailing write of `unwritten`, if any. */
  private trailing: unknown = undefined;
  private lastFullWarnAt = -Infinity;

  constructor(private readonly deps: ClaimDeps) {}

  /** A claim's `limit` (its shape already checked), capped at queue.maxClaimLimit; 20 when absent. */
  limitOf(limit: number | undefined): number {
    const max = this.deps.config().queue.maxClaimLimit;
    return Math.min(limit ?? 20, max);
  }

  /**
   * Grants up to `limit` due jobs from the ready set, from every queue or only from `scope`
   * (a fleet-bound user, or a body's `queues`). An unscoped claim takes entries off the shared cursor in
   * the set's global order; a scoped one takes from its queues' sections (util/sharedMemory/readySet.ts),
   * best head first, so it never uses up entries of queues it does not serve and a small queue still
   * gets full claims.
   */
  claim(limit: number, caller: Caller, scope: QueueScope = null, now = Date.now()): ClaimResult {
    const { deps } = this;
    if (!deps.pauseKnown()) return { jobs: [], status: 'unready' };
    if (deps.isPaused()) return { jobs: [], status: 'paused' };
    const view = deps.servingView(now);
    if (!view.serving) return { jobs: [], status: 'unready' };
    const t: ClaimTally = { jobs: [], queues: new Set(), stale: 0, wedged: 0, refusedFull: 0, leased: 0 };
    const target = deps.jobTarget();
    const took = scope
      ? this.takeScoped(limit, caller, scope, now, t, target)
      : this.takeGlobal(limit, caller, now, t, target);
    // A set used up only by keys the lease table has no room for would be republished with the same keys
    // every 50 ms until a lease frees a slot; the normal publish interval is soon enough for those.
    const onlyFull = t.refusedFull > 0 && t.refusedFull === took.taken;
    let refillFrom: number | undefined;
    if (took.wantsPublish && view.due > 0 && !onlyFull) {
      deps.pokeKeeper(now);
      if (view.leftOut && t.jobs.length === 0) refillFrom = deps.readySet().snapshot().generation;
    } else if (view.leftOut && !scope && !onlyFull) {
      // A burst larger than the set: the refill is asked for once half of the set is taken, at the rate
      // claims take it, so the next set is out before this one runs dry (bench/due-burst.ts).
      const set = deps.readySet().snapshot();
      if (set.remaining * 2 <= set.count) deps.pokeKeeper(now);
    }
    if (t.jobs.length) deps.count('claim_granted', t.jobs.length);
    if (t.stale) deps.count('claim_stale', t.stale);
    if (t.wedged) deps.count('claim_wedged', t.wedged);
    if (t.queues.size) this.markClaimed(t.queues, now);
    const status: NodeStatus = t.jobs.length > 0 ? 'queued' : deps.nodeStatus(now);
    return refillFrom === undefined ? { jobs: t.jobs, status } : { jobs: t.jobs, status, refillFrom };
  }

  /**
   * claim(), and when it found the set used up while the keeper had left due rows out of it, a wait of
   * up to REFILL_WAIT_MS for the publish it asked for, then one claim more.
   */
  async claimOrWait(limit: number, caller: Caller, scope: QueueScope = null): Promise<ClaimResult> {
    const first = this.claim(limit, caller, scope, Date.now());
    if (first.refillFrom === undefined) return first;
    const ready = this.deps.readySet();
    for (let waited = 0; waited < REFILL_WAIT_MS; waited += REFILL_POLL_MS) {
      if (ready.snapshot().generation !== first.refillFrom) break;
      await new Promise<void>((r) => this.deps.timer.set(() => r(), REFILL_POLL_MS));
    }
    if (ready.snapshot().generation === first.refillFrom) return first;
    const again = this.claim(limit, caller, scope, Date.now());
    return { jobs: again.jobs, status: again.status };
  }

  /** The unscoped claim: entries off the shared cursor, in the set's global order. */
  private takeGlobal(limit: number, caller: Caller, now: number, t: ClaimTally, target: JobTarget): Took {
    const ready = this.deps.readySet();
    let budget = limit * OVER_TAKE;
    let refundLeft = limit * SKIPPED_OVER_TAKE;
    let taken = 0;
    while (t.jobs.length < limit && budget > 0) {
      // Take only what is still wanted: an entry taken is used up for this generation, so taking extra
      // and dropping it would strand it until the next publish — forever, if the keeper has stalled and
      // the node is draining its last set. Skipped entries are made up by taking again.
      const batch = ready.take(Math.min(budget, limit - t.jobs.length));
      if (batch.length === 0) return { taken, wantsPublish: true };
      budget -= batch.length;
      taken += batch.length;
      const skippedBefore = t.leased + t.stale;
      for (const entry of batch) {
        if (t.jobs.length >= limit) break;
        this.grantEntry(entry, caller, null, now, t, target);
      }
      const refund = Math.min(t.leased + t.stale - skippedBefore, refundLeft);
      refundLeft -= refund;
      budget += refund;
    }
    return { taken, wantsPublish: false };
  }

  /**
   * The scoped claim: entries off the sections of the scope's queues, with the same over-take budget.
   * With several queues it takes one entry at a time from the section whose next entry scores best. A
   * section used up while its queue still had rows left out of the set asks for a publish; a queue with
   * no section (nothing of it due at the last publish) does not: its rows come with the next one.
   */
  private takeScoped(
    limit: number,
    caller: Caller,
    scope: ReadonlySet<string>,
    now: number,
    t: ClaimTally,
    target: JobTarget,
  ): Took {
    const ready = this.deps.readySet();
    let open = [...scope].map(nameHash);
    let budget = limit * OVER_TAKE;
    let taken = 0;
    let wantsPublish = false;
    const close = (queue: number) => {
      open = open.filter((q) => q !== queue);
      const s = ready.section(queue);
      if (s !== null && !s.complete) wantsPublish = true;
    };
    while (t.jobs.length < limit && budget > 0 && open.length > 0) {
      let queue = open[0]!;
      if (open.length > 1) {
        let best = -Infinity;
        for (const q of [...open]) {
          const head = ready.section(q)?.headScore ?? -Infinity;
          if (head === -Infinity) close(q);
          else if (head > best) {
            best = head;
            queue = q;
          }
        }
        if (best === -Infinity) break;
      }
      const batch = ready.takeSection(queue, open.length > 1 ? 1 : Math.min(budget, limit - t.jobs.length));
      if (batch.length === 0) {
        close(queue);
        continue;
      }
      budget -= batch.length;
      taken += batch.length;
      for (const entry of batch) this.grantEntry(entry, caller, scope, now, t, target);
    }
    return { taken, wantsPublish };
  }

  /**
   * Tries to grant one ready entry: skips it when leased, when its row is gone or no longer due
   * (`claim_stale`), when the key is held (`claim_wedged`) or the lease window is full. True when granted.
   */
  private grantEntry(
    entry: ReadyEntry,
    caller: Caller,
    scope: QueueScope,
    now: number,
    t: ClaimTally,
    target: JobTarget,
  ): boolean {
    const cfg = this.deps.config();
    const leases = this.deps.leases();
    if (leases.isLeased(entry.key, now)) {
      t.leased++;
      return false;
    }
    const row = this.deps.readRow(entry.key);
    if (!row || row.nextRenderTime > now) {
      t.stale++;
      return false;
    }
    const parts = splitRowKey(entry.key);
    // A device taken out of render.deviceTypes: its rows stay (orphaned) and are never handed out, even
    // from a set published before the keeper dropped them.
    if (parts === null || !cfg.render.deviceTypes.includes(parts.device)) {
      t.stale++;
      return false;
    }
    const url = parts.url;
    const { route, cadenceMs } = classifyUrl(url, row.effectiveInterval, cfg);
    // Sections are found by queue hash: a row routed elsewhere since the publish (or a name whose hash
    // collides) is not this scope's to take.
    if (scope !== null && !scope.has(route)) {
      t.stale++;
      return false;
    }
    const g = leases.grant(entry.key, now, {
      leaseMs: cfg.queue.jobLeaseTime,
      dueMs: row.nextRenderTime,
      cadenceMs,
      fastRetries: cfg.render.failureRetry.fastRetries,
      user: caller.user,
      worker: caller.worker,
      queue: nameHash(route),
    });
    if (!g.ok) {
      if (g.reason === 'held') t.wedged++;
      if (g.reason === 'full') {
        t.refusedFull++;
        if (now - this.lastFullWarnAt >= FULL_WARN_EVERY_MS) {
          this.lastFullWarnAt = now;
          this.deps.log.warn(
            `lease window full for a key; not granting it (queue.maxLeases ${cfg.queue.maxLeases} is too small for the leases out)`,
          );
        }
      }
      return false;
    }
    this.deps.holders?.note(entry.key, {
      token: g.token,
      user: caller.userName ?? '',
      workerId: caller.workerId ?? '',
    });
    t.queues.add(route);
    t.jobs.push({
      id: entry.key,
      url,
      queue: route,
      isFromSitemap: row.fromSitemap,
      expiresAt: g.expiresAt,
      leaseToken: g.token,
      callbackOrigin: target.callbackOrigin,
      deviceType: parts.device,
    });
    return true;
  }

  /**
   * Writes the queues' claim mark at most once per CLAIM_MARK_EVERY_MS per worker. A claim inside that
   * window is not dropped: it is written, with its own instant, when the window ends. The stall sweep
   * counts a claim since a queue's last nudge as progress, and a claim made a second after
   * the paced write must count as much as one made a minute after it.
   */
  private markClaimed(queues: Set<string>, now: number): void {
    const due: string[] = [];
    for (const q of queues) {
      if (now - (this.lastMark.get(q) ?? -Infinity) < CLAIM_MARK_EVERY_MS) {
        this.unwritten.set(q, now);
        continue;
      }
      this.lastMark.set(q, now);
      this.unwritten.delete(q);
      due.push(q);
    }
    if (due.length > 0) this.writeMarks(due, now);
    this.armTrailing(now);
  }

  private writeMarks(queues: readonly string[], at: number): void {
    void this.deps
      .writeClaimMarks(queues, at)
      .catch((e: unknown) => this.deps.log.warn('could not write claim marks', e));
  }

  /** Arms one timer for the earliest instant an unwritten queue's window ends. */
  private armTrailing(now: number): void {
    if (this.trailing !== undefined || this.unwritten.size === 0) return;
    let at = Infinity;
    for (const q of this.unwritten.keys())
      at = Math.min(at, (this.lastMark.get(q) ?? -Infinity) + CLAIM_MARK_EVERY_MS);
    this.trailing = this.deps.timer.set(() => this.writeUnwritten(at), Math.max(0, at - now));
  }

  /** The trailing write at `at`: each queue whose window has ended gets its latest held-back claim. */
  private writeUnwritten(at: number): void {
    this.trailing = undefined;
    for (const [q, claimedAt] of [...this.unwritten]) {
      if (at - (this.lastMark.get(q) ?? -Infinity) < CLAIM_MARK_EVERY_MS) continue;
      this.lastMark.set(q, at);
      this.unwritten.delete(q);
      this.writeMarks([q], claimedAt);
    }
    this.armTrailing(at);
  }
}
