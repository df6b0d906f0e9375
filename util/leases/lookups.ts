// Read-only walks of one key's window: does something block the key and until when, which slot holds its
// latest grant, which holds the grant a token names, and the key's lease as explain shows it. They change
// no slot.
//
// Every walk here covers the key's whole window as its home's reach word names it, read once at the
// start of the walk, and never stops at an empty slot (a slot emptied or reused in place must not hide
// the keys after it). util/leases/grant.ts says why such a walk never misses a live lease granted
// further out.
import { fromSharedSeconds, MINUTE_MS } from '../time.js';
import { Report, S, State, NO_DUE, blocks } from './slots.js';
import type { KeyRef, SlotMemory, SlotView } from './memory.js';
import { formatToken } from './token.js';

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
  [State.LEASED]: ['leased', 'expired'],
  [State.RELEASED]: ['grace', 'released'],
  [State.HELD]: ['held', 'expired'],
};

/** Where a block ends (ms); a lease with its report under way ends at once. */
function blockEnd(expirySec: number, report: number, now: number): number {
  return report === Report.PENDING ? now + 1 : fromSharedSeconds(expirySec);
}

/**
 * 0 when no slot of `ref`'s window blocks the key at `now` (a live lease, a release grace or an active
 * hold), else the instant the first block found ends (blockEnd). Advisory (the grant decides for
 * itself), so a slot is first looked at through its state and hash words alone: most of a window holds
 * other keys, and their consistent read (a dozen words) would be most of a publish's lease skip. A slot of
 * this key whose state word moved meanwhile, or a BUSY one, gets the consistent read (into `view`).
 */
export function blockedUntil(mem: SlotMemory, ref: KeyRef, now: number, view: SlotView): number {
  const a = mem.words;
  for (let k = 0, n = mem.window(ref); k < n; k++) {
    const base = mem.windowBase(ref, k);
    const word = Atomics.load(a, base);
    const state = word & State.MASK;
    if (state === State.EMPTY) continue;
    if (state !== State.BUSY) {
      if (Atomics.load(a, base + S.HASH_HI) !== ref.hi || Atomics.load(a, base + S.HASH_LO) !== ref.lo)
        continue;
      const expiry = Atomics.load(a, base + S.EXPIRY);
      const report = Atomics.load(a, base + S.REPORT);
      if (Atomics.load(a, base) === word) {
        if (blocks(state, expiry, now)) return blockEnd(expiry, report, now);
        continue;
      }
    }
    const again = mem.read(base, false, view);
    if (view.holds(ref) && blocks(again & State.MASK, view.expiry, now))
      return blockEnd(view.expiry, view.report, now);
  }
  return 0;
}

/**
 * Fills `latest` with the slot of `ref`'s latest grant (the highest token) and returns true, or returns
 * false when the key has no slot. `scratch` is the walk's own view.
 */
export function latestGrant(mem: SlotMemory, ref: KeyRef, latest: SlotView, scratch: SlotView): boolean {
  let found = false;
  for (let k = 0, n = mem.window(ref); k < n; k++) {
    const state = mem.read(mem.windowBase(ref, k), true, scratch) & State.MASK;
    if (state === State.EMPTY || state === State.BUSY || !scratch.holds(ref)) continue;
    if (found && scratch.token <= latest.token) continue;
    latest.copyFrom(scratch);
    found = true;
  }
  return found;
}

/** The highest token among `ref`'s slots, or -1 when it has none. */
export function latestToken(mem: SlotMemory, ref: KeyRef, view: SlotView): number {
  let latest = -1;
  for (let k = 0, n = mem.window(ref); k < n; k++) {
    const state = mem.read(mem.windowBase(ref, k), true, view) & State.MASK;
    if (state !== State.EMPTY && state !== State.BUSY && view.holds(ref) && view.token > latest)
      latest = view.token;
  }
  return latest;
}

/**
 * The word index of the slot of `ref`'s window that holds the grant made at `grantedAt`, with that slot
 * read into `view`; -1 when there is none.
 */
export function grantSlot(mem: SlotMemory, ref: KeyRef, grantedAt: number, view: SlotView): number {
  for (let k = 0, n = mem.window(ref); k < n; k++) {
    const base = mem.windowBase(ref, k);
    const state = mem.read(base, true, view) & State.MASK;
    if (state !== State.EMPTY && state !== State.BUSY && view.holds(ref) && view.token === grantedAt)
      return base;
  }
  return -1;
}

/** The key's latest grant as explain shows it; reads into `latest` and `scratch`. */
export function lookup(
  mem: SlotMemory,
  ref: KeyRef,
  now: number,
  latest: SlotView,
  scratch: SlotView,
): LeaseView {
  if (!latestGrant(mem, ref, latest, scratch))
    return { state: 'none', token: null, expiresAt: null, misses: 0, dueMs: null };
  const end = fromSharedSeconds(latest.expiry);
  const [ifLive, ifOver] = VIEWS[latest.state] ?? ['expired', 'expired'];
  return {
    state: end > now ? ifLive : ifOver,
    token: formatToken({ grantedAt: latest.token, randHi: latest.randHi, randLo: latest.randLo }),
    expiresAt: end,
    misses: latest.misses,
    dueMs: latest.due === NO_DUE ? null : latest.due * MINUTE_MS,
  };
}

/**
 * Whether the key's latest grant had its result: released, or kept by the fast-retry lane with its
 * report answered. Reads into `latest` and `scratch`.
 */
export function latestReported(mem: SlotMemory, ref: KeyRef, latest: SlotView, scratch: SlotView): boolean {
  if (!latestGrant(mem, ref, latest, scratch)) return false;
  const state = latest.state;
  return (
    state === State.RELEASED ||
    (state === State.LEASED && (latest.report === Report.ACCEPTED || latest.report === Report.UNKNOWN_JOB))
  );
}
