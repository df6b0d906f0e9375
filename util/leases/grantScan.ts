// The two halves of a grant that write no slot: the scan of a key's window, which reads it and records
// what it found there (GrantScan), and the pure decision over that record (GrantPlan) that
// util/leases/grant.ts carries out. The window rules and the exclusivity argument are at the top of
// util/leases/grant.ts.
import { fromSharedSeconds } from '../time.js';
import type { HandoffLease } from '../cluster/handoff.js';
import { Report, State, RELEASE_GRACE_MS, blocks, toMinute } from './slots.js';
import type { KeyRef, SlotMemory, SlotView } from './memory.js';

export interface GrantOptions {
  leaseMs: number;
  dueMs: number;
  cadenceMs: number;
  fastRetries: number;
  /** nameHash of the user the lease goes to (0: nobody in particular). */
  user?: number;
  /** nameHash of the claim's `x-worker-id` ("" when it sent none): with `user`, the lease's grantee. */
  worker?: number;
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

/**
 * A slot a grant may write: its word index (-1 while the scan has found none), the state word its CAS
 * must find there, and its position k in the window.
 */
export interface SlotPick {
  base: number;
  word: number;
  k: number;
}
/** The key's latest slot that no longer blocks it, with what the next grant carries over from it. */
export interface OwnSlot extends SlotPick {
  token: number;
  due: number;
  misses: number;
  report: number;
}
/** Another key's slot that is dead for good: rank 0 released, 1 expired, 2 an ended hold. */
export interface SparePick extends SlotPick {
  rank: number;
  end: number;
}
/** A slot of the key that still blocks it, as read (an adopted lease may lengthen it). */
export interface BlockingSlot {
  base: number;
  word: number;
  expiry: number;
  report: number;
}

/**
 * What one scan of a key's window found. The grant that owns it passes it to every scan (scanWindow
 * empties it first), so a grant allocates no candidates; a slot field whose `base` is -1 was not found.
 */
export class GrantScan {
  /** The window's span when the scan began: a pick at or past it must raise the reach first. */
  window = 0;
  /** Why the key is refused, when a slot of it blocks it; the candidates are then incomplete. */
  refusal: GrantResult | null = null;
  /** The slot that refuses it, when it could be read (none for a BUSY slot of the key). */
  readonly blocking: BlockingSlot = { base: -1, word: 0, expiry: 0, report: 0 };
  readonly own: OwnSlot = { base: -1, word: 0, k: 0, token: 0, due: 0, misses: 0, report: 0 };
  /** The first empty slot. */
  readonly empty: SlotPick = { base: -1, word: 0, k: 0 };
  /** The best dead slot of another key: lowest rank, then the oldest end. */
  readonly spare: SparePick = { base: -1, word: 0, k: 0, rank: 3, end: Infinity };

  /** Forgets the last scan: the next one spans `window` slots. */
  reset(window: number): void {
    this.window = window;
    this.refusal = null;
    this.blocking.base = this.own.base = this.empty.base = this.spare.base = -1;
  }
}

/** The refusal a slot of the key (read into `view`, in `state`) gives at `now`; null if it blocks no more. */
export function refusalOf(state: number, view: SlotView, now: number): GrantResult | null {
  if (!blocks(state, view.expiry, now)) return null;
  const end = fromSharedSeconds(view.expiry);
  if (state === State.HELD) return { ok: false, reason: 'held', heldUntil: end, misses: view.misses };
  return { ok: false, reason: state === State.LEASED ? 'leased' : 'grace', expiresAt: end };
}

/** How soon another key's slot may be taken over: 0 released, 1 expired, 2 ended hold, 3 not at all. */
function spareRank(state: number, end: number, now: number): number {
  if (state === State.RELEASED && end <= now) return 0;
  if (state !== State.HELD && end + RELEASE_GRACE_MS <= now) return 1;
  if (state === State.HELD && end <= now) return 2;
  return 3;
}

/**
 * Walks `ref`'s window for the grant and fills `scan` with what it found: the key's own latest slot,
 * the first empty slot and the best spare, or the slot that refuses the key. The window first; only when
 * it has no room, on past it (up to the table's maxReach) to the first slot that has. Reads into `view`;
 * writes no slot.
 */
export function scanWindow(mem: SlotMemory, ref: KeyRef, now: number, view: SlotView, scan: GrantScan): void {
  scan.reset(mem.window(ref));
  const { own, empty, spare } = scan;
  for (let k = 0, n = mem.maxReach; k < n; k++) {
    if (k >= scan.window && (own.base >= 0 || empty.base >= 0 || spare.base >= 0)) return;
    const base = mem.windowBase(ref, k);
    const word = mem.read(base, false, view);
    const state = word & State.MASK;
    // A slot still BUSY after the spins has a stalled writer. Another key's is skipped (a grant of
    // this key racing through it rescans after publishing); this key's may be its live lease under a
    // report or release, which keeps the hash words and never rescans (util/leases/grant.ts).
    if (state === State.BUSY) {
      if (!mem.hashIs(base, ref)) continue;
      scan.refusal = { ok: false, reason: 'leased' };
      return;
    }
    if (state === State.EMPTY) {
      if (empty.base < 0) pick(empty, base, word, k);
      continue;
    }
    if (view.holds(ref)) {
      const refusal = refusalOf(state, view, now);
      if (refusal !== null) {
        scan.refusal = refusal;
        const blocking = scan.blocking;
        blocking.base = base;
        blocking.word = word;
        blocking.expiry = view.expiry;
        blocking.report = view.report;
        return;
      }
      if (own.base < 0 || view.token > own.token) {
        pick(own, base, word, k);
        own.token = view.token;
        own.due = view.due;
        own.misses = view.misses;
        own.report = view.report;
      }
      continue;
    }
    // Another key's slot can be taken over once it is dead for good; released ones go first, then
    // expired, then ended holds, whose miss history is worth the most. Oldest first within a rank.
    const end = fromSharedSeconds(view.expiry);
    const rank = spareRank(state, end, now);
    if (rank < 3 && (spare.base < 0 || rank < spare.rank || (rank === spare.rank && end < spare.end))) {
      pick(spare, base, word, k);
      spare.rank = rank;
      spare.end = end;
    }
  }
}

function pick(into: SlotPick, base: number, word: number, k: number): void {
  into.base = base;
  into.word = word;
  into.k = k;
}

/**
 * What a grant does with what its scan found, filled by decideGrant. Like the scan, it belongs to the
 * grant that carries it out and is filled afresh by each decision, so a grant allocates no plan.
 *   refuse    answer `result` (the scan's refusal, or `full`)
 *   lengthen  an adopted lease lengthens the key's blocking slot (GrantScan.blocking) to its own end;
 *             `result` is the refusal to answer when that changes nothing
 *   hold      hold the key on its own slot `slot` with `misses`: too many misses
 *   take      grant on `slot` with `token` and `misses` (`requeued`: the key's last lease was lost),
 *             first growing the home's window to `reach` slots when `reach` > 0
 */
export class GrantPlan {
  kind: 'refuse' | 'lengthen' | 'hold' | 'take' = 'refuse';
  result: GrantResult | null = null;
  slot: SlotPick | null = null;
  token = 0;
  misses = 0;
  requeued = false;
  reach = 0;

