// The lease table's memory: the header set up once per buffer, a key's window and its reach, consistent
// slot reads into a caller's SlotView, and the few slot and header writes that every rule shares (a
// whole slot's fields, a one-step rewrite through BUSY, the expiry notes). The layout is in
// util/leases/slots.ts; the rules that use this memory are util/leases/grant.ts, util/leases/reports.ts,
// util/leases/lookups.ts and util/leases/upkeep.ts.
import { rowHash } from '../schedule/rowKey.js';
import { sharedSecondsAtOrAfter } from '../time.js';
import {
  H,
  Report,
  S,
  State,
  INIT_DONE,
  INIT_RUNNING,
  LAYOUT_VERSION,
  MAGIC,
  MAX_REACH,
  MIN_SLOTS,
  PROBE_WINDOW,
  RELEASE_GRACE_MS,
  SLOTS_PER_LEASE,
  TOKEN_SPLIT,
  nextWord,
  slotCountFor,
  windowHome,
} from './slots.js';

/**
 * A grant retries when a CAS loses to another writer in its window, and so do release and the reports
 * on their slot; past this a grant refuses as full and the others give up.
 */
export const MAX_ATTEMPTS = 16;
/** Spins on a BUSY slot before giving up on it. A write section is a few stores, so this is plenty. */
const SPIN_LIMIT = 1 << 12;
/** check and release must not skip a slot whose writer was preempted: they nap 1 ms this many times. */
const PATIENT_NAPS = 20;

/** Atomics.wait works on a SharedArrayBuffer of our own; the only way to nap without burning a core. */
const napCell = new Int32Array(new SharedArrayBuffer(4));
const nap = (ms: number): void => void Atomics.wait(napCell, 0, 0, ms);

/**
 * A key as the table addresses it: its 64-bit rowHash (util/schedule/rowKey.ts) and its window's first slot. Every
 * public call works out its key's KeyRef once and hands it to each step.
 */
export interface KeyRef {
  readonly hi: number;
  readonly lo: number;
  readonly home: number;
}

/**
 * One consistent look at a slot, filled by SlotMemory.read. The caller owns it and passes it in (each
 * part of the table keeps its own), so reads allocate nothing. `word` is the state word the fields were
 * read under: a write to the slot that starts from it (a CAS) fails if anything changed since.
 */
export class SlotView {
  word = 0;
  hashHi = 0;
  hashLo = 0;
  expiry = 0;
  due = 0;
  misses = 0;
  /** The grant instant (ms). */
  token = 0;
  randHi = 0;
  randLo = 0;
  user = 0;
  worker = 0;
  queue = 0;
  report = 0;
  answer = 0;

  get state(): number {
    return this.word & State.MASK;
  }

  /** Is this a slot of the key `ref`? (An empty or torn read matches no key: a key hash is never 0, 0.) */
  holds(ref: KeyRef): boolean {
    return this.hashHi === ref.hi && this.hashLo === ref.lo;
  }

