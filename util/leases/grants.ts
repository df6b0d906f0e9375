// Granting a lease: the scan of a key's window for its own slot, an empty one or a dead one
// to take over, the claim and publish of the chosen slot, the rescan that keeps a key's lease exclusive,
// the give-back of a grant that lost, and the hold after too many misses. Built on the slot memory
// (util/leases/slots.ts) and the upkeep passes (util/leases/upkeep.ts); release, the result reports and
// the lookups are in util/leases/table.ts.
//
// Windows. Keys live by open addressing over the 64-bit key hash, in a window of slots starting at the
// key's home slot, with no tombstones: every lookup walks the whole window, so a slot emptied or reused
// in place never breaks another key's chain. A window spans PROBE_WINDOW (8) slots until a grant finds
// no room in it (all live leases, release graces, holds, or expired leases inside their grace): that
// grant walks on to the first free slot further out and grows its home's window to reach it (the reach
// word, S_REACH, raised by CAS-max, up to MAX_REACH = 128). A key is refused `full` only when MAX_REACH
// slots in a row block. A slot of a key that is dead for good (released past its grace, expired past the
// grace, an ended hold) may be taken over in place by another key when its window has no empty slot.
//
// Why a walk never misses a lease granted further out. A grant that publishes at window position k
// raises its home's reach to at least k + 1 BEFORE its claim CAS, and so before the store that
// publishes the lease (both seq-cst atomics, so they keep that order for every thread). A walk reads
// the reach once, then the slots. If its read comes after the raise it walks past k; if it comes
// before, it also comes before the publish, so the lease did not exist when the walk began and the walk
// answers as of that instant. A grant that takes its key's own slot, or a slot inside the window it
// read, needs no raise: such a slot is already inside the reach (the grant that first published the
// key's slot there raised it), and the reach is never lowered. Only reach() writes the word, with a CAS
// that keeps the larger value; writeFields, hold, the upkeep's rewrites and the undo of a given-back
// grant write words below S_REACH only, and reconcile CASes state words only.
// So a grant that raised the reach and then gave its slot back, lost its claim CAS or refused leaves the
// reach raised: later walks cost more, none misses anything.
//
// Exclusivity. Two grants of one key may publish on different slots; each then re-reads its home's
// reach and rescans the whole window. Of the two publishes, the later one's rescan reads a reach that
// covers the other's slot (raised before that publish) and reads that slot after it was published, so
// it sees the rival and gives its own slot back (both may give back; never neither). A slot still BUSY
// after a read's spins has a writer mid-section. If its hash words are not this key's, skipping it is
// safe: it is another key's slot, or a grant of this key in flight that will rescan after publishing.
// If they are this key's, it may be this key's live lease while a result report or a release rewrites
// it; a rewrite keeps the hash words and runs no rescan, so the grant refuses (`leased`) rather than
// publish beside it.
import {
  BUSY,
  EMPTY,
  EXPIRED,
  H_OCCUPANCY,
  HEADER_WORDS,
  HELD,
  LEASED,
  REPORT_ACCEPTED,
  REPORT_NONE,
  REPORT_UNKNOWN_JOB,
  RELEASE_GRACE_MS,
  RELEASED,
  REPORT_EXPIRY_SEEN,
  S_DUE,
  S_EXPIRY,
  S_HASH_HI,
  S_HOLD_OFF,
  S_HASH_LO,
  S_MISSES,
  S_QUEUE,
  S_REACH,
  S_REPORT,
  SLOT_WORDS,
  STATE_MASK,
  blocks,
  nextWord,
  toMinute,
  NO_DUE,
} from './slots.js';
import type { HandoffLease } from '../cluster/handoff.js';
import { fromSharedSeconds, MINUTE_MS, sharedSecondsAtOrAfter } from '../time.js';
import { formatToken, randomWord } from './token.js';
import { LeaseUpkeep } from './upkeep.js';

/**
 * A grant retries when a CAS loses to another writer in its window, and so do release and the reports
 * on their slot; past this a grant refuses as full and the others give up.
 */
export const MAX_ATTEMPTS = 16;

/** What an adopted lease's scan returns when it lengthened a shorter local block (LeaseGrants.adopt). */
const BLOCK_LENGTHENED: GrantResult = { ok: false, reason: 'leased' };

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
/** Where a test may interleave another worker's grant: before the claim CAS, before publish, before rescan. */
export type GrantStep = 'scanned' | 'claimed' | 'published';
export interface LeaseTableOptions {
  onGrantStep?: (step: GrantStep, slot: number) => void;
  /** 32 random bits per call (tests inject a fixed sequence); the OS CSPRNG by default. */
  random?: () => number;
  /** The fewest slots the table keeps (the node passes RELEASE_ROOM_SLOTS); 4 per lease otherwise. */
  minSlots?: number;
}

