// The lease table's shared-memory layout: header words, slot words, slot states, and the pure helpers
// every part of the table shares. util/leases/memory.ts reads and writes slots in this layout; the grant
// (util/leases/grant.ts), report (util/leases/reports.ts) and upkeep (util/leases/upkeep.ts) rules work
// through it.
//
// Layout: a 48-word Int32 header (H), then slots of 17 Int32 words (S). Each slot's first word is its
// state word, `(generation << 3) | state`. Every change to a slot first CASes the state word to BUSY (one
// writer wins), writes the fields, then stores the new state with the generation bumped. Readers load the
// state word, the fields, and the state word again (a seqlock): equal words mean a consistent view, and
// the generation makes a slot that went away and came back in the same state look different. Fields are
// read with Atomics loads so none can drift past the closing load of the state word.
import { fromSharedSeconds, minuteOf } from '../time.js';

/**
 * A released key is refused this long: the ready set can still list it at its old due minute until the
 * result's row write reaches the keeper, and a re-grant in that gap would render the page twice.
 */
export const RELEASE_GRACE_MS = 5_000;
/** Slots every key's window starts with; a home whose window filled up has a longer one (S.REACH). */
export const PROBE_WINDOW = 8;
/**
 * The longest window a home may grow to: the bound on every lookup's cost. A run of 128 blocking slots
 * needs a table loaded far past its 4 slots per lease (measured in bench/lease-occupancy.ts).
 */
export const MAX_REACH = 128;
/** Four slots per lease keeps a full table at 25 % load, where a window of 8 is almost never full. */
export const SLOTS_PER_LEASE = 4;
export const MIN_SLOTS = 16;

export const MAGIC = 0x4c454153; // 'LEAS'
// The layout's version: a buffer laid out by another build is refused, never misread. It changes with
// any word's position or meaning (6: 17-word slots whose word 15 is the grantee's worker id).
export const LAYOUT_VERSION = 6;
export const INIT_RUNNING = 1;
export const INIT_DONE = 2;

// The word indexes and codes below are const enums: tsc writes each use as its number, so the slot reads
// and window walks of every module cost no lookup of an imported binding.

/** Header words. */
export const enum H {
  MAGIC = 0,
  VERSION = 1,
  INIT = 2,
  MAX_LEASES = 3,
  SLOT_COUNT = 4,
  OCCUPANCY = 5,
  REC_OCCUPANCY = 6,
  REC_AT = 7,
  REC_OLDEST_EXPIRY = 8,
  REC_OLDEST_TOKEN_HI = 9,
  REC_OLDEST_TOKEN_LO = 10,
  REC_DONE = 11,
  /**
   * Shared seconds at or before the end of every lease that collectExpired may still have to see expire
   * (LEASED or EXPIRED, no report; 0 = unknown, look). Lowered by CAS-min after each transition that
   * makes such a slot; set afresh by a collectExpired pass (util/leases/upkeep.ts says why that is safe).
   */
  NEXT_EXPIRY = 12,
  /**
   * The missed-expiry mailbox: queue hashes of leases that expired unreported and were taken over by a
   * grant before collectExpired saw them (a claim right after the end). Each word is 0 or one queue's
   * hash; a grant CASes its queue into a free word (one word per queue, so a burst of one queue needs
   * one), and collectExpired empties the words and raises `requeued` for each (whether or not a claim
   * comes after the expiry). Past MISSED_EXPIRY_WORDS distinct queues in one pass the rest are not raised.
   */
  MISSED_EXPIRY = 16,
  MISSED_EXPIRY_WORDS = 32,
  /** The header's length; slot 0 starts here. */
  WORDS = 48,
}

