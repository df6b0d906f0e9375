// The keeper's verification walk (every queue.keeper.verifyInterval): walks the table to add missing rows,
// fix mismatched ones and drop rows no longer owned, marking every held row it sees; then point-checks the
// held rows it did not see, for rows deleted without an event. A cluster membership change drops the rows lost at once and walks for the rows gained.
import type { KeeperStats, RowCheckDeps } from './deps.js';
import { SLICE_BUDGET_MS, WALK_CHUNK } from './deps.js';

/** How many rows a slice handles between two looks at its clock. */
const BUDGET_STEP = 16;

export type VerifyResult = NonNullable<KeeperStats['lastVerify']>;

/**
 * Why a walk runs, which decides how its finds count: `verification` (the interval, a resubscribe) counts
 * owned rows it had to take up as repairs; `membership` (at a membership change) counts them as gains, the
 * rows the change hands this node; `settled` (once the membership settled after a change) counts them as
 * recovered: rows this node owned and no keeper held, which the change should have left with nobody.
 */
export type WalkPurpose = 'verification' | 'membership' | 'settled';

/** Merged walks take the purpose ranked highest: gains are no repairs, recoveries are no repairs. */
const PURPOSE_RANK: Record<WalkPurpose, number> = { verification: 0, settled: 1, membership: 2 };

/** Recovered rows are named in the log, a few of them, so a race that left them can be traced. */
const NAMED_RECOVERED = 5;

export class KeeperVerifier {
  private verifying = false;
  /** What the next walk is for; a walk asked for while one runs raises it (membership over the others). */
  private nextPurpose: WalkPurpose | null = null;
  private verifyQueued = false;
  private verifyTouched: Set<string> | null = null;

  constructor(private readonly deps: RowCheckDeps) {}

  /** An event touched `key`: a walk running now keeps the event's value for it. */
  touched(key: string): void {
    this.verifyTouched?.add(key);
  }

  /**
   * The verification walk: add missing rows, fix mismatched ones, drop rows no longer owned, then
   * point-check held keys for rows deleted without an event. A walk asked for while one runs is queued.
   */
  async verify(now: () => number, purpose: WalkPurpose = 'verification'): Promise<VerifyResult | null> {
    if (this.nextPurpose === null || PURPOSE_RANK[purpose] > PURPOSE_RANK[this.nextPurpose])
      this.nextPurpose = purpose;
    if (this.verifying) {
      this.verifyQueued = true;
      return null;
    }
    this.verifying = true;
    try {
      let result: VerifyResult;
      do {
        this.verifyQueued = false;
        result = await this.verifyWalk(now);
      } while (this.verifyQueued);
      return result;
    } finally {
      this.verifying = false;
      this.verifyTouched = null;
    }
  }

