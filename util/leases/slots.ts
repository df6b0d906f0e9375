// The lease table's memory: layout, one-time header set-up, a key's window and its reach, and
// consistent slot reads. The reconcile and expiry passes (util/leases/upkeep.ts), the grant rules
// (util/leases/grants.ts) and release, reports and lookups (util/leases/table.ts) sit on top of this.
//
// Layout: a 16-word Int32 header, then slots of 16 Int32 words. Each slot's first word is its state word,
// `(generation << 3) | state`. Every change to a slot first CASes the state word to BUSY (one writer
// wins), writes the fields, then stores the new state with the generation bumped. Readers load the
// state word, the fields, and the state word again (a seqlock): equal words mean a consistent view, and
// the generation makes a slot that went away and came back in the same state look different. Fields
// are read with Atomics loads so none can drift past the closing load of the state word.
import { keyHash } from '../keyHash.js';
import { fromSharedSeconds, minuteOf, sharedSecondsAtOrAfter } from '../time.js';

/**
 * A released key is refused this long: the ready set can still list it at its old due minute until the
 * result's row write reaches the keeper, and a re-grant in that gap would render the page twice.
 */
export const RELEASE_GRACE_MS = 5_000;
/** Slots every key's window starts with; a home whose window filled up has a longer one (S_REACH). */
export const PROBE_WINDOW = 8;
/**
 * The longest window a home may grow to: the bound on every lookup's cost. A run of 128 blocking slots
 * needs a table loaded far past its 4 slots per lease (measured in bench/lease-occupancy.ts).
 */
export const MAX_REACH = 128;
/** Four slots per lease keeps a full table at 25 % load, where a window of 8 is almost never full. */
const SLOTS_PER_LEASE = 4;
const MIN_SLOTS = 16;

const MAGIC = 0x4c454153; // 'LEAS'
// The layout's version: a buffer laid out by another build is refused, never misread. It changes with
// any word's position or meaning (now: 17-word slots whose word 15 is the grantee's worker id).
const LAYOUT_VERSION = 6;
const INIT_RUNNING = 1;
const INIT_DONE = 2;
// Header words.
const H_MAGIC = 0;
const H_VERSION = 1;
const H_INIT = 2;
const H_MAX_LEASES = 3;
const H_SLOT_COUNT = 4;
export const H_OCCUPANCY = 5;
const H_REC_OCCUPANCY = 6;
const H_REC_AT = 7;
const H_REC_OLDEST_EXPIRY = 8;
const H_REC_OLDEST_TOKEN_HI = 9;
const H_REC_OLDEST_TOKEN_LO = 10;
const H_REC_DONE = 11;
/**
 * Shared seconds at or before the end of every lease that collectExpired may still have to see expire
 * (LEASED or EXPIRED, no report; 0 = unknown, look). Lowered by CAS-min after each transition that makes
 * such a slot; set afresh by a collectExpired pass (util/leases/upkeep.ts says why that is safe).
 */
export const H_NEXT_EXPIRY = 12;
/**
 * The missed-expiry mailbox: queue hashes of leases that expired unreported and were taken over by a
 * grant before collectExpired saw them (a claim right after the end). Each word is 0 or one queue's
 * hash; a grant CASes its queue into a free word (one word per queue, so a burst of one queue needs one),
 * and collectExpired empties the words and raises `requeued` for each (whether or not a claim
 * comes after the expiry). Past MISSED_EXPIRY_WORDS distinct queues in one pass the rest are not raised.
 */
export const H_MISSED_EXPIRY = 16;
export const MISSED_EXPIRY_WORDS = 32;
export const HEADER_WORDS = H_MISSED_EXPIRY + MISSED_EXPIRY_WORDS;
// Slot words.
const S_WORD = 0;
export const S_HASH_HI = 1;
export const S_HASH_LO = 2;
// Shared seconds rounded up (sharedSecondsAtOrAfter): an end rounded down would come up to a second
// early, and a fleet would lose its lease before the `expiresAt` it was given.
export const S_EXPIRY = 3; // seconds: end of the lease, of the release grace, or of the hold
export const S_DUE = 4; // due minute (ms / 60 000) of the grant
export const S_MISSES = 5;
const S_TOKEN_HI = 6;
const S_TOKEN_LO = 7;
// The 64 random bits of the lease token: the grant instant orders grants, these make it unguessable.
const S_RAND_HI = 8;
const S_RAND_LO = 9;
/** 32-bit hash of the user the lease was granted to: a result from anyone else is superseded. */
const S_USER = 10;
/** 32-bit hash of the job's queue, so the keeper can name the queue of an expired lease. */
export const S_QUEUE = 11;
/** What became of the lease's result (REPORT_*), and its answer (the next render minute). */
export const S_REPORT = 12;
export const S_ANSWER = 13;
/**
 * A lease of this table that a handed-over lease of another node blocks for longer
 * (LeaseGrants.adopt): that lease's end (shared seconds), so this one's release keeps the key blocked
 * until then, not only for the release grace. 0 otherwise; every grant clears it.
 */
