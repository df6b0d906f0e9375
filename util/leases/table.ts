// The lease table: which keys are out with a renderer right now, shared by every worker thread of one
// process through a plain ArrayBuffer (SPEC §3). Lock-free apart from a per-slot write section of a
// handful of stores (see util/leases/slots.ts for the layout and the seqlock reads; the reconcile and
// expiry passes over every slot are in util/leases/upkeep.ts).
//
// Keys live by open addressing over the 64-bit key hash, in a window of slots starting at the key's home
// slot, with no tombstones: every lookup walks the whole window, so a slot emptied or reused in place
// never breaks another key's chain. A window spans 8 slots until a grant finds no room in it (all live
// leases, release graces, holds, or expired leases inside their grace): that grant grows the window of
// its home (S_REACH, only ever raised, up to MAX_REACH) to the first free slot further on, before it
// publishes there, so every later lookup of any key of that home walks that far. A key is refused
// `full` only when MAX_REACH slots in a row block. A slot of a key that is dead for good (released past
// its grace, expired past the grace, an ended hold) may be taken over in place by another key when its
// window has no empty slot.
//
// Exclusivity: two grants of one key may publish on different slots; each then re-reads its home's reach
// and rescans the whole window. A grant raises the reach before it publishes and rescans after, so in
// the sequentially consistent order of the atomics at least one of the two sees the other (the
// later-rescanning one reads a reach that covers the other's slot) and gives its slot back.
import {
  BUSY,
  EMPTY,
  H_OCCUPANCY,
  HEADER_WORDS,
  HELD,
  LEASED,
  NO_DUE,
  REPORT_ACCEPTED,
  REPORT_NONE,
  REPORT_PENDING,
  REPORT_UNKNOWN_JOB,
  RELEASE_GRACE_MS,
  RELEASED,
  S_DUE,
  S_EXPIRY,
  S_MISSES,
  S_REACH,
  SLOT_WORDS,
  STATE_MASK,
  blocks,
  nextWord,
  slotCountFor,
  toMinute,
} from './slots.js';
import { fromSharedSeconds, MINUTE_MS, minuteOf, sharedSecondsAtOrAfter } from '../time.js';
import { formatToken, parseToken, randomWord } from './token.js';
import { LeaseUpkeep } from './upkeep.js';

export { MAX_REACH, PROBE_WINDOW, RELEASE_GRACE_MS } from './slots.js';
export { DEAD_SLOT_RETENTION_MS, type ReconcileResult } from './upkeep.js';

/** A grant retries when a CAS loses to another writer in its window; past this it refuses as full. */
const MAX_ATTEMPTS = 16;

export interface GrantOptions {
  leaseMs: number;
  dueMs: number;
  cadenceMs: number;
  fastRetries: number;
  /** nameHash of the user the lease goes to (0: nobody in particular). */
  user?: number;
  /** nameHash of the job's queue, so an expiry can name it (0: unknown). */
  queue?: number;
}
export type GrantResult =
  | {
      ok: true;
      /** The opaque lease token (grant instant + 64 random bits) the caller must report with. */
      token: string;
      /** The grant instant in ms: a key's grants only grow in it. */
      grantedAt: number;
      expiresAt: number;
      misses: number;
      /** The key's previous lease expired unreported (a miss). */
      requeued: boolean;
    }
  | {
      ok: false;
      reason: 'leased' | 'grace' | 'held' | 'full';
      expiresAt?: number;
      heldUntil?: number;
      misses?: number;
    };
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
/** Where a test may interleave another worker's grant: before the claim CAS, before publish, before rescan. */
export type GrantStep = 'scanned' | 'claimed' | 'published';
export interface LeaseTableOptions {
  onGrantStep?: (step: GrantStep, slot: number) => void;
  /** 32 random bits per call (tests inject a fixed sequence); the OS CSPRNG by default. */
  random?: () => number;
}

/** What lookup calls a slot state while it still blocks, and after. */
const VIEWS: Partial<Record<number, [LeaseState, LeaseState]>> = {
  [LEASED]: ['leased', 'expired'],
  [RELEASED]: ['grace', 'released'],
  [HELD]: ['held', 'expired'],
};

export class LeaseTable extends LeaseUpkeep {
  /** Bytes needed for `maxLeases`; allocate the shared buffer with this. */
  static byteLength(maxLeases: number): number {
    return (HEADER_WORDS + slotCountFor(maxLeases) * SLOT_WORDS) * 4;
  }

  private readonly onGrantStep: ((step: GrantStep, slot: number) => void) | undefined;
  private readonly random: () => number;
  private readonly undo = new Int32Array(SLOT_WORDS);