  private async verifyWalk(now: () => number): Promise<VerifyResult> {
    const started = now();
    const t0 = performance.now();
    this.verifyTouched = new Set();
    const touched = this.verifyTouched;
    let missing = 0;
    let mismatched = 0;
    let phantom = 0;
    let unowned = 0;
    let orphaned = 0;
    let gained = 0;
    let recovered = 0;
    const recoveredKeys: string[] = [];
    let rows = 0;
    const purpose = this.nextPurpose ?? 'verification';
    this.nextPurpose = null;
    const clock = this.deps.sliceClock;
    let longestSliceMs = 0;
    // A slice ends at WALK_CHUNK rows or once it has run SLICE_BUDGET_MS, whichever comes first.
    const spent = (from: number, n: number, look: boolean): boolean =>
      n >= WALK_CHUNK || (look && clock() - from >= SLICE_BUDGET_MS);
    this.deps.core.startSighting();
    let lastKey: string | undefined;
    for (let more = true; more;) {
      const sliceStart = clock();
      let n = 0;
      const range = { start: lastKey, exclusiveStart: lastKey !== undefined, limit: WALK_CHUNK };
      for (const { key, row } of this.deps.source.walk(range)) {
        lastKey = key;
        n++;
        if (row) rows++;
        else if (!touched.has(key)) this.deps.unreadableUnheld(key, now());
        if (!touched.has(key) && row) {
          if (!this.deps.owns(key)) {
            if (this.deps.orphan?.(key)) orphaned++;
            if (this.deps.core.has(key)) {
              this.deps.repair(key, null, now());
              unowned++;
            }
          } else if (!this.deps.core.sight(key)) {
            if (purpose === 'membership') gained++;
            else if (purpose === 'settled') {
              recovered++;
              if (recoveredKeys.length < NAMED_RECOVERED) recoveredKeys.push(key);
            } else missing++;
            this.deps.repair(key, row, now());
            this.deps.core.sight(key);
          } else if (!this.deps.core.matches(key, row)) {
            mismatched++;
            this.deps.repair(key, row, now());
            this.deps.core.sight(key);
          }
        }
        if (spent(sliceStart, n, n % BUDGET_STEP === 0)) break;
      }
      // Only an empty slice ends the walk: a range passes over keys that are not URLs, so one can yield
      // fewer rows than its limit with more of the table after it.
      more = n > 0;
      longestSliceMs = Math.max(longestSliceMs, clock() - sliceStart);
      if (more) await this.deps.yieldLoop();
    }
    // Deleted rows leave no trace in a walk: every held row the walk did not see is point-checked, a slice
    // of held keys at a time (a copy of every held key at once would hold worker 0 for seconds at 10M
    // rows, and a point read of every held row took three quarters of the walk at 1M).
    this.deps.source.refreshReads?.();
    const held = this.deps.core.keyWalk();
    try {
      for (let more = true; more;) {
        const sliceStart = clock();
        let n = 0;
        more = false;
        for (let keys = held.next(BUDGET_STEP); keys !== null; keys = held.next(BUDGET_STEP)) {
          for (const key of keys) {
            if (touched.has(key) || !this.deps.core.unseen(key)) continue;
            if (this.deps.source.read(key) === undefined && !this.deps.unreadable(key, now())) {
              this.deps.repair(key, null, now());
              phantom++;
            }
          }
          n += keys.length;
          if (spent(sliceStart, n, true)) {
            more = true;
            break;
          }
        }
        longestSliceMs = Math.max(longestSliceMs, clock() - sliceStart);
        if (more) await this.deps.yieldLoop();
      }
    } finally {
      held.close();
    }
    const repaired = missing + mismatched + phantom;
    const result = {
      at: started,
      ms: performance.now() - t0,
      missing,
      mismatched,
      phantom,
      unowned,
      rows,
      gained,
      recovered,
      purpose,
      repaired,
      longestSliceMs: Math.round(longestSliceMs * 10) / 10,
    };
    this.deps.stats.lastVerify = result;
    this.deps.stats.orphaned = { rows: orphaned, countedAt: started };
    this.deps.stats.repairedTotal += repaired;
    this.deps.metric?.('keeper_verify_ms', result.ms);
    if (purpose === 'membership')
      this.deps.log.info(`keeper: picked up ${gained} rows gained by the membership change`);
    if (purpose === 'settled') {
      this.deps.stats.lastSettledWalk = { at: started, ms: result.ms, rows, recovered };
      this.deps.stats.recoveredTotal += recovered;
      if (recovered > 0) {
        this.deps.countRecovered?.('membership', recovered);
        this.deps.log.warn(
          `keeper: took up ${recovered} rows this node owns that no keeper held after the membership change ` +
            `settled (${recoveredKeys.join(', ')}${recovered > recoveredKeys.length ? ', …' : ''})`,
        );
      }
    }
    if (missing > 0) this.deps.countRecovered?.('verification', missing);
    if (repaired > 0) {
      this.deps.countRepaired?.(repaired);
      this.deps.log.warn(
        `keeper verification repaired ${repaired} rows (missing=${missing} mismatched=${mismatched} phantom=${phantom})`,
      );
    }
    return result;
  }

  /**
   * The cluster membership changed (docs/clusters.md), or the device list did: drop the rows this node no
   * longer holds (then `afterDrop`), then walk the table for the rows it gained. `owns` must already
   * answer with the new membership.
   */
  async membershipChanged(
    now: () => number,
    afterDrop?: (dropped: number) => void,
    opts: { sliced?: boolean } = {},
  ): Promise<{ dropped: number; gained: number }> {
    let dropped = 0;
    // `sliced`: the drop yields between slices, so a million rows never hold the loop. A device removed
    // from render.deviceTypes may (claims refuse its rows meanwhile, services/leases/claims.ts), and so
    // may a membership change: the rows it gives away stay claimable here until the drop ends, and the
    // view that lets their new holder take them is published only a settle after `afterDrop`
    // (util/cluster/membership.ts), with the leases granted meanwhile handed over in its beat.
    const held = this.deps.core.keyWalk();
    const clock = this.deps.sliceClock;
    try {
      let sliceStart = clock();
      for (let keys = held.next(BUDGET_STEP); keys !== null; keys = held.next(BUDGET_STEP)) {
        for (const key of keys) {
          if (this.deps.owns(key) || !this.deps.core.has(key)) continue;
          this.deps.repair(key, null, now());
          dropped++;
        }
        if (opts.sliced && clock() - sliceStart >= SLICE_BUDGET_MS) {
          await this.deps.yieldLoop();
          sliceStart = clock();
        }
      }
    } finally {
      held.close();
    }
    afterDrop?.(dropped);
    // The caller logs the new membership; a walk that drops nothing (the re-walk a tick later) says nothing here.
    if (dropped > 0)
      this.deps.log.info(`keeper: dropped ${dropped} rows no longer owned after the membership change`);
    // A walk already running queues one more; that one counts the gains (and logs them).
    const walk = await this.verify(now, 'membership');
    return { dropped, gained: walk?.gained ?? 0 };
  }

  /**
   * The walk once a membership change has settled (every present peer publishes this node's view): a
   * verification walk whose owned rows not held count as recovered. The drops and the walk at the change
   * run while views still move, so a row can fall between two nodes that each give it to the other; this
   * walk, under the views everyone agrees on, takes every such row up.
   */
  settledWalk(now: () => number): Promise<VerifyResult | null> {
    return this.verify(now, 'settled');
  }
}