export class LeaseGrants extends LeaseUpkeep {
  private readonly onGrantStep: ((step: GrantStep, slot: number) => void) | undefined;
  private readonly random: () => number;
  private readonly undo = new Int32Array(SLOT_WORDS);

  constructor(buffer: ArrayBuffer | SharedArrayBuffer, maxLeases: number, options: LeaseTableOptions = {}) {
    super(buffer, maxLeases, options.minSlots);
    this.onGrantStep = options.onGrantStep;
    this.random = options.random ?? randomWord;
  }

  /**
   * Grants `key` exclusively, or says why not. An expired lease of the key counts a miss and reports
   * `requeued`; enough misses hold the key instead.
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

  /**
   * Records a lease another node had out on a row this node now holds (util/cluster/handoff.ts): the key
   * is refused here until the lease's end, as a live lease of this table, under a token nobody holds (its
   * result goes to the node that granted it). It is marked as seen expiring, so its end raises no
   * `requeued` here (the granting node raises its own), and the key's next grant after it counts its
   * miss as the granting node would have (none when the lease is marked `released`: its result came
   * there, and it is recorded here as a release; a `held` one is recorded as the giver's hold). When
   * the key is already refused here (a lease of its own, a grace or a hold) that ends sooner, that block
   * is lengthened to the handed-over lease's end, so the key cannot be granted here while the other
   * node's lease is live. True when the table changed; false when the key was already refused at least
   * that long, the lease has ended, or the table has no room.
   */
  adopt(lease: HandoffLease, now: number): boolean {
    const untilMs = fromSharedSeconds(lease.until);
    if (untilMs <= now) return false;
    this.useHash(lease.hi, lease.lo);
    const options: GrantOptions = {
      leaseMs: untilMs - now,
      dueMs: lease.dueMinute === NO_DUE ? NaN : lease.dueMinute * MINUTE_MS,
      cadenceMs: Infinity,
      fastRetries: 0,
    };
    let changed = false;
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const result = this.tryGrant(now, options, lease);
      if (result === undefined) continue;
      changed ||= result.ok || result === BLOCK_LENGTHENED;
      // A lease whose result came, or a hold, is recorded live, then turned by one more pass (lengthen).
      if (!(result.ok && (lease.released || lease.held))) return changed;
    }
    return changed;
  }

  private tryGrant(now: number, options: GrantOptions, adopted?: HandoffLease): GrantResult | undefined {
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
      // A slot still BUSY after the spins has a stalled writer. Another key's is skipped (a grant of
      // this key racing through it rescans after publishing); this key's may be its live lease under a
      // report or release, which keeps the hash words and never rescans (see the top).
      if (state === BUSY) {
        if (this.busyWithKey(base)) return { ok: false, reason: 'leased' };
        continue;
      }
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
        if (refusal !== undefined) return adopted ? this.lengthen(base, word, adopted, refusal) : refusal;
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
      // A key's grants only grow in their token's instant.
      const token = Math.max(Math.floor(now), ownToken + 1);
      if (adopted) return this.take(own, ownWord, token, now, options, adopted.misses, false, adopted);
      const ownState = ownWord & STATE_MASK;
      const sameDue = ownDue === dueMinute;
      if (ownState === HELD) {
        // The hold ran out: this grant is the probe, and its own expiry will count the next miss.
        return this.take(own, ownWord, token, now, options, sameDue ? ownMisses : 0, false);
      }
      // A lease whose result came (released, or kept by the fast-retry lane) was not lost: no requeue.
      // A release whose row did not move (same due minute) counts a miss: the render did not stick. A
      // failure the fast-retry lane kept its lease for counts none: that lane keeps the row due on
      // purpose, its failures are paced by their strikes, and misses count leases that expired with no
      // result; counting them would hold a failing key after 2 unreported leases, not 4.
      const keptReport = ownReport === REPORT_ACCEPTED || ownReport === REPORT_UNKNOWN_JOB;
      const reported = ownState === RELEASED || keptReport;
      const requeued = !reported;
      const misses = requeued
        ? (sameDue ? ownMisses : 0) + 1
        : ownState !== RELEASED || !sameDue
          ? 0
          : ownMisses + 1;
      if (misses >= options.fastRetries + 2) return this.hold(own, ownWord, now, options, misses, dueMinute);
      return this.take(own, ownWord, token, now, options, misses, requeued);
    }
    if (empty < 0 && spare < 0) return { ok: false, reason: 'full' };
    const [slot, slotWord, k] = empty >= 0 ? [empty, emptyWord, emptyK] : [spare, spareWord, spareK];
    // Raised before the claim: a lookup that reads the reach after this grant publishes must walk here.
    if (k >= window) this.reach(k + 1);
    return this.take(slot, slotWord, Math.floor(now), now, options, adopted?.misses ?? 0, false, adopted);
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
    adopted?: HandoffLease,
  ): GrantResult | undefined {
    const a = this.words;
    const slot = (base - HEADER_WORDS) / SLOT_WORDS;
    this.onGrantStep?.('scanned', slot);
    const claimed = nextWord(word, BUSY);
    // The claim CAS: of two grants that picked this slot, one wins and the other rescans from the top.
    if (Atomics.compareExchange(a, base, word, claimed) !== word) return undefined;
    if ((word & STATE_MASK) === LEASED) Atomics.sub(a, H_OCCUPANCY, 1);
    for (let w = 1; w < S_REACH; w++) this.undo[w] = a[base + w]!;
    // Only live, grace or hold slots are refused, so a LEASED or EXPIRED one taken here has ended; with no
    // report and no expiry seen, this grant is the first to notice it: tell collectExpired (`requeued`).
    const was = word & STATE_MASK;
    if ((was === LEASED || was === EXPIRED) && this.undo[S_REPORT] === REPORT_NONE)
      this.noteMissedExpiry(this.undo[S_QUEUE]!);
    const expiry = adopted ? adopted.until : sharedSecondsAtOrAfter(now + options.leaseMs);
    const grant = {
      randHi: this.random() | 0,
      randLo: this.random() | 0,
      user: options.user ?? 0,
      worker: options.worker ?? 0,
      queue: options.queue ?? 0,
    };
    this.writeFields(base, expiry, toMinute(options.dueMs), misses, token, grant);
    // A handed-over lease's end is the granting node's to see (util/leases/upkeep.ts skips it).
    if (adopted) a[base + S_REPORT] = REPORT_EXPIRY_SEEN;
    this.onGrantStep?.('claimed', slot);
    // Count before publishing and uncount after unpublishing, so the gauge can only run high.
    Atomics.add(a, H_OCCUPANCY, 1);
    const published = nextWord(claimed, LEASED);
    Atomics.store(a, base, published);
    // After the publish, so a collectExpired pass never skips past this lease's end (see there).
    this.noteExpiry(expiry);
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
      // An adopted lease scans again, and so lengthens the rival's block if it ends sooner.
      return adopted ? undefined : refusal;
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

  /**
   * Lengthens the block of this key's slot at `base` (read as `word`: a live lease, a grace or a hold)
   * to the handed-over lease's end, when that comes later. An adopted lease (live, its expiry seen)
   * whose lease the handoff now marks released becomes a release, so the key's next grant counts no
   * miss for it; one marked held becomes a hold, so that grant is the probe with the giver's misses.
   * The token and report words stay: a local holder's token keeps working, for longer. BLOCK_LENGTHENED, the plain refusal when nothing changes, or undefined when another writer got there
   * first. No expiry note is needed: the pass that comes at the old end notes the new one.
   */
  private lengthen(
    base: number,
    word: number,
    adopted: HandoffLease,
    refusal: GrantResult,
  ): GrantResult | undefined {
    const state = word & STATE_MASK;
    const adoptedLive = state === LEASED && this.reportRead === REPORT_EXPIRY_SEEN;
    const turnTo = !adoptedLive ? state : adopted.released ? RELEASED : adopted.held ? HELD : state;
    if (this.expiryRead >= adopted.until && turnTo === state) return refusal;
    const a = this.words;
    const busy = nextWord(word, BUSY);
    if (Atomics.compareExchange(a, base, word, busy) !== word) return undefined;
    a[base + S_EXPIRY] = Math.max(this.expiryRead, adopted.until);
    // A lease of this table keeps the key blocked that long after its own result too (upkeep.ts rewrite).
    if (state === LEASED && !adoptedLive)
      a[base + S_HOLD_OFF] = Math.max(a[base + S_HOLD_OFF]!, adopted.until);
    if (turnTo !== state) {
      Atomics.sub(a, H_OCCUPANCY, 1);
      a[base + S_MISSES] = adopted.misses;
    }
    Atomics.store(a, base, nextWord(busy, turnTo));
    return BLOCK_LENGTHENED;
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
    // The restored slot may be a lease still to be seen expiring (a pass may have run meanwhile).
    if ((state === LEASED || state === EXPIRED) && this.undo[S_REPORT] === REPORT_NONE)
      this.noteExpiry(this.undo[S_EXPIRY]!);
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

  /** Do the hash words of a BUSY slot name the current key? A rewrite leaves them as they were. */
  private busyWithKey(base: number): boolean {
    return (
      Atomics.load(this.words, base + S_HASH_HI) === this.hashHi &&
      Atomics.load(this.words, base + S_HASH_LO) === this.hashLo
    );
  }

  private refusal(state: number, now: number): GrantResult | undefined {
    if (!blocks(state, this.expiryRead, now)) return undefined;
    const end = fromSharedSeconds(this.expiryRead);
    if (state === HELD) return { ok: false, reason: 'held', heldUntil: end, misses: this.missesRead };
    return { ok: false, reason: state === LEASED ? 'leased' : 'grace', expiresAt: end };
  }
}
