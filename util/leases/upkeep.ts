// Lease table upkeep: the passes over every slot that keep the table honest without a caller asking —
// expired leases seen once (for `requeued`), the occupancy gauge set back to the live count, dead and
// abandoned slots emptied. The grant rules (util/leases/grants.ts), then release and the reports
// (util/leases/table.ts) build on this; `rewrite` lives here because an expiry and a release are both
// one slot transition through BUSY.
import {
  BUSY,
  EMPTY,
  EXPIRED,
  H_OCCUPANCY,
  HEADER_WORDS,
  HELD,
  H_MISSED_EXPIRY,
  H_NEXT_EXPIRY,
  INT32_MAX,
  MISSED_EXPIRY_WORDS,
  LEASED,
  LeaseSlots,
  RELEASE_GRACE_MS,
  RELEASED,
  REPORT_EXPIRY_SEEN,
  REPORT_NONE,
  S_ANSWER,
  S_EXPIRY,
  S_HOLD_OFF,
  S_MISSES,
  S_REPORT,
  SLOT_WORDS,
  STATE_MASK,
  nextWord,
} from './slots.js';
import { fromSharedSeconds, MINUTE_MS, sharedSecondsAtOrAfter } from '../time.js';
import type { HandoffLease } from '../cluster/handoff.js';

/**
 * Reconcile empties slots dead for this long. Grants already take over dead slots in place, so this is
 * housekeeping; the hour keeps a wedged key's miss history and a late result's token readable meanwhile.
 */
export const DEAD_SLOT_RETENTION_MS = 60 * MINUTE_MS;
/** A slot BUSY with the same state word this long apart is abandoned (see reconcile). */
const STUCK_WRITER_MS = 10_000;

/** Slots a sliced reconcile walks between two pauses (~1.5 ms of the walk). */
export const RECONCILE_SLICE_SLOTS = 65_536;

/** The running figures of one reconcile pass. */
interface ReconcilePass {
  now: number;
  occupancy: number;
  oldestExpiry: number;
  oldestToken: number;
  reclaimed: number;
  stuck: Map<number, { word: number; since: number }>;
}

const newPass = (now: number): ReconcilePass => ({
  now,
  occupancy: 0,
  oldestExpiry: INT32_MAX,
  oldestToken: Infinity,
  reclaimed: 0,
  stuck: new Map(),
});

export interface ReconcileResult {
  occupancy: number;
  oldestExpiresAt: number | null;
  oldestGrantedAt: number | null;
  reclaimed: number;
}

export class LeaseUpkeep extends LeaseSlots {
  private stuckSeen = new Map<number, { word: number; since: number }>();
  private slicedPass: Promise<ReconcileResult> | null = null;

  /** Gauge of leases out: exact for grants and releases, high by leases that expired since reconcile. */
  occupancy(): number {
    return Atomics.load(this.words, H_OCCUPANCY);
  }

