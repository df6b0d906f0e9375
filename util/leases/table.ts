// The lease table: which keys are out with a renderer right now, shared by every worker thread of one
// process through a plain ArrayBuffer. Lock-free apart from a per-slot write section of a
// handful of stores. The layers, each a class over the one before:
//   util/leases/slots.ts   the memory: layout, the key's window and its reach, consistent slot reads
//   util/leases/upkeep.ts  expiry and reconcile passes over every slot
//   util/leases/grants.ts  grant, give-back and hold, with the lock-free exclusivity argument
//   this file              release, result reports, token checks and the read-only lookups
// Every lookup here walks the key's whole window as its home's reach word names it, read once at the
// start of the walk; grants.ts says why such a walk never misses a live lease granted further out.
import {
  BUSY,
  EMPTY,
  HEADER_WORDS,
  HELD,
  LEASED,
  NO_DUE,
  REPORT_ACCEPTED,
  REPORT_NONE,
  REPORT_PENDING,
  REPORT_UNKNOWN_JOB,
  RELEASED,
  SLOT_WORDS,
  STATE_MASK,
  S_EXPIRY,
  S_HASH_HI,
  S_HASH_LO,
  S_REPORT,
  blocks,
  slotCountFor,
} from './slots.js';
import { fromSharedSeconds, MINUTE_MS, minuteOf } from '../time.js';
import { formatToken, parseToken } from './token.js';
import { LeaseGrants, MAX_ATTEMPTS } from './grants.js';

export { MAX_REACH, PROBE_WINDOW, RELEASE_GRACE_MS } from './slots.js';
export { DEAD_SLOT_RETENTION_MS, type ReconcileResult } from './upkeep.js';
export type { GrantOptions, GrantResult, GrantStep, LeaseTableOptions } from './grants.js';

export type TokenCheck = 'current' | 'superseded' | 'none';
/** The answer a result got, kept with the lease so a retry of the same result gets it again. */
export type ReportAnswer =
  { accepted: true; nextRenderTime: number } | { accepted: false; code: 'unknown_job' };
/**
 * Whether a result may be applied: `first` (go ahead, then finishReport or abortReport), `duplicate`
 * (the same result was applied already: answer it again), `pending` (the same result is being applied
 * right now), `superseded` (not the key's latest grant, not this caller's, or not a token at all).
 */
export type ReportStart =
  | { kind: 'first' }
  | { kind: 'duplicate'; answer: ReportAnswer }
  | { kind: 'pending' }
  | { kind: 'superseded' };
/** Who a lease went to: the nameHash of the user and of the claim's `x-worker-id`. */
export interface Grantee {
  user: number;
  worker: number;
}
export interface ReportCaller {
  /** nameHash of the reporting user. */
  user: number;
  /** A super_user may report any lease. */
  superUser: boolean;
}
export type LeaseState = 'leased' | 'grace' | 'held' | 'expired' | 'released' | 'none';
export interface LeaseView {
  state: LeaseState;
  token: string | null;
  /** When the current state stops blocking: lease end, grace end or hold end. */
  expiresAt: number | null;
  misses: number;
  dueMs: number | null;
}

/** What lookup calls a slot state while it still blocks, and after. */
const VIEWS: Partial<Record<number, [LeaseState, LeaseState]>> = {
  [LEASED]: ['leased', 'expired'],
  [RELEASED]: ['grace', 'released'],
  [HELD]: ['held', 'expired'],
};

/** Where a block found by `blocksCurrent` ends (ms); a lease with its report under way ends at once. */
function blockEnd(expirySec: number, report: number, now: number): number {
  return report === REPORT_PENDING ? now + 1 : fromSharedSeconds(expirySec);
}

export class LeaseTable extends LeaseGrants {
  /** Bytes needed for `maxLeases` (and at least `minSlots` slots); allocate the shared buffer with this. */
  static byteLength(maxLeases: number, minSlots?: number): number {
    return (HEADER_WORDS + slotCountFor(maxLeases, minSlots) * SLOT_WORDS) * 4;
  }