  constructor(buffer: ArrayBuffer | SharedArrayBuffer, maxLeases: number, options: LeaseTableOptions = {}) {
    super(buffer, maxLeases);
    this.onGrantStep = options.onGrantStep;
    this.random = options.random ?? randomWord;
  }

  /**
   * Grants `key` exclusively, or says why not. An expired lease of the key counts a miss and reports
   * `requeued`; enough misses hold the key instead (SPEC §3).
   */
  grant(key: string, now: number, options: GrantOptions): GrantResult {
    if (!(options.leaseMs > 0)) throw new RangeError('leaseMs must be positive');
    this.hash(key);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const result = this.tryGrant(now, options);
      if (result !== undefined) return result;
    }
    return { ok: false, reason: 'full' };
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
   * Starts reporting the lease `token` names (SPEC §3 result, API.md idempotent results). Only the
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
    return this.blocksCurrent(now);
  }

  /** isLeased for a key whose keyHash the caller already holds (the keeper stores one per row). */
  isLeasedHash(hi: number, lo: number, now: number): boolean {
    this.useHash(hi, lo);
    return this.blocksCurrent(now);
  }

  private blocksCurrent(now: number): boolean {
    for (let k = 0, n = this.window(); k < n; k++) {
      const word = this.read(this.base(k), false);
      if (this.readIsKey() && blocks(word & STATE_MASK, this.expiryRead, now)) return true;
    }
    return false;
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

  private tryGrant(now: number, options: GrantOptions): GrantResult | undefined {
    let own = -1;
    let ownWord = 0;
    let ownToken = -1;
    let ownDue = 0;
    let ownMisses = 0;
    let ownReport = REPORT_NONE;
    let empty = -1;
    let emptyWord = 0;
    let emptyK = 0;
    let spare = -1;
    let spareWord = 0;
    let spareRank = 3;
    let spareEnd = Infinity;
    let spareK = 0;
    // The window first; only when it has no room, on past it to the first slot that has (see the top).
    const window = this.window();
    for (let k = 0, n = this.maxReach; k < n; k++) {
      if (k >= window && (own >= 0 || empty >= 0 || spare >= 0)) break;
      const base = this.base(k);
      const word = this.read(base, false);
      const state = word & STATE_MASK;
      // A slot still BUSY after the spins is a stalled writer; skipping it is safe because a grant
      // racing through it rescans after publishing, and one of the two gives its slot back.
      if (state === BUSY) continue;
      if (state === EMPTY) {
        if (empty < 0) {
          empty = base;
          emptyWord = word;
          emptyK = k;
        }
        continue;
      }
      const end = fromSharedSeconds(this.expiryRead);
      if (this.readIsKey()) {
        const refusal = this.refusal(state, now);
        if (refusal !== undefined) return refusal;
        if (this.tokenRead > ownToken) {
          own = base;
          ownWord = word;
          ownToken = this.tokenRead;
          ownDue = this.dueRead;
          ownMisses = this.missesRead;
          ownReport = this.reportRead;
        }
        continue;
      }
      // Another key's slot can be taken over once it is dead for good; released ones go first, then
      // expired, then ended holds, whose miss history is worth the most. Oldest first within a rank.
      const rank =
        state === RELEASED && end <= now
          ? 0
          : state !== HELD && end + RELEASE_GRACE_MS <= now
            ? 1
            : state === HELD && end <= now
              ? 2
              : 3;
      if (rank < 3 && (rank < spareRank || (rank === spareRank && end < spareEnd))) {
        spare = base;
        spareWord = word;
        spareRank = rank;
        spareEnd = end;
        spareK = k;
      }
    }
    const dueMinute = toMinute(options.dueMs);
    if (own >= 0) {
      const ownState = ownWord & STATE_MASK;
      const sameDue = ownDue === dueMinute;
      if (ownState === HELD) {
        // The hold ran out: this grant is the probe, and its own expiry will count the next miss.
        return this.take(
          own,
          ownWord,
          Math.max(Math.floor(now), ownToken + 1),
          now,
          options,
          sameDue ? ownMisses : 0,
          false,
        );
      }
      // A lease whose result came (released, or kept by the fast-retry lane) was not lost: no requeue.
      const reported =
        ownState === RELEASED || ownReport === REPORT_ACCEPTED || ownReport === REPORT_UNKNOWN_JOB;
      const requeued = !reported;
      const misses = requeued ? (sameDue ? ownMisses : 0) + 1 : sameDue ? ownMisses + 1 : 0;
      if (misses >= options.fastRetries + 2) return this.hold(own, ownWord, now, options, misses, dueMinute);
      return this.take(own, ownWord, Math.max(Math.floor(now), ownToken + 1), now, options, misses, requeued);
    }
    if (empty < 0 && spare < 0) return { ok: false, reason: 'full' };
    const [slot, slotWord, k] = empty >= 0 ? [empty, emptyWord, emptyK] : [spare, spareWord, spareK];
    // Raised before the claim: a lookup that reads the reach after this grant publishes must walk here.
    if (k >= window) this.reach(k + 1);
    return this.take(slot, slotWord, Math.floor(now), now, options, 0, false);
  }

  /** Claims the slot at `base` for this key, publishes the lease, and keeps it only if no rival did. */
  private take(
    base: number,
    word: number,
    token: number,
    now: number,
    options: GrantOptions,
    misses: number,
    requeued: boolean,
  ): GrantResult | undefined {
    const a = this.words;
    const slot = (base - HEADER_WORDS) / SLOT_WORDS;
    this.onGrantStep?.('scanned', slot);
    const claimed = nextWord(word, BUSY);
    // The claim CAS: of two grants that picked this slot, one wins and the other rescans from the top.
    if (Atomics.compareExchange(a, base, word, claimed) !== word) return undefined;
    if ((word & STATE_MASK) === LEASED) Atomics.sub(a, H_OCCUPANCY, 1);
    for (let w = 1; w < S_REACH; w++) this.undo[w] = a[base + w]!;
    const expiry = sharedSecondsAtOrAfter(now + options.leaseMs);
    const grant = {
      randHi: this.random() | 0,
      randLo: this.random() | 0,
      user: options.user ?? 0,
      queue: options.queue ?? 0,
    };
    this.writeFields(base, expiry, toMinute(options.dueMs), misses, token, grant);
    this.onGrantStep?.('claimed', slot);
    // Count before publishing and uncount after unpublishing, so the gauge can only run high.
    Atomics.add(a, H_OCCUPANCY, 1);
    const published = nextWord(claimed, LEASED);
    Atomics.store(a, base, published);
    this.onGrantStep?.('published', slot);
    // Two grants of one key on different slots each publish, then rescan: sequentially consistent
    // atomics guarantee at least one sees the other and gives its slot back. Without this rescan both
    // would hand the job out.
    for (let k = 0, n = this.window(); k < n; k++) {
      const other = this.base(k);
      if (other === base) continue;
      const otherWord = this.read(other, false);
      if (!this.readIsKey() || !blocks(otherWord & STATE_MASK, this.expiryRead, now)) continue;
      const refusal = this.refusal(otherWord & STATE_MASK, now);
      this.giveBack(base, published, word);
      return refusal;
    }
    return {
      ok: true,
      token: formatToken({ grantedAt: token, randHi: grant.randHi, randLo: grant.randLo }),
      grantedAt: token,
      expiresAt: fromSharedSeconds(expiry),
      misses,
      requeued,
    };
  }

  /** Puts a slot this grant published back the way it found it. */
  private giveBack(base: number, published: number, original: number): void {
    const a = this.words;
    const busy = nextWord(published, BUSY);
    // Nothing else writes a live slot whose token only this grant knows, so the exchange cannot lose.
    if (Atomics.compareExchange(a, base, published, busy) !== published) return;
    Atomics.sub(a, H_OCCUPANCY, 1);
    for (let w = 1; w < S_REACH; w++) a[base + w] = this.undo[w]!;
    const state = original & STATE_MASK;
    if (state === LEASED) Atomics.add(a, H_OCCUPANCY, 1);
    Atomics.store(a, base, nextWord(busy, state));
  }

  private hold(
    base: number,
    word: number,
    now: number,
    options: GrantOptions,
    misses: number,
    dueMinute: number,
  ): GrantResult | undefined {
    const a = this.words;
    if (Atomics.compareExchange(a, base, word, nextWord(word, BUSY)) !== word) return undefined;
    if ((word & STATE_MASK) === LEASED) Atomics.sub(a, H_OCCUPANCY, 1);
    // 2 leases at the first hold, then 4, 8 … never longer than the cadence.
    const holdMs = Math.min(
      options.cadenceMs,
      options.leaseMs * 2 ** Math.min(misses - options.fastRetries - 1, 40),
    );
    const until = sharedSecondsAtOrAfter(now + holdMs);
    a[base + S_EXPIRY] = until;
    a[base + S_DUE] = dueMinute;
    a[base + S_MISSES] = misses;
    Atomics.store(a, base, nextWord(nextWord(word, BUSY), HELD));
    return { ok: false, reason: 'held', heldUntil: fromSharedSeconds(until), misses };
  }

  private refusal(state: number, now: number): GrantResult | undefined {
    if (!blocks(state, this.expiryRead, now)) return undefined;
    const end = fromSharedSeconds(this.expiryRead);
    if (state === HELD) return { ok: false, reason: 'held', heldUntil: end, misses: this.missesRead };
    return { ok: false, reason: state === LEASED ? 'leased' : 'grace', expiresAt: end };
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