  /**
   * Leases past their end with no result, each seen once (a `requeued` wake at expiry): marks them,
   * moves them out of the occupancy gauge, and calls `visit` with each one's queue hash. A late result
   * of such a lease is still accepted. One pass over the slots; the keeper runs it every publish. First
   * it empties the missed-expiry mailbox: a lease a claim took over right after its end, before any pass
   * saw it, is visited (once per queue) from there; the answer counts the slots the walk saw end.
   *
   * The pass is skipped while H_NEXT_EXPIRY says no such lease can have ended yet (a drain's leases end
   * minutes out, and the walk over a 1M-slot table took 16-29 ms a publish). Why the word never lets a
   * pass skip a lease that ended: the pass stores INT32_MAX into it first, then walks, then CAS-mins in
   * the soonest end it left for later. Every transition that leaves a slot LEASED or EXPIRED without a
   * report (a grant's publish, a give-back, an aborted report) CAS-mins its end into the word AFTER its
   * state store. If that CAS-min came before this pass's store, so did the state store, and the walk
   * (after the pass's store) sees the slot and folds it in; if it came after, the word has it. A slot the
   * walk cannot settle (torn, BUSY-raced, a lost rewrite) folds in the next second.
   */
  collectExpired(now: number, visit: (queue: number) => void): number {
    const a = this.words;
    for (let w = H_MISSED_EXPIRY; w < H_MISSED_EXPIRY + MISSED_EXPIRY_WORDS; w++) {
      const queue = Atomics.load(a, w);
      if (queue !== 0 && Atomics.compareExchange(a, w, queue, 0) === queue) visit(queue);
    }
    if (fromSharedSeconds(Atomics.load(a, H_NEXT_EXPIRY)) > now) return 0;
    Atomics.store(a, H_NEXT_EXPIRY, INT32_MAX);
    const retry = sharedSecondsAtOrAfter(now);
    let next = INT32_MAX;
    let seen = 0;
    for (let slot = 0; slot < this.slotCount; slot++) {
      const base = HEADER_WORDS + slot * SLOT_WORDS;
      const word = Atomics.load(a, base);
      const state = word & STATE_MASK;
      if (state !== LEASED && state !== EXPIRED) continue;
      if (Atomics.load(a, base + S_REPORT) !== REPORT_NONE) continue;
      // Most live leases are not due to end: one word says so without the slot's consistent read (a
      // torn look only defers a lease to the next pass; the read below decides for the ones left).
      const expiry = Atomics.load(a, base + S_EXPIRY);
      if (fromSharedSeconds(expiry) > now) {
        if (expiry < next) next = expiry;
        continue;
      }
      const read = this.read(base, false);
      if (read !== word || this.reportRead !== REPORT_NONE || fromSharedSeconds(this.expiryRead) > now) {
        next = Math.min(next, retry);
        continue;
      }
      const queue = this.queueRead;
      if (!this.rewrite(base, word, EXPIRED, 0, REPORT_EXPIRY_SEEN, this.answerRead)) {
        next = Math.min(next, retry);
        continue;
      }
      seen++;
      visit(queue);
    }
    this.noteExpiry(next);
    return seen;
  }

  /**
   * A grant took over a lease that ended unseen: its queue goes into the mailbox for the next
   * collectExpired (H_MISSED_EXPIRY). A queue already waiting there is not added twice.
   */
  protected noteMissedExpiry(queue: number): void {
    if (queue === 0) return;
    const a = this.words;
    const start = (queue >>> 0) % MISSED_EXPIRY_WORDS;
    for (let i = 0; i < MISSED_EXPIRY_WORDS; i++) {
      const w = H_MISSED_EXPIRY + ((start + i) % MISSED_EXPIRY_WORDS);
      const was = Atomics.load(a, w);
      if (was === queue) return;
      if (was === 0 && Atomics.compareExchange(a, w, 0, queue) === 0) return;
      if (Atomics.load(a, w) === queue) return;
    }
  }

  /**
   * The leases to hand over with rows this node no longer holds (util/cluster/handoff.ts): every live
   * lease and active hold whose key `holds` says no to, and every lease released within the last
   * `releasedForMs`, held off until that long after its release (its row write may reach the new holder late). One pass over
   * the slots; worker 0's beats run it in slices (handoffScanInSlices) a few times after each membership
   * change.
   */
  handoffScan(
    now: number,
    holds: (hi: number, lo: number) => boolean,
    releasedForMs: number,
  ): HandoffLease[] {
    const out: HandoffLease[] = [];
    this.handoffSlots(now, holds, releasedForMs, 0, this.slotCount, out);
    return out;
  }