export const S_HOLD_OFF = 14;
/**
 * 32-bit hash of the `x-worker-id` the claim came with (nameHash of "" when it had none). With S_USER it
 * names the grantee that a result without a lease token must come from (docs/prerender-fleet.md).
 */
const S_WORKER = 15;
/**
 * Not part of the slot's contents but of its index as a home: how many slots the windows starting here
 * span (0 means PROBE_WINDOW). Only ever raised, with a CAS, by a grant that found its window without
 * room, before it publishes further out; slot writers (and their undo) never touch it, and the seqlock
 * read does not cover it.
 */
export const S_REACH = 16;
/** Every word of a slot before S_REACH is its contents; S_REACH is the last word. */
export const SLOT_WORDS = 17;
// Report states of a lease (S_REPORT). A lease is reported once: the first result moves it to
// REPORTING while its write runs, then to an answer that every retry of the same result gets again.
export const REPORT_NONE = 0;
/** The keeper saw the lease expire unreported and raised `requeued` for it (a late result may still come). */
export const REPORT_EXPIRY_SEEN = 1;
export const REPORT_PENDING = 2;
export const REPORT_ACCEPTED = 3;
export const REPORT_UNKNOWN_JOB = 4;
// States (low 3 bits of the state word). EXPIRED is a LEASED slot that reconcile found past its end;
// it means the same but is no longer counted by the occupancy gauge.
export const EMPTY = 0;
export const BUSY = 1;
export const LEASED = 2;
export const EXPIRED = 3;
export const RELEASED = 4;
export const HELD = 5;
export const STATE_MASK = 7;

export const INT32_MAX = 0x7fffffff;
export const NO_DUE = -0x80000000;
const TOKEN_SPLIT = 0x1_0000_0000;
/** Spins on a BUSY slot before giving up on it. A write section is a few stores, so this is plenty. */
const SPIN_LIMIT = 1 << 12;
/** check and release must not skip a slot whose writer was preempted: they nap 1 ms this many times. */
const PATIENT_NAPS = 20;

/** Atomics.wait works on a SharedArrayBuffer of our own; the only way to nap without burning a core. */
const napCell = new Int32Array(new SharedArrayBuffer(4));
const nap = (ms: number): void => void Atomics.wait(napCell, 0, 0, ms);

/** A grant's due minute as a slot word: saturated to Int32, NO_DUE for an unknown due time. */
export const toMinute = (ms: number): number =>
  Number.isFinite(ms) ? Math.min(INT32_MAX, Math.max(-INT32_MAX, minuteOf(ms))) : NO_DUE;
/** The state word after one more transition into `state`. */
export const nextWord = (word: number, state: number): number => (((word >>> 3) + 1) << 3) | state | 0;