  refuse(result: GrantResult): void {
    this.kind = 'refuse';
    this.result = result;
  }

  hold(slot: SlotPick, misses: number): void {
    this.kind = 'hold';
    this.slot = slot;
    this.misses = misses;
  }

  take(slot: SlotPick, token: number, misses: number, requeued: boolean, reach: number): void {
    this.kind = 'take';
    this.slot = slot;
    this.token = token;
    this.misses = misses;
    this.requeued = requeued;
    this.reach = reach;
  }
}

/**
 * The grant's decision at `now` over its scan, into `plan`: refuse, lengthen (an adopted lease meeting a
 * shorter local block), hold, or take a slot with the token and miss count the lease gets. Reads only
 * its arguments and writes only `plan`.
 */
export function decideGrant(
  scan: GrantScan,
  now: number,
  options: GrantOptions,
  adopted: HandoffLease | undefined,
  plan: GrantPlan,
): void {
  if (scan.refusal !== null) {
    plan.refuse(scan.refusal);
    if (adopted && scan.blocking.base >= 0) plan.kind = 'lengthen';
    return;
  }
  const own = scan.own;
  if (own.base >= 0) {
    // A key's grants only grow in their token's instant. The own slot is inside the reach already.
    const token = Math.max(Math.floor(now), own.token + 1);
    if (adopted) return plan.take(own, token, adopted.misses, false, 0);
    const sameDue = own.due === toMinute(options.dueMs);
    const ownState = own.word & State.MASK;
    // The hold ran out: this grant is the probe, and its own expiry will count the next miss.
    if (ownState === State.HELD) return plan.take(own, token, sameDue ? own.misses : 0, false, 0);
    // A lease whose result came (released, or kept by the fast-retry lane) was not lost: no requeue.
    // A release whose row did not move (same due minute) counts a miss: the render did not stick. A
    // failure the fast-retry lane kept its lease for counts none: that lane keeps the row due on
    // purpose, its failures are paced by their strikes, and misses count leases that expired with no
    // result; counting them would hold a failing key after 2 unreported leases, not 4.
    const released = ownState === State.RELEASED;
    const requeued = !released && own.report !== Report.ACCEPTED && own.report !== Report.UNKNOWN_JOB;
    let misses = 0;
    if (requeued) misses = (sameDue ? own.misses : 0) + 1;
    else if (released && sameDue) misses = own.misses + 1;
    if (misses >= options.fastRetries + 2) return plan.hold(own, misses);
    return plan.take(own, token, misses, requeued, 0);
  }
  const slot = scan.empty.base >= 0 ? scan.empty : scan.spare.base >= 0 ? scan.spare : null;
  if (slot === null) return plan.refuse({ ok: false, reason: 'full' });
  plan.take(slot, Math.floor(now), adopted?.misses ?? 0, false, slot.k >= scan.window ? slot.k + 1 : 0);
}