  /** handoffScan in slices of `sliceSlots`, yielding to `pause` between them (a big table's pass). */
  async handoffScanInSlices(
    now: number,
    holds: (hi: number, lo: number) => boolean,
    releasedForMs: number,
    pause: () => Promise<void>,
    sliceSlots = RECONCILE_SLICE_SLOTS,
  ): Promise<HandoffLease[]> {
    const out: HandoffLease[] = [];
    for (let from = 0; from < this.slotCount; from += sliceSlots) {
      if (from > 0) await pause();
      this.handoffSlots(now, holds, releasedForMs, from, Math.min(this.slotCount, from + sliceSlots), out);
    }
    return out;
  }

  private handoffSlots(
    now: number,
    holds: (hi: number, lo: number) => boolean,
    releasedForMs: number,
    from: number,
    to: number,
    out: HandoffLease[],
  ): void {
    const a = this.words;
    for (let slot = from; slot < to; slot++) {
      const base = HEADER_WORDS + slot * SLOT_WORDS;
      const state = Atomics.load(a, base) & STATE_MASK;
      if (state !== LEASED && state !== RELEASED && state !== HELD && state !== BUSY) continue;
      const word = this.read(base, true);
      const read = word & STATE_MASK;
      const end = fromSharedSeconds(this.expiryRead);
      let until: number;
      if ((read === LEASED || read === HELD) && end > now) until = this.expiryRead;
      else if (read === RELEASED && end - RELEASE_GRACE_MS + releasedForMs > now)
        until = sharedSecondsAtOrAfter(end - RELEASE_GRACE_MS + releasedForMs);
      else continue;
      if (holds(this.hashHiRead, this.hashLoRead)) continue;
      out.push({
        hi: this.hashHiRead,
        lo: this.hashLoRead,
        until,
        dueMinute: this.dueRead,
        misses: this.missesRead,
        ...(read === RELEASED ? { released: true } : read === HELD ? { held: true } : {}),
      });
    }
  }

  /** Lowers H_NEXT_EXPIRY to `expirySec` (a lease end collectExpired must not skip past). */
  protected noteExpiry(expirySec: number): void {
    const a = this.words;
    for (;;) {
      const was = Atomics.load(a, H_NEXT_EXPIRY);
      if (was <= expirySec || Atomics.compareExchange(a, H_NEXT_EXPIRY, was, expirySec) === was) return;
    }
  }

  /**
   * One transition of a slot through BUSY: the state word CAS (its generation makes a slot reused
   * since the read fail it), then the report words, the expiry and misses of a release, then the new
   * state. False when another writer got there first.
   */
  protected rewrite(
    base: number,
    word: number,
    state: number,
    now: number,
    report: number,
    answer: number,
  ): boolean {
    const a = this.words;
    const busy = nextWord(word, BUSY);
    if (Atomics.compareExchange(a, base, word, busy) !== word) return false;
    const was = word & STATE_MASK;
    if (was === LEASED && state !== LEASED) Atomics.sub(a, H_OCCUPANCY, 1);
    if (state === RELEASED && was !== RELEASED) {
      // A handed-over lease of another node may block the key for longer (S_HOLD_OFF).
      a[base + S_EXPIRY] = Math.max(sharedSecondsAtOrAfter(now + RELEASE_GRACE_MS), a[base + S_HOLD_OFF]!);
      a[base + S_MISSES] = 0;
    }
    a[base + S_REPORT] = report;
    a[base + S_ANSWER] = answer;
    const expiry = a[base + S_EXPIRY]!;
    Atomics.store(a, base, nextWord(busy, state));
    // An aborted report leaves a lease that collectExpired must see end again (see there).
    if (report === REPORT_NONE && (state === LEASED || state === EXPIRED)) this.noteExpiry(expiry);
    return true;
  }

  /**
   * Full slot scan (run on every status sync): counts live leases, moves expired ones out of the gauge,
   * empties slots dead longer than DEAD_SLOT_RETENTION_MS, and stores the figures in the header.
   */
  reconcile(now: number): ReconcileResult {
    const pass = newPass(now);
    this.reconcileSlots(pass, 0, this.slotCount);
    return this.endPass(pass);
  }

