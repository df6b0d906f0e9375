// Lease table upkeep: the passes over every slot that keep the table honest without a caller asking —
// expired leases seen once (for `requeued`), the occupancy gauge set back to the live count, dead and
// abandoned slots emptied — and the read-only passes for the per-queue metrics and the leases to hand
// over to another node. Each works through the table's memory (util/leases/memory.ts).
import { H, Report, S, State, INT32_MAX, RELEASE_GRACE_MS, TOKEN_SPLIT, nextWord } from './slots.js';
import { SlotView, type SlotMemory } from './memory.js';
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

/** What reconcile leaves in the header for every worker (the overview's lease figures). */
export interface StoredReconcile {
  occupancy: number;
  at: number;
  oldestExpiresAt: number | null;
  oldestGrantedAt: number | null;
}

export interface ReconcileResult {
  occupancy: number;
  oldestExpiresAt: number | null;
  oldestGrantedAt: number | null;
  reclaimed: number;
}

/** The passes over every slot of one table's memory, with what they carry from one pass to the next. */
export class LeaseUpkeep {
  /** BUSY slots the last reconcile saw, with their word and since when (a writer that died). */
  private stuckSeen = new Map<number, { word: number; since: number }>();
  private slicedPass: Promise<ReconcileResult> | null = null;

  constructor(private readonly mem: SlotMemory) {}

  /**
   * Leases past their end with no result, each seen once (a `requeued` wake at expiry): marks them,
   * moves them out of the occupancy gauge, and calls `visit` with each one's queue hash. A late result
   * of such a lease is still accepted. One pass over the slots; the keeper runs it every publish. First
   * it empties the missed-expiry mailbox: a lease a claim took over right after its end, before any pass
   * saw it, is visited (once per queue) from there; the answer counts the slots the walk saw end.
   *
   * The pass is skipped while H.NEXT_EXPIRY says no such lease can have ended yet (a drain's leases end
   * minutes out, and a walk over a 1M-slot table takes 16-29 ms, bench/lease-scans.ts). Why the word
   * never lets a pass skip a lease that ended: the pass stores INT32_MAX into it first, then walks, then
   * CAS-mins in the soonest end it left for later. Every transition that leaves a slot LEASED or EXPIRED
   * without a report (a grant's publish, a give-back, an aborted report) CAS-mins its end into the word
   * AFTER its state store. If that CAS-min came before this pass's store, so did the state store, and the
   * walk (after the pass's store) sees the slot and folds it in; if it came after, the word has it. A
   * slot the walk cannot settle (torn, BUSY-raced, a lost rewrite) folds in the next second.
   */
  collectExpired(now: number, visit: (queue: number) => void): number {
    const a = this.mem.words;
    for (let w = H.MISSED_EXPIRY; w < H.MISSED_EXPIRY + H.MISSED_EXPIRY_WORDS; w++) {
      const queue = Atomics.load(a, w);
      if (queue !== 0 && Atomics.compareExchange(a, w, queue, 0) === queue) visit(queue);
    }
    if (fromSharedSeconds(Atomics.load(a, H.NEXT_EXPIRY)) > now) return 0;
    Atomics.store(a, H.NEXT_EXPIRY, INT32_MAX);
    const retry = sharedSecondsAtOrAfter(now);
    const view = new SlotView();
    let next = INT32_MAX;
    let seen = 0;
    for (let slot = 0; slot < this.mem.slotCount; slot++) {
      const base = this.mem.base(slot);
      const word = Atomics.load(a, base);
      const state = word & State.MASK;
      if (state !== State.LEASED && state !== State.EXPIRED) continue;
      if (Atomics.load(a, base + S.REPORT) !== Report.NONE) continue;
      // Most live leases are not due to end: one word says so without the slot's consistent read (a
      // torn look only defers a lease to the next pass; the read below decides for the ones left).
      const expiry = Atomics.load(a, base + S.EXPIRY);
      if (fromSharedSeconds(expiry) > now) {
        if (expiry < next) next = expiry;
        continue;
      }
      const read = this.mem.read(base, false, view);
      if (read !== word || view.report !== Report.NONE || fromSharedSeconds(view.expiry) > now) {
        next = Math.min(next, retry);
        continue;
      }
      const queue = view.queue;
      if (!this.mem.rewrite(base, word, State.EXPIRED, 0, Report.EXPIRY_SEEN, view.answer)) {
        next = Math.min(next, retry);
        continue;
      }
      seen++;
      visit(queue);
    }
    this.mem.noteExpiry(next);
    return seen;
  }