  /** Releases the grant that `token` names, once; clears a hold and the miss count. */
  release(key: string, token: string, now: number): boolean {
    const parts = parseToken(token);
    if (!parts) return false;
    this.hash(key);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const base = this.slotOf(parts);
      if (base < 0) return false;
      const word = this.read(base, true);
      const state = word & STATE_MASK;
      if (state === RELEASED) return false;
      if (state === EMPTY || state === BUSY) continue;
      if (!this.sameGrant(parts)) return false;
      if (this.rewrite(base, word, RELEASED, now, this.reportRead, this.answerRead)) return true;
    }
    return false;
  }

  /**
   * Starts reporting the lease `token` names. Only the
   * key's latest grant, reported by its grantee or a super_user, may start; a lease starts once, and
   * every later start of it answers `duplicate` with the first answer (or `pending` while it runs).
   */
  beginReport(key: string, token: unknown, caller: ReportCaller): ReportStart {
    const parts = parseToken(token);
    if (!parts) return { kind: 'superseded' };
    this.hash(key);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      if (this.latestToken(true) !== parts.grantedAt) return { kind: 'superseded' };
      const base = this.slotOf(parts);
      if (base < 0) return { kind: 'superseded' };
      const word = this.read(base, true);
      const state = word & STATE_MASK;
      if (state === EMPTY || state === BUSY) continue;
      if (!this.sameGrant(parts)) return { kind: 'superseded' };
      if (!caller.superUser && this.userRead !== 0 && this.userRead !== caller.user)
        return { kind: 'superseded' };
      const report = this.reportRead;
      if (report === REPORT_ACCEPTED)
        return { kind: 'duplicate', answer: { accepted: true, nextRenderTime: this.answerRead * MINUTE_MS } };
      if (report === REPORT_UNKNOWN_JOB)
        return { kind: 'duplicate', answer: { accepted: false, code: 'unknown_job' } };
      if (report === REPORT_PENDING) return { kind: 'pending' };
      // A released slot always carries its answer; anything else here is a lease still to report.
      if (state === RELEASED) return { kind: 'superseded' };
      if (this.rewrite(base, word, state, 0, REPORT_PENDING, 0)) return { kind: 'first' };
    }
    return { kind: 'pending' };
  }

  /**
   * Records the answer of a started report: releases the lease (5 s grace) unless `keepLease` (the
   * fast-retry lane, where the lease paces the retry), and keeps the answer for retries.
   */
  finishReport(key: string, token: string, answer: ReportAnswer, keepLease: boolean, now: number): void {
    const code = answer.accepted ? REPORT_ACCEPTED : REPORT_UNKNOWN_JOB;
    const minute = answer.accepted ? minuteOf(answer.nextRenderTime) : 0;
    this.endReport(key, token, (state) => (keepLease ? state : RELEASED), code, minute, now);
  }

  /** Gives a started report up (its write failed): the next report of the lease starts afresh. */
  abortReport(key: string, token: string): void {
    this.endReport(key, token, (state) => state, REPORT_NONE, 0, 0);
  }

  private endReport(
    key: string,
    token: string,
    nextState: (state: number) => number,
    report: number,
    answer: number,
    now: number,
  ): void {
    const parts = parseToken(token);
    if (!parts) return;
    this.hash(key);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const base = this.slotOf(parts);
      if (base < 0) return;
      const word = this.read(base, true);
      const state = word & STATE_MASK;
      if (state === EMPTY || state === BUSY) continue;
      if (!this.sameGrant(parts) || this.reportRead !== REPORT_PENDING) return;
      if (this.rewrite(base, word, nextState(state), now, report, answer)) return;
    }
  }

  /** The window slot holding the grant `parts` names (by its instant), or -1. Leaves it read. */
  private slotOf(parts: { grantedAt: number }): number {
    for (let k = 0, n = this.window(); k < n; k++) {
      const base = this.base(k);
      const state = this.read(base, true) & STATE_MASK;
      if (state !== EMPTY && state !== BUSY && this.readIsKey() && this.tokenRead === parts.grantedAt)
        return base;
    }
    return -1;
  }

  /** Does the last read slot carry exactly this token (instant and random bits)? */
  private sameGrant(parts: { grantedAt: number; randHi: number; randLo: number }): boolean {
    return (
      this.readIsKey() &&
      this.tokenRead === parts.grantedAt &&
      this.randHiRead === parts.randHi &&
      this.randLoRead === parts.randLo
    );
  }

  /**
   * The token of the key's latest grant when that grant went to exactly this grantee (the same user and
   * the same worker id), else null. A result that carries no lease token finds its lease this way
   * (docs/prerender-fleet.md); there is no super_user exception, since a token-less result names no
   * lease of its own and only the grantee can say it rendered this one.
   */
  grantOf(key: string, grantee: Grantee): string | null {
    this.hash(key);
    let token = -1;
    let randHi = 0;
    let randLo = 0;
    let user = 0;
    let worker = 0;
    for (let k = 0, n = this.window(); k < n; k++) {
      const state = this.read(this.base(k), true) & STATE_MASK;
      if (state === EMPTY || state === BUSY || !this.readIsKey() || this.tokenRead <= token) continue;
      token = this.tokenRead;
      randHi = this.randHiRead;
      randLo = this.randLoRead;
      user = this.userRead;
      worker = this.workerRead;
    }
    if (token < 0 || user !== grantee.user || worker !== grantee.worker) return null;
    return formatToken({ grantedAt: token, randHi, randLo });
  }

  /** Is `token` the key's latest grant? A late result of an expired, not re-granted lease is current. */
  check(key: string, token: string): TokenCheck {
    this.hash(key);
    const latest = this.latestToken(true);
    if (latest < 0) return 'none';
    const parts = parseToken(token);
    if (!parts || latest !== parts.grantedAt) return 'superseded';
    const base = this.slotOf(parts);
    return base >= 0 && this.sameGrant(parts) ? 'current' : 'superseded';
  }

  /** The keeper's skip predicate: a live lease, a release grace or an active hold. */
  isLeased(key: string, now: number): boolean {
    this.hash(key);
    return this.blocksCurrent(now) > 0;
  }

  /** isLeased for a key whose keyHash the caller already holds (the keeper stores one per row). */
  isLeasedHash(hi: number, lo: number, now: number): boolean {
    this.useHash(hi, lo);
    return this.blocksCurrent(now) > 0;
  }

  /**
   * Whether the latest grant of the key with this hash had its result: released, or kept by the
   * fast-retry lane with its report accepted. The beat's check of leases it hands over
   * (util/cluster/handoff.ts), so their new holder counts no miss for a render that succeeded.
   */
  reportedHash(hi: number, lo: number): boolean {
    this.useHash(hi, lo);
    let latest = -1;
    let reported = false;
    for (let k = 0, n = this.window(); k < n; k++) {
      const state = this.read(this.base(k), true) & STATE_MASK;
      if (state === EMPTY || state === BUSY || !this.readIsKey() || this.tokenRead <= latest) continue;
      latest = this.tokenRead;
      reported =
        state === RELEASED ||
        (state === LEASED && (this.reportRead === REPORT_ACCEPTED || this.reportRead === REPORT_UNKNOWN_JOB));
    }
    return reported;
  }

  /**
   * isLeasedHash with the end of the block it found: 0 when nothing blocks the key, else the instant
   * (ms) that block ends — the lease's expiry, a release grace's end or a hold's end, rounded as the
   * table stores it. Another slot of the key may block it for longer; never for less than this unless
   * the slot is released or given back first (the keeper parks a row on this, util/keeper/heldRows.ts).
   * A lease whose result is being written answers `now + 1`: its release is moments away, and the row's
   * change may already have reached the keeper, so it should not be parked until the lease's end.
   */
  leasedUntilHash(hi: number, lo: number, now: number): number {
    this.useHash(hi, lo);
    return this.blocksCurrent(now);
  }

  /**
   * Does a slot of the current key's window block it? Advisory (the grant decides for itself), so a
   * slot is first looked at through its state and hash words alone: most of a window holds other keys,
   * and their consistent read (a dozen words) was most of a publish's lease skip. A slot of this key
   * whose state word moved meanwhile, or a BUSY one, gets the consistent read.
   */
  private blocksCurrent(now: number): number {
    const a = this.words;
    for (let k = 0, n = this.window(); k < n; k++) {
      const base = this.base(k);
      const word = Atomics.load(a, base);
      const state = word & STATE_MASK;
      if (state === EMPTY) continue;
      if (state !== BUSY) {
        if (
          Atomics.load(a, base + S_HASH_HI) !== this.hashHi ||
          Atomics.load(a, base + S_HASH_LO) !== this.hashLo
        )
          continue;
        const expiry = Atomics.load(a, base + S_EXPIRY);
        const report = Atomics.load(a, base + S_REPORT);
        if (Atomics.load(a, base) === word) {
          if (blocks(state, expiry, now)) return blockEnd(expiry, report, now);
          continue;
        }
      }
      const again = this.read(base, false);
      if (this.readIsKey() && blocks(again & STATE_MASK, this.expiryRead, now))
        return blockEnd(this.expiryRead, this.reportRead, now);
    }
    return 0;
  }

  /** The key's latest grant as explain shows it. */
  lookup(key: string, now: number): LeaseView {
    this.hash(key);
    let token = -1;
    let state = EMPTY;
    let expiry = 0;
    let misses = 0;
    let due = NO_DUE;
    let randHi = 0;
    let randLo = 0;
    for (let k = 0, n = this.window(); k < n; k++) {
      const slotState = this.read(this.base(k), true) & STATE_MASK;
      if (slotState === EMPTY || slotState === BUSY || !this.readIsKey() || this.tokenRead <= token) continue;
      token = this.tokenRead;
      state = slotState;
      expiry = this.expiryRead;
      misses = this.missesRead;
      due = this.dueRead;
      randHi = this.randHiRead;
      randLo = this.randLoRead;
    }
    if (token < 0) return { state: 'none', token: null, expiresAt: null, misses: 0, dueMs: null };
    const end = fromSharedSeconds(expiry);
    const live = end > now;
    const [ifLive, ifOver] = VIEWS[state] ?? ['expired', 'expired'];
    return {
      state: live ? ifLive : ifOver,
      token: formatToken({ grantedAt: token, randHi, randLo }),
      expiresAt: end,
      misses,
      dueMs: due === NO_DUE ? null : due * MINUTE_MS,
    };
  }

  /** Highest token among this key's slots, or -1 when it has none. */
  private latestToken(patient: boolean): number {
    let latest = -1;
    for (let k = 0, n = this.window(); k < n; k++) {
      const state = this.read(this.base(k), patient) & STATE_MASK;
      if (state !== EMPTY && state !== BUSY && this.readIsKey() && this.tokenRead > latest)
        latest = this.tokenRead;
    }
    return latest;
  }

  /**
   * Live leases by the nameHash of their queue (S_QUEUE; 0 for a slot written without one), for the
   * per-queue metrics. Read-only: one pass of consistent slot reads that changes no slot and no gauge.
   */
  leasesByQueue(now: number): Map<number, number> {
    const out = new Map<number, number>();
    for (let slot = 0; slot < this.slotCount; slot++) {
      const base = HEADER_WORDS + slot * SLOT_WORDS;
      if ((Atomics.load(this.words, base) & STATE_MASK) !== LEASED) continue;
      const word = this.read(base, false);
      if ((word & STATE_MASK) !== LEASED || fromSharedSeconds(this.expiryRead) <= now) continue;
      out.set(this.queueRead, (out.get(this.queueRead) ?? 0) + 1);
    }
    return out;
  }
}