/** Does a slot in this state still hold its key off (live lease, release grace, active hold)? */
export function blocks(state: number, expirySec: number, now: number): boolean {
  return (state === LEASED || state === RELEASED || state === HELD) && fromSharedSeconds(expirySec) > now;
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

/** Spreads the hash over the table: FNV's low bits alone cluster for keys that share a long prefix. */
function windowHome(hi: number, lo: number, mask: number): number {
  let h = hi ^ Math.imul(lo, 0x9e3779b1);
  h = Math.imul(h ^ (h >>> 16), 0x21f0aaad);
  h = Math.imul(h ^ (h >>> 15), 0x735a2d97);
  return (h ^ (h >>> 15)) & mask;
}

/** What reconcile leaves in the header for every worker (the overview's lease figures). */
export interface StoredReconcile {
  occupancy: number;
  at: number;
  oldestExpiresAt: number | null;
  oldestGrantedAt: number | null;
}

/** The shared slots plus this thread's scratch: the current key's hash and the last slot read. */
export class LeaseSlots {
  /** The table's own capacity, which is the first allocation's even when this caller asked otherwise. */
  readonly maxLeases: number;
  readonly slotCount: number;
  /** True when the buffer was sized for another maxLeases; the caller should log it loudly. */
  readonly sizeMismatch: boolean;
  protected readonly words: Int32Array;
  private readonly mask: number;
  // The last consistent slot read, filled by read() so scans allocate nothing.
  protected hashHiRead = 0;
  protected hashLoRead = 0;
  protected expiryRead = 0;
  protected dueRead = 0;
  protected missesRead = 0;
  protected tokenRead = 0;
  protected randHiRead = 0;
  protected randLoRead = 0;
  protected userRead = 0;
  protected workerRead = 0;
  protected queueRead = 0;
  protected reportRead = 0;
  protected answerRead = 0;
  // A claim asks isLeased then grant, a result asks check then release: hash each key once.
  private cachedKey: string | undefined;
  protected hashHi = 0;
  protected hashLo = 0;
  private home = 0;

  constructor(buffer: ArrayBuffer | SharedArrayBuffer, maxLeases: number, minSlots = MIN_SLOTS) {
    if (!Number.isInteger(maxLeases) || maxLeases < 1)
      throw new RangeError('maxLeases must be a positive integer');
    const words = new Int32Array(buffer, 0, Math.floor(buffer.byteLength / 4));
    if (words.length < HEADER_WORDS + MIN_SLOTS * SLOT_WORDS)
      throw new RangeError('lease table buffer too small');
    // The buffer starts zeroed and every worker constructs over it; the first to flip the init word
    // sizes the table from what it asked for, capped by what the buffer (the first allocation) holds.
    const init = Atomics.compareExchange(words, H_INIT, 0, INIT_RUNNING);
    if (init !== 0 && init !== INIT_RUNNING && init !== INIT_DONE) {
      throw new Error('buffer does not hold a lease table of this layout');
    }
    if (init === 0) {
      let fitting = MIN_SLOTS;
      while (HEADER_WORDS + fitting * 2 * SLOT_WORDS <= words.length) fitting *= 2;
      const wanted = slotCountFor(maxLeases, minSlots);
      const slots = Math.min(wanted, fitting);
      words[H_MAGIC] = MAGIC;
      words[H_VERSION] = LAYOUT_VERSION;
      words[H_MAX_LEASES] = slots === wanted ? maxLeases : Math.min(maxLeases, slots / SLOTS_PER_LEASE);
      words[H_SLOT_COUNT] = slots;
      Atomics.store(words, H_INIT, INIT_DONE);
    }
    for (let naps = 0; Atomics.load(words, H_INIT) !== INIT_DONE; naps++) {
      if (naps > 1000) throw new Error('lease table header never finished initialising');
      nap(1);
    }
    const slots = words[H_SLOT_COUNT]!;
    if (words[H_MAGIC] !== MAGIC || words[H_VERSION] !== LAYOUT_VERSION) {
      throw new Error('buffer does not hold a lease table of this layout');
    }
    if ((slots & (slots - 1)) !== 0 || HEADER_WORDS + slots * SLOT_WORDS > words.length) {
      throw new Error(`lease table header names ${slots} slots, which do not fit its buffer`);
    }
    this.words = words;
    this.slotCount = slots;
    this.mask = slots - 1;
    this.maxLeases = words[H_MAX_LEASES]!;
    this.sizeMismatch = this.maxLeases !== maxLeases;
  }

  /** First slot of `key`'s probe window (for explain output and tests that need colliding keys). */
  windowStart(key: string): number {
    this.hash(key);
    return this.home;
  }

  /** Makes `key` the current key of the window helpers below. */
  protected hash(key: string): void {
    if (key === this.cachedKey) return;
    const { hi, lo } = keyHash(key);
    this.cachedKey = key;
    this.hashHi = hi;
    this.hashLo = lo;
    this.home = windowHome(hi, lo, this.mask);
  }

  /** Makes an already hashed key current (the keeper stores each row's hash so publish need not re-hash). */
  protected useHash(hi: number, lo: number): void {
    if (this.cachedKey === undefined && this.hashHi === hi && this.hashLo === lo) return;
    this.cachedKey = undefined;
    this.hashHi = hi;
    this.hashLo = lo;
    this.home = windowHome(hi, lo, this.mask);
  }

  /** Word index of the k-th slot of the current key's window. */
  protected base(k: number): number {
    return HEADER_WORDS + ((this.home + k) & this.mask) * SLOT_WORDS;
  }

  /** How many slots the current key's window spans now (PROBE_WINDOW unless its home grew it). */
  protected window(): number {
    return Math.max(PROBE_WINDOW, Atomics.load(this.words, HEADER_WORDS + this.home * SLOT_WORDS + S_REACH));
  }

  /** The most a window may span in this table (MAX_REACH, or every slot of a smaller table). */
  protected get maxReach(): number {
    return Math.min(MAX_REACH, this.slotCount);
  }

  /** Grows the current key's window to at least `length` slots; concurrent growers keep the largest. */
  protected reach(length: number): void {
    const at = HEADER_WORDS + this.home * SLOT_WORDS + S_REACH;
    for (;;) {
      const was = Atomics.load(this.words, at);
      if (was >= length || Atomics.compareExchange(this.words, at, was, length) === was) return;
    }
  }

  /** Did the last read() find the current key? */
  protected readIsKey(): boolean {
    return this.hashHiRead === this.hashHi && this.hashLoRead === this.hashLo;
  }

  /**
   * Reads a slot consistently into the *Read fields and returns its state word. A returned BUSY state
   * means the writer did not finish within the patience; the fields then match no key.
   */
  protected read(base: number, patient: boolean): number {
    const a = this.words;
    for (let spins = 0; ; spins++) {
      const word = Atomics.load(a, base + S_WORD);
      const state = word & STATE_MASK;
      if (state === EMPTY) {
        this.hashHiRead = this.hashLoRead = 0;
        return word;
      }
      if (state !== BUSY) {
        this.hashHiRead = Atomics.load(a, base + S_HASH_HI);
        this.hashLoRead = Atomics.load(a, base + S_HASH_LO);
        this.expiryRead = Atomics.load(a, base + S_EXPIRY);
        this.dueRead = Atomics.load(a, base + S_DUE);
        this.missesRead = Atomics.load(a, base + S_MISSES);
        this.tokenRead =
          Atomics.load(a, base + S_TOKEN_HI) * TOKEN_SPLIT + (Atomics.load(a, base + S_TOKEN_LO) >>> 0);
        this.randHiRead = Atomics.load(a, base + S_RAND_HI);
        this.randLoRead = Atomics.load(a, base + S_RAND_LO);
        this.userRead = Atomics.load(a, base + S_USER);
        this.workerRead = Atomics.load(a, base + S_WORKER);
        this.queueRead = Atomics.load(a, base + S_QUEUE);
        this.reportRead = Atomics.load(a, base + S_REPORT);
        this.answerRead = Atomics.load(a, base + S_ANSWER);
        if (Atomics.load(a, base + S_WORD) === word) return word;
      }
      if (spins >= SPIN_LIMIT) {
        if (!patient || spins >= SPIN_LIMIT + PATIENT_NAPS) {
          this.hashHiRead = this.hashLoRead = 0;
          return (word & ~STATE_MASK) | BUSY;
        }
        nap(1);
      }
    }
  }

  /** The figures the last reconcile stored (by any worker), with when it ran; null before the first. */
  lastReconcile(): StoredReconcile | null {
    const a = this.words;
    if (Atomics.load(a, H_REC_DONE) === 0) return null;
    const hi = a[H_REC_OLDEST_TOKEN_HI]!;
    return {
      occupancy: a[H_REC_OCCUPANCY]!,
      at: fromSharedSeconds(a[H_REC_AT]!),
      oldestExpiresAt: hi < 0 ? null : fromSharedSeconds(a[H_REC_OLDEST_EXPIRY]!),
      oldestGrantedAt: hi < 0 ? null : hi * TOKEN_SPLIT + (a[H_REC_OLDEST_TOKEN_LO]! >>> 0),
    };
  }

  protected storeReconcile(
    now: number,
    occupancy: number,
    oldestExpirySec: number,
    oldestToken: number,
  ): void {
    const a = this.words;
    // Plain stores: a reader racing two reconciles may mix their figures, which a gauge tolerates.
    a[H_REC_OCCUPANCY] = occupancy;
    a[H_REC_AT] = sharedSecondsAtOrAfter(now);
    a[H_REC_OLDEST_EXPIRY] = oldestExpirySec;
    a[H_REC_OLDEST_TOKEN_HI] = occupancy > 0 ? Math.floor(oldestToken / TOKEN_SPLIT) : -1;
    a[H_REC_OLDEST_TOKEN_LO] = occupancy > 0 ? oldestToken % TOKEN_SPLIT : 0;
    Atomics.store(a, H_REC_DONE, 1);
  }

  /** Writes a whole slot's fields; only between a claim CAS to BUSY and the store that ends it. */
  protected writeFields(
    base: number,
    expirySec: number,
    dueMinute: number,
    misses: number,
    token: number,
    grant: GrantIdentity,
  ): void {
    const a = this.words;
    a[base + S_HASH_HI] = this.hashHi;
    a[base + S_HASH_LO] = this.hashLo;
    a[base + S_EXPIRY] = expirySec;
    a[base + S_DUE] = dueMinute;
    a[base + S_MISSES] = misses;
    a[base + S_TOKEN_HI] = Math.floor(token / TOKEN_SPLIT);
    a[base + S_TOKEN_LO] = token % TOKEN_SPLIT;
    a[base + S_RAND_HI] = grant.randHi;
    a[base + S_RAND_LO] = grant.randLo;
    a[base + S_USER] = grant.user;
    a[base + S_WORKER] = grant.worker;
    a[base + S_QUEUE] = grant.queue;
    a[base + S_REPORT] = REPORT_NONE;
    a[base + S_ANSWER] = 0;
    a[base + S_HOLD_OFF] = 0;
  }
}

/** Who a grant went to and what it is for, stored with the lease. */
export interface GrantIdentity {
  randHi: number;
  randLo: number;
  user: number;
  worker: number;
  queue: number;
}