/** Slot words. */
export const enum S {
  /** The state word: `(generation << 3) | state`. */
  WORD = 0,
  HASH_HI = 1,
  HASH_LO = 2,
  /**
   * Shared seconds: the end of the lease, of the release grace, or of the hold. Rounded up
   * (sharedSecondsAtOrAfter): an end rounded down would come up to a second early, and a fleet would
   * lose its lease before the `expiresAt` it was given.
   */
  EXPIRY = 3,
  /** The due minute (ms / 60 000) of the grant. */
  DUE = 4,
  MISSES = 5,
  TOKEN_HI = 6,
  TOKEN_LO = 7,
  /** The 64 random bits of the lease token: the grant instant orders grants, these make it unguessable. */
  RAND_HI = 8,
  RAND_LO = 9,
  /** 32-bit hash of the user the lease was granted to: a result from anyone else is superseded. */
  USER = 10,
  /** 32-bit hash of the job's queue, so the keeper can name the queue of an expired lease. */
  QUEUE = 11,
  /** What became of the lease's result (Report), and its answer (the next render minute). */
  REPORT = 12,
  ANSWER = 13,
  /**
   * A lease of this table that a handed-over lease of another node blocks for longer (adopt in
   * util/leases/grant.ts): that lease's end (shared seconds), so this one's release keeps the key
   * blocked until then, not only for the release grace. 0 otherwise; every grant clears it.
   */
  HOLD_OFF = 14,
  /**
   * 32-bit hash of the `x-worker-id` the claim came with (nameHash of "" when it had none). With USER
   * it names the grantee that a result without a lease token must come from (docs/prerender-fleet.md).
   */
  WORKER = 15,
  /**
   * Not part of the slot's contents but of its index as a home: how many slots the windows starting
   * here span (0 means PROBE_WINDOW). Only ever raised, with a CAS, by a grant that found its window
   * without room, before it publishes further out; slot writers (and their undo) never touch it, and the
   * seqlock read does not cover it.
   */
  REACH = 16,
  /** A slot's length: every word before REACH is its contents; REACH is the last word. */
  WORDS = 17,
}

/**
 * Report states of a lease (S.REPORT). A lease is reported once: the first result moves it to PENDING
 * while its write runs, then to an answer that every retry of the same result gets again.
 */
export const enum Report {
  NONE = 0,
  /** The keeper saw the lease expire unreported and raised `requeued` for it (a late result may still come). */
  EXPIRY_SEEN = 1,
  PENDING = 2,
  ACCEPTED = 3,
  UNKNOWN_JOB = 4,
}

/**
 * Slot states: the low 3 bits of the state word. EXPIRED is a LEASED slot that reconcile found past its
 * end; it means the same but is no longer counted by the occupancy gauge.
 */
export const enum State {
  EMPTY = 0,
  BUSY = 1,
  LEASED = 2,
  EXPIRED = 3,
  RELEASED = 4,
  HELD = 5,
  MASK = 7,
}

export const INT32_MAX = 0x7fffffff;
export const NO_DUE = -0x80000000;
/** A grant instant (48 bits of ms) is stored as two words: the instant / 2^32 and the instant mod 2^32. */
export const TOKEN_SPLIT = 0x1_0000_0000;

/** A grant's due minute as a slot word: saturated to Int32, NO_DUE for an unknown due time. */
export const toMinute = (ms: number): number =>
  Number.isFinite(ms) ? Math.min(INT32_MAX, Math.max(-INT32_MAX, minuteOf(ms))) : NO_DUE;
/** The state word after one more transition into `state`. */
export const nextWord = (word: number, state: number): number => (((word >>> 3) + 1) << 3) | state | 0;

/** Does a slot in this state still hold its key off (live lease, release grace, active hold)? */
export function blocks(state: number, expirySec: number, now: number): boolean {
  return (
    (state === State.LEASED || state === State.RELEASED || state === State.HELD) &&
    fromSharedSeconds(expirySec) > now
  );
}

/**
 * The node's table keeps at least this many slots (8 MiB): a released key blocks its slot for the 5 s
 * RELEASE_GRACE_MS, so a drain reporting R results a second keeps ~R × 6 slots in grace besides the live
 * leases. 4 × the default 4,096 leases (16,384 slots) filled up near 2,600 results a second and refused
 * grants `full` (bench/lease-occupancy.ts measures it); this room takes ~15,000 a second.
 */
export const RELEASE_ROOM_SLOTS = 131_072;

/** Slots for `maxLeases` live leases: 4 per lease, at least `minSlots`, a power of two. */
export function slotCountFor(maxLeases: number, minSlots = MIN_SLOTS): number {
  let slots = MIN_SLOTS;
  while (slots < maxLeases * SLOTS_PER_LEASE || slots < minSlots) slots *= 2;
  return slots;
}

/**
 * The first slot of a key's window: spreads the hash over the table, since FNV's low bits alone cluster
 * for keys that share a long prefix.
 */
export function windowHome(hi: number, lo: number, mask: number): number {
  let h = hi ^ Math.imul(lo, 0x9e3779b1);
  h = Math.imul(h ^ (h >>> 16), 0x21f0aaad);
  h = Math.imul(h ^ (h >>> 15), 0x735a2d97);
  return (h ^ (h >>> 15)) & mask;
}