  /**
   * Live leases by the nameHash of their queue (S.QUEUE; 0 for a slot written without one), for the
   * per-queue metrics. Read-only: one pass of consistent slot reads that changes no slot and no gauge.
   */
  leasesByQueue(now: number): Map<number, number> {
    const out = new Map<number, number>();
    const view = new SlotView();
    for (let slot = 0; slot < this.mem.slotCount; slot++) {
      const base = this.mem.base(slot);
      if ((Atomics.load(this.mem.words, base) & State.MASK) !== State.LEASED) continue;
      const word = this.mem.read(base, false, view);
      if ((word & State.MASK) !== State.LEASED || fromSharedSeconds(view.expiry) <= now) continue;
      out.set(view.queue, (out.get(view.queue) ?? 0) + 1);
    }
    return out;
  }

  /**
   * The leases to hand over with rows this node no longer holds (util/cluster/handoff.ts): every live
   * lease and active hold whose key `holds` says no to, and every lease released within the last
   * `releasedForMs`, held off until that long after its release (its row write may reach the new holder
   * late). One pass over the slots; worker 0's beats run it in slices (handoffScanInSlices) a few times
   * after each membership change.
   */
  handoffScan(
    now: number,
    holds: (hi: number, lo: number) => boolean,
    releasedForMs: number,
  ): HandoffLease[] {
    const out: HandoffLease[] = [];
    this.handoffSlots(now, holds, releasedForMs, 0, this.mem.slotCount, out);
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
    for (let from = 0; from < this.mem.slotCount; from += sliceSlots) {
      if (from > 0) await pause();
      this.handoffSlots(
        now,
        holds,
        releasedForMs,
        from,
        Math.min(this.mem.slotCount, from + sliceSlots),
        out,
      );
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
    const a = this.mem.words;
    const view = new SlotView();
    for (let slot = from; slot < to; slot++) {
      const base = this.mem.base(slot);
      const state = Atomics.load(a, base) & State.MASK;
      if (state !== State.LEASED && state !== State.RELEASED && state !== State.HELD && state !== State.BUSY)
        continue;
      const read = this.mem.read(base, true, view) & State.MASK;
      const end = fromSharedSeconds(view.expiry);
      let until: number;
      if ((read === State.LEASED || read === State.HELD) && end > now) until = view.expiry;
      else if (read === State.RELEASED && end - RELEASE_GRACE_MS + releasedForMs > now)
        until = sharedSecondsAtOrAfter(end - RELEASE_GRACE_MS + releasedForMs);
      else continue;
      if (holds(view.hashHi, view.hashLo)) continue;
      out.push({
        hi: view.hashHi,
        lo: view.hashLo,
        until,
        dueMinute: view.due,
        misses: view.misses,
        ...(read === State.RELEASED ? { released: true } : read === State.HELD ? { held: true } : {}),
      });
    }
  }

  /**
   * Full slot scan (run on every status sync): counts live leases, moves expired ones out of the gauge,
   * empties slots dead longer than DEAD_SLOT_RETENTION_MS, and stores the figures in the header.
   */
  reconcile(now: number): ReconcileResult {
    const pass = newPass(now);
    this.reconcileSlots(pass, 0, this.mem.slotCount);
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
      for (let from = 0; from < this.mem.slotCount; from += sliceSlots) {
        if (from > 0) await pause();
        this.reconcileSlots(pass, from, Math.min(this.mem.slotCount, from + sliceSlots));
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
    const a = this.mem.words;
    const now = pass.now;
    const view = new SlotView();
    for (let slot = from; slot < to; slot++) {
      const base = this.mem.base(slot);
      let word = Atomics.load(a, base);
      let state = word & State.MASK;
      if (state === State.EMPTY) continue;
      // Dead and grace slots (most of a big table after a few drains) need only their end: one word,
      // which the CAS below checks against the state word it came with. Live and BUSY slots get the
      // consistent read (a dozen words) that the figures and the stuck-writer check need.
      const consistent = state === State.LEASED || state === State.BUSY;
      if (consistent) {
        word = this.mem.read(base, false, view);
        state = word & State.MASK;
        if (state === State.EMPTY) continue;
      }
      if (state === State.BUSY) {
        // The same BUSY word STUCK_WRITER_MS later is a writer that died mid-section (a terminated
        // worker); a live one finishes in microseconds. Freeing the slot loses at most that one lease.
        const seen = this.stuckSeen.get(slot);
        if (seen?.word !== word) pass.stuck.set(slot, { word, since: now });
        else if (now - seen.since < STUCK_WRITER_MS) pass.stuck.set(slot, seen);
        else if (Atomics.compareExchange(a, base, word, nextWord(word, State.EMPTY)) === word)
          pass.reclaimed++;
        continue;
      }
      const expirySec = consistent ? view.expiry : Atomics.load(a, base + S.EXPIRY);
      const end = fromSharedSeconds(expirySec);
      if (state === State.LEASED && end > now) {
        pass.occupancy++;
        pass.oldestExpiry = Math.min(pass.oldestExpiry, expirySec);
        pass.oldestToken = Math.min(pass.oldestToken, view.token);
        continue;
      }
      if (state === State.LEASED) {
        const expired = nextWord(word, State.EXPIRED);
        if (Atomics.compareExchange(a, base, word, expired) !== word) continue;
        Atomics.sub(a, H.OCCUPANCY, 1);
        word = expired;
        state = State.EXPIRED;
      }
      if (state === State.HELD && end > now) continue;
      const deadSince = state === State.EXPIRED ? end + RELEASE_GRACE_MS : end;
      if (
        now - deadSince >= DEAD_SLOT_RETENTION_MS &&
        Atomics.compareExchange(a, base, word, nextWord(word, State.EMPTY)) === word
      ) {
        pass.reclaimed++;
      }
    }
  }

  /** The figures the last reconcile stored (by any worker), with when it ran; null before the first. */
  lastReconcile(): StoredReconcile | null {
    const a = this.mem.words;
    if (Atomics.load(a, H.REC_DONE) === 0) return null;
    const hi = a[H.REC_OLDEST_TOKEN_HI]!;
    return {
      occupancy: a[H.REC_OCCUPANCY]!,
      at: fromSharedSeconds(a[H.REC_AT]!),
      oldestExpiresAt: hi < 0 ? null : fromSharedSeconds(a[H.REC_OLDEST_EXPIRY]!),
      oldestGrantedAt: hi < 0 ? null : hi * TOKEN_SPLIT + (a[H.REC_OLDEST_TOKEN_LO]! >>> 0),
    };
  }

  private storeReconcile(now: number, occupancy: number, oldestExpirySec: number, oldestToken: number): void {
    const a = this.mem.words;
    // Plain stores: a reader racing two reconciles may mix their figures, which a gauge tolerates.
    a[H.REC_OCCUPANCY] = occupancy;
    a[H.REC_AT] = sharedSecondsAtOrAfter(now);
    a[H.REC_OLDEST_EXPIRY] = oldestExpirySec;
    a[H.REC_OLDEST_TOKEN_HI] = occupancy > 0 ? Math.floor(oldestToken / TOKEN_SPLIT) : -1;
    a[H.REC_OLDEST_TOKEN_LO] = occupancy > 0 ? oldestToken % TOKEN_SPLIT : 0;
    Atomics.store(a, H.REC_DONE, 1);
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