  copyFrom(other: SlotView): void {
    this.word = other.word;
    this.hashHi = other.hashHi;
    this.hashLo = other.hashLo;
    this.expiry = other.expiry;
    this.due = other.due;
    this.misses = other.misses;
    this.token = other.token;
    this.randHi = other.randHi;
    this.randLo = other.randLo;
    this.user = other.user;
    this.worker = other.worker;
    this.queue = other.queue;
    this.report = other.report;
    this.answer = other.answer;
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

/** The shared words of one lease table, as every worker thread sees them. */
export class SlotMemory {
  /** The table's own capacity, which is the first allocation's even when this caller asked otherwise. */
  readonly maxLeases: number;
  readonly slotCount: number;
  /** True when the buffer was sized for another maxLeases; the caller should log it loudly. */
  readonly sizeMismatch: boolean;
  /** The most a window may span in this table (MAX_REACH, or every slot of a smaller table). */
  readonly maxReach: number;
  readonly words: Int32Array;
  private readonly mask: number;

  constructor(buffer: ArrayBuffer | SharedArrayBuffer, maxLeases: number, minSlots = MIN_SLOTS) {
    if (!Number.isInteger(maxLeases) || maxLeases < 1)
      throw new RangeError('maxLeases must be a positive integer');
    const words = new Int32Array(buffer, 0, Math.floor(buffer.byteLength / 4));
    if (words.length < H.WORDS + MIN_SLOTS * S.WORDS) throw new RangeError('lease table buffer too small');
    // The buffer starts zeroed and every worker constructs over it; the first to flip the init word
    // sizes the table from what it asked for, capped by what the buffer (the first allocation) holds.
    const init = Atomics.compareExchange(words, H.INIT, 0, INIT_RUNNING);
    if (init !== 0 && init !== INIT_RUNNING && init !== INIT_DONE) {
      throw new Error('buffer does not hold a lease table of this layout');
    }
    if (init === 0) {
      let fitting = MIN_SLOTS;
      while (H.WORDS + fitting * 2 * S.WORDS <= words.length) fitting *= 2;
      const wanted = slotCountFor(maxLeases, minSlots);
      const slots = Math.min(wanted, fitting);
      words[H.MAGIC] = MAGIC;
      words[H.VERSION] = LAYOUT_VERSION;
      words[H.MAX_LEASES] = slots === wanted ? maxLeases : Math.min(maxLeases, slots / SLOTS_PER_LEASE);
      words[H.SLOT_COUNT] = slots;
      Atomics.store(words, H.INIT, INIT_DONE);
    }
    for (let naps = 0; Atomics.load(words, H.INIT) !== INIT_DONE; naps++) {
      if (naps > 1000) throw new Error('lease table header never finished initialising');
      nap(1);
    }
    const slots = words[H.SLOT_COUNT]!;
    if (words[H.MAGIC] !== MAGIC || words[H.VERSION] !== LAYOUT_VERSION) {
      throw new Error('buffer does not hold a lease table of this layout');
    }
    if ((slots & (slots - 1)) !== 0 || H.WORDS + slots * S.WORDS > words.length) {
      throw new Error(`lease table header names ${slots} slots, which do not fit its buffer`);
    }
    this.words = words;
    this.slotCount = slots;
    this.mask = slots - 1;
    this.maxReach = Math.min(MAX_REACH, slots);
    this.maxLeases = words[H.MAX_LEASES]!;
    this.sizeMismatch = this.maxLeases !== maxLeases;
  }

  /** The KeyRef of a key: its rowHash (util/schedule/rowKey.ts). */
  refOf(key: string): KeyRef {
    const { hi, lo } = rowHash(key);
    return { hi, lo, home: windowHome(hi, lo, this.mask) };
  }

  /** The KeyRef of a key whose rowHash the caller already holds. */
  refOfHash(hi: number, lo: number): KeyRef {
    return { hi, lo, home: windowHome(hi, lo, this.mask) };
  }

  /** Word index of slot `slot`. */
  base(slot: number): number {
    return H.WORDS + slot * S.WORDS;
  }

  /** Word index of the k-th slot of `ref`'s window. */
  windowBase(ref: KeyRef, k: number): number {
    return H.WORDS + ((ref.home + k) & this.mask) * S.WORDS;
  }

  /** How many slots `ref`'s window spans now (PROBE_WINDOW unless its home grew it). */
  window(ref: KeyRef): number {
    return Math.max(PROBE_WINDOW, Atomics.load(this.words, H.WORDS + ref.home * S.WORDS + S.REACH));
  }

  /** Grows `ref`'s window to at least `length` slots; concurrent growers keep the largest. */
  reach(ref: KeyRef, length: number): void {
    const at = H.WORDS + ref.home * S.WORDS + S.REACH;
    for (;;) {
      const was = Atomics.load(this.words, at);
      if (was >= length || Atomics.compareExchange(this.words, at, was, length) === was) return;
    }
  }

  /**
   * Reads the slot at `base` consistently into `into` and returns its state word. A returned BUSY state
   * means the writer did not finish within the patience; the view then matches no key. An EMPTY slot
   * leaves only the state word and the hash words (0) filled.
   */
  read(base: number, patient: boolean, into: SlotView): number {
    const a = this.words;
    for (let spins = 0; ; spins++) {
      const word = Atomics.load(a, base + S.WORD);
      const state = word & State.MASK;
      if (state === State.EMPTY) {
        into.hashHi = into.hashLo = 0;
        return (into.word = word);
      }
      if (state !== State.BUSY) {
        into.hashHi = Atomics.load(a, base + S.HASH_HI);
        into.hashLo = Atomics.load(a, base + S.HASH_LO);
        into.expiry = Atomics.load(a, base + S.EXPIRY);
        into.due = Atomics.load(a, base + S.DUE);
        into.misses = Atomics.load(a, base + S.MISSES);
        into.token =
          Atomics.load(a, base + S.TOKEN_HI) * TOKEN_SPLIT + (Atomics.load(a, base + S.TOKEN_LO) >>> 0);
        into.randHi = Atomics.load(a, base + S.RAND_HI);
        into.randLo = Atomics.load(a, base + S.RAND_LO);
        into.user = Atomics.load(a, base + S.USER);
        into.worker = Atomics.load(a, base + S.WORKER);
        into.queue = Atomics.load(a, base + S.QUEUE);
        into.report = Atomics.load(a, base + S.REPORT);
        into.answer = Atomics.load(a, base + S.ANSWER);
        if (Atomics.load(a, base + S.WORD) === word) return (into.word = word);
      }
      if (spins >= SPIN_LIMIT) {
        if (!patient || spins >= SPIN_LIMIT + PATIENT_NAPS) {
          into.hashHi = into.hashLo = 0;
          return (into.word = (word & ~State.MASK) | State.BUSY);
        }
        nap(1);
      }
    }
  }

  /** Do the hash words of a slot (a BUSY one: a rewrite leaves them as they were) name `ref`'s key? */
  hashIs(base: number, ref: KeyRef): boolean {
    return (
      Atomics.load(this.words, base + S.HASH_HI) === ref.hi &&
      Atomics.load(this.words, base + S.HASH_LO) === ref.lo
    );
  }

  /** Writes a whole slot's fields for `ref`; only between a claim CAS to BUSY and the store that ends it. */
  writeFields(
    base: number,
    ref: KeyRef,
    expirySec: number,
    dueMinute: number,
    misses: number,
    token: number,
    grant: GrantIdentity,
  ): void {
    const a = this.words;
    a[base + S.HASH_HI] = ref.hi;
    a[base + S.HASH_LO] = ref.lo;
    a[base + S.EXPIRY] = expirySec;
    a[base + S.DUE] = dueMinute;
    a[base + S.MISSES] = misses;
    a[base + S.TOKEN_HI] = Math.floor(token / TOKEN_SPLIT);
    a[base + S.TOKEN_LO] = token % TOKEN_SPLIT;
    a[base + S.RAND_HI] = grant.randHi;
    a[base + S.RAND_LO] = grant.randLo;
    a[base + S.USER] = grant.user;
    a[base + S.WORKER] = grant.worker;
    a[base + S.QUEUE] = grant.queue;
    a[base + S.REPORT] = Report.NONE;
    a[base + S.ANSWER] = 0;
    a[base + S.HOLD_OFF] = 0;
  }

  /**
   * One transition of a slot through BUSY: the state word CAS (its generation makes a slot reused
   * since the read fail it), then the report words, the expiry and misses of a release, then the new
   * state. False when another writer got there first. An expiry and a release are both this.
   */
  rewrite(base: number, word: number, state: number, now: number, report: number, answer: number): boolean {
    const a = this.words;
    const busy = nextWord(word, State.BUSY);
    if (Atomics.compareExchange(a, base, word, busy) !== word) return false;
    const was = word & State.MASK;
    if (was === State.LEASED && state !== State.LEASED) Atomics.sub(a, H.OCCUPANCY, 1);
    if (state === State.RELEASED && was !== State.RELEASED) {
      // A handed-over lease of another node may block the key for longer (S_HOLD_OFF).
      a[base + S.EXPIRY] = Math.max(sharedSecondsAtOrAfter(now + RELEASE_GRACE_MS), a[base + S.HOLD_OFF]!);
      a[base + S.MISSES] = 0;
    }
    a[base + S.REPORT] = report;
    a[base + S.ANSWER] = answer;
    const expiry = a[base + S.EXPIRY]!;
    Atomics.store(a, base, nextWord(busy, state));
    // An aborted report leaves a lease that collectExpired must see end again (util/leases/upkeep.ts).
    if (report === Report.NONE && (state === State.LEASED || state === State.EXPIRED))
      this.noteExpiry(expiry);
    return true;
  }

  /** Lowers H.NEXT_EXPIRY to `expirySec` (a lease end collectExpired must not skip past). */
  noteExpiry(expirySec: number): void {
    const a = this.words;
    for (;;) {
      const was = Atomics.load(a, H.NEXT_EXPIRY);
      if (was <= expirySec || Atomics.compareExchange(a, H.NEXT_EXPIRY, was, expirySec) === was) return;
    }
  }

  /**
   * A grant took over a lease that ended unseen: its queue goes into the mailbox for the next
   * collectExpired (H.MISSED_EXPIRY). A queue already waiting there is not added twice.
   */
  noteMissedExpiry(queue: number): void {
    if (queue === 0) return;
    const a = this.words;
    const start = (queue >>> 0) % H.MISSED_EXPIRY_WORDS;
    for (let i = 0; i < H.MISSED_EXPIRY_WORDS; i++) {
      const w = H.MISSED_EXPIRY + ((start + i) % H.MISSED_EXPIRY_WORDS);
      const was = Atomics.load(a, w);
      if (was === queue) return;
      if (was === 0 && Atomics.compareExchange(a, w, 0, queue) === 0) return;
      if (Atomics.load(a, w) === queue) return;
    }
  }

  /** Gauge of leases out: exact for grants and releases, high by leases that expired since reconcile. */
  occupancy(): number {
    return Atomics.load(this.words, H.OCCUPANCY);
  }
}