  /**
   * reconcile in slices of `sliceSlots` with `pause()` between them, so the worker's event loop serves
   * claims meanwhile (the whole walk over 1,048,576 slots takes ~20-30 ms). Decides every slot as of
   * `now`. A call while a sliced pass runs gets that pass's result.
   */
  reconcileInSlices(
    now: number,
    pause: () => Promise<void>,
    sliceSlots = RECONCILE_SLICE_SLOTS,
  ): Promise<ReconcileResult> {
    if (this.slicedPass) return this.slicedPass;
    const run = async (): Promise<ReconcileResult> => {
      const pass = newPass(now);
      for (let from = 0; from < this.slotCount; from += sliceSlots) {
        if (from > 0) await pause();
        this.reconcileSlots(pass, from, Math.min(this.slotCount, from + sliceSlots));
      }
      return this.endPass(pass);
    };
    const running = run().finally(() => {
      if (this.slicedPass === running) this.slicedPass = null;
    });
    this.slicedPass = running;
    return running;
  }

  private reconcileSlots(pass: ReconcilePass, from: number, to: number): void {
    const a = this.words;
    const now = pass.now;
    for (let slot = from; slot < to; slot++) {
      const base = HEADER_WORDS + slot * SLOT_WORDS;
      let word = Atomics.load(a, base);
      let state = word & STATE_MASK;
      if (state === EMPTY) continue;
      // Dead and grace slots (most of a big table after a few drains) need only their end: one word,
      // which the CAS below checks against the state word it came with. Live and BUSY slots get the
      // consistent read (a dozen words) that the figures and the stuck-writer check need.
      const consistent = state === LEASED || state === BUSY;
      if (consistent) {
        word = this.read(base, false);
        state = word & STATE_MASK;
        if (state === EMPTY) continue;
      }
      if (state === BUSY) {
        // The same BUSY word STUCK_WRITER_MS later is a writer that died mid-section (a terminated
        // worker); a live one finishes in microseconds. Freeing the slot loses at most that one lease.
        const seen = this.stuckSeen.get(slot);
        if (seen?.word !== word) pass.stuck.set(slot, { word, since: now });
        else if (now - seen.since < STUCK_WRITER_MS) pass.stuck.set(slot, seen);
        else if (Atomics.compareExchange(a, base, word, nextWord(word, EMPTY)) === word) pass.reclaimed++;
        continue;
      }
      const expirySec = consistent ? this.expiryRead : Atomics.load(a, base + S_EXPIRY);
      const end = fromSharedSeconds(expirySec);
      if (state === LEASED && end > now) {
        pass.occupancy++;
        pass.oldestExpiry = Math.min(pass.oldestExpiry, expirySec);
        pass.oldestToken = Math.min(pass.oldestToken, this.tokenRead);
        continue;
      }
      if (state === LEASED) {
        const expired = nextWord(word, EXPIRED);
        if (Atomics.compareExchange(a, base, word, expired) !== word) continue;
        Atomics.sub(a, H_OCCUPANCY, 1);
        word = expired;
        state = EXPIRED;
      }
      if (state === HELD && end > now) continue;
      const deadSince = state === EXPIRED ? end + RELEASE_GRACE_MS : end;
      if (
        now - deadSince >= DEAD_SLOT_RETENTION_MS &&
        Atomics.compareExchange(a, base, word, nextWord(word, EMPTY)) === word
      ) {
        pass.reclaimed++;
      }
    }
  }

  private endPass(pass: ReconcilePass): ReconcileResult {
    const { now, occupancy, oldestExpiry, oldestToken, reclaimed } = pass;
    this.stuckSeen = pass.stuck;
    this.storeReconcile(now, occupancy, oldestExpiry, oldestToken);
    return {
      occupancy,
      oldestExpiresAt: occupancy > 0 ? fromSharedSeconds(oldestExpiry) : null,
      oldestGrantedAt: occupancy > 0 ? oldestToken : null,
      reclaimed,
    };
  }
}
