// Granting a lease: the scan of a key's window and the decision over it (util/leases/grantScan.ts), then
// the claim and publish of the chosen slot, the rescan that keeps a key's lease exclusive, the give-back
// of a grant that lost, the hold after too many misses, and the adoption of another node's lease.
//
// Windows. Keys live by open addressing over the 64-bit key hash, in a window of slots starting at the
// key's home slot, with no tombstones: every lookup walks the whole window, so a slot emptied or reused
// in place never breaks another key's chain. A window spans PROBE_WINDOW (8) slots until a grant finds
// no room in it (all live leases, release graces, holds, or expired leases inside their grace): that
// grant walks on to the first free slot further out and grows its home's window to reach it (the reach
// word, S.REACH, raised by CAS-max, up to MAX_REACH = 128). A key is refused `full` only when MAX_REACH
// slots in a row block. A slot of a key that is dead for good (released past its grace, expired past the
// grace, an ended hold) may be taken over in place by another key when its window has no empty slot.
//
// Why a walk never misses a lease granted further out. A grant that publishes at window position k
// raises its home's reach to at least k + 1 BEFORE its claim CAS (a `take` plan's `reach`, carried out
// by SlotMemory.reach), and so before the store that publishes the lease (both seq-cst atomics, so they
// keep that order for every thread). A walk reads the reach once (SlotMemory.window), then the slots.
// If its read comes after the raise it walks past k; if it comes before, it also comes before the
// publish, so the lease did not exist when the walk began and the walk answers as of that instant. A
// grant that takes its key's own slot, or a slot inside the window it read, needs no raise: such a slot
// is already inside the reach (the grant that first published the key's slot there raised it), and the
// reach is never lowered. Only SlotMemory.reach writes the word, with a CAS that keeps the larger value;
// SlotMemory.writeFields, hold, SlotMemory.rewrite and the undo of a given-back grant write words below
// S.REACH only, and reconcile CASes state words only. So a grant that raised the reach and then gave its
// slot back, lost its claim CAS or refused leaves the reach raised: later walks cost more, none misses
// anything.
//
// Exclusivity. Two grants of one key may publish on different slots; each then re-reads its home's
// reach and rescans the whole window (take). Of the two publishes, the later one's rescan reads a reach
// that covers the other's slot (raised before that publish) and reads that slot after it was published,
// so it sees the rival and gives its own slot back (both may give back; never neither). A slot still
// BUSY after a read's spins has a writer mid-section. If its hash words are not this key's, skipping it
// is safe: it is another key's slot, or a grant of this key in flight that will rescan after publishing.
// If they are this key's, it may be this key's live lease while a result report or a release rewrites
// it; a rewrite keeps the hash words and runs no rescan, so the grant refuses (`leased`) rather than
// publish beside it (scanWindow).
import { fromSharedSeconds, MINUTE_MS, sharedSecondsAtOrAfter } from '../time.js';
import type { HandoffLease } from '../cluster/handoff.js';
import { H, Report, S, State, NO_DUE, blocks, nextWord, toMinute } from './slots.js';
import { MAX_ATTEMPTS, SlotView, type KeyRef, type SlotMemory } from './memory.js';
import {
  GrantPlan,
  GrantScan,
  decideGrant,
  refusalOf,
  scanWindow,
  type BlockingSlot,
  type GrantOptions,
  type GrantResult,
  type SlotPick,
} from './grantScan.js';
import { formatToken, randomWord } from './token.js';

/** What an adopted lease's grant returns when it lengthened a shorter local block (Grants.adopt). */
const BLOCK_LENGTHENED: GrantResult = { ok: false, reason: 'leased' };

/** Where a test may interleave another worker's grant: before the claim CAS, before publish, before rescan. */
export type GrantStep = 'scanned' | 'claimed' | 'published';

/** What a take writes besides the options: the token's instant, the miss count, and whether it requeues. */
interface TakeTerms {
  token: number;
  misses: number;
  requeued: boolean;
}

/** Grants and adoptions over one table's memory. */
export class Grants {
  /** The slot words a take replaced, for its give-back; filled and used within one take. */
  private readonly undo = new Int32Array(S.WORDS);
  /** What one grant's scan and rescan read slots into, and what its scan found; used within one grant. */
  private readonly view = new SlotView();
  private readonly scan = new GrantScan();
  private readonly plan = new GrantPlan();

  constructor(
    private readonly mem: SlotMemory,
    private readonly random: () => number = randomWord,
    private readonly onGrantStep?: (step: GrantStep, slot: number) => void,
  ) {}

  /**
   * Grants the key `ref` exclusively, or says why not. An expired lease of the key counts a miss and
   * reports `requeued`; enough misses hold the key instead.
   */
  grant(ref: KeyRef, now: number, options: GrantOptions): GrantResult {
    if (!(options.leaseMs > 0)) throw new RangeError('leaseMs must be positive');
    const view = this.view;
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const result = this.tryGrant(ref, now, options, view, undefined);
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
    const ref = this.mem.refOfHash(lease.hi, lease.lo);
    const options: GrantOptions = {
      leaseMs: untilMs - now,
      dueMs: lease.dueMinute === NO_DUE ? NaN : lease.dueMinute * MINUTE_MS,
      cadenceMs: Infinity,
      fastRetries: 0,
    };
    const view = this.view;
    let changed = false;
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const result = this.tryGrant(ref, now, options, view, lease);
      if (result === undefined) continue;
      changed ||= result.ok || result === BLOCK_LENGTHENED;
      // A lease whose result came, or a hold, is recorded live, then turned by one more pass (lengthen).
      if (!(result.ok && (lease.released || lease.held))) return changed;
    }
    return changed;
  }

  /** One scan, decision and write; undefined when a CAS lost to another writer and the grant retries. */
  private tryGrant(
    ref: KeyRef,
    now: number,
    options: GrantOptions,
    view: SlotView,
    adopted: HandoffLease | undefined,
  ): GrantResult | undefined {
    const { scan, plan } = this;
    scanWindow(this.mem, ref, now, view, scan);
    decideGrant(scan, now, options, adopted, plan);
    switch (plan.kind) {
      case 'refuse':
        return plan.result!;
      case 'lengthen':
        return this.lengthen(scan.blocking, adopted!, plan.result!);
      case 'hold':
        return this.hold(plan.slot!, now, options, plan.misses);
      case 'take':
        // Raised before the claim: a lookup that reads the reach after this grant publishes must walk here.
        if (plan.reach > 0) this.mem.reach(ref, plan.reach);
        return this.take(ref, plan.slot!, plan, now, options, view, adopted);
    }
  }

  /** Claims `pick` for the key `ref`, publishes the lease, and keeps it only if no rival did. */
  private take(
    ref: KeyRef,
    pick: SlotPick,
    terms: TakeTerms,
    now: number,
    options: GrantOptions,
    view: SlotView,
    adopted: HandoffLease | undefined,
  ): GrantResult | undefined {
    const a = this.mem.words;
    const { base, word } = pick;
    const slot = (base - H.WORDS) / S.WORDS;
    this.onGrantStep?.('scanned', slot);
    const claimed = nextWord(word, State.BUSY);
    // The claim CAS: of two grants that picked this slot, one wins and the other rescans from the top.
    if (Atomics.compareExchange(a, base, word, claimed) !== word) return undefined;
    if ((word & State.MASK) === State.LEASED) Atomics.sub(a, H.OCCUPANCY, 1);
    const undo = this.undo;
    for (let w = 1; w < S.REACH; w++) undo[w] = a[base + w]!;
    // Only live, grace or hold slots are refused, so a LEASED or EXPIRED one taken here has ended; with no
    // report and no expiry seen, this grant is the first to notice it: tell collectExpired (`requeued`).
    const was = word & State.MASK;
    if ((was === State.LEASED || was === State.EXPIRED) && undo[S.REPORT] === Report.NONE)
      this.mem.noteMissedExpiry(undo[S.QUEUE]!);
    const expiry = adopted ? adopted.until : sharedSecondsAtOrAfter(now + options.leaseMs);
    const grant = {
      randHi: this.random() | 0,
      randLo: this.random() | 0,
      user: options.user ?? 0,
      worker: options.worker ?? 0,
      queue: options.queue ?? 0,
    };
    this.mem.writeFields(base, ref, expiry, toMinute(options.dueMs), terms.misses, terms.token, grant);
    // A handed-over lease's end is the granting node's to see (collectExpired skips it).
    if (adopted) a[base + S.REPORT] = Report.EXPIRY_SEEN;
    this.onGrantStep?.('claimed', slot);
    // Count before publishing and uncount after unpublishing, so the gauge can only run high.
    Atomics.add(a, H.OCCUPANCY, 1);
    const published = nextWord(claimed, State.LEASED);
    Atomics.store(a, base, published);
    // After the publish, so a collectExpired pass never skips past this lease's end (util/leases/upkeep.ts).
    this.mem.noteExpiry(expiry);
    this.onGrantStep?.('published', slot);
    // Two grants of one key on different slots each publish, then rescan: sequentially consistent
    // atomics guarantee at least one sees the other and gives its slot back. Without this rescan both
    // would hand the job out.
    for (let k = 0, n = this.mem.window(ref); k < n; k++) {
      const other = this.mem.windowBase(ref, k);
      if (other === base) continue;
      const state = this.mem.read(other, false, view) & State.MASK;
      if (!view.holds(ref) || !blocks(state, view.expiry, now)) continue;
      const refusal = refusalOf(state, view, now);
      this.giveBack(base, published, word);
      // An adopted lease scans again, and so lengthens the rival's block if it ends sooner.
      return adopted ? undefined : (refusal ?? undefined);
    }
    return {
      ok: true,
      token: formatToken({ grantedAt: terms.token, randHi: grant.randHi, randLo: grant.randLo }),
      grantedAt: terms.token,
      expiresAt: fromSharedSeconds(expiry),
      misses: terms.misses,
      requeued: terms.requeued,
    };
  }

  /** Puts a slot this take published back the way it found it (`original`, with the words in undo). */
  private giveBack(base: number, published: number, original: number): void {
    const a = this.mem.words;
    const undo = this.undo;
    const busy = nextWord(published, State.BUSY);
    // Nothing else writes a live slot whose token only this grant knows, so the exchange cannot lose.
    if (Atomics.compareExchange(a, base, published, busy) !== published) return;
    Atomics.sub(a, H.OCCUPANCY, 1);
    for (let w = 1; w < S.REACH; w++) a[base + w] = undo[w]!;
    const state = original & State.MASK;
    if (state === State.LEASED) Atomics.add(a, H.OCCUPANCY, 1);
    Atomics.store(a, base, nextWord(busy, state));
    // The restored slot may be a lease still to be seen expiring (a pass may have run meanwhile).
    if ((state === State.LEASED || state === State.EXPIRED) && undo[S.REPORT] === Report.NONE)
      this.mem.noteExpiry(undo[S.EXPIRY]!);
  }

  /**
   * Lengthens the block of the key's slot `blocking` (a live lease, a grace or a hold) to the
   * handed-over lease's end, when that comes later. An adopted lease (live, its expiry seen) whose lease
   * the handoff now marks released becomes a release, so the key's next grant counts no miss for it;
   * one marked held becomes a hold, so that grant is the probe with the giver's misses. The token and
   * report words stay: a local holder's token keeps working, for longer. BLOCK_LENGTHENED, the plain
   * refusal when nothing changes, or undefined when another writer got there first. No expiry note is
   * needed: the pass that comes at the old end notes the new one.
   */
  private lengthen(
    blocking: BlockingSlot,
    adopted: HandoffLease,
    refusal: GrantResult,
  ): GrantResult | undefined {
    const { base, word } = blocking;
    const state = word & State.MASK;
    const adoptedLive = state === State.LEASED && blocking.report === Report.EXPIRY_SEEN;
    const turnTo = !adoptedLive
      ? state
      : adopted.released
        ? State.RELEASED
        : adopted.held
          ? State.HELD
          : state;
    if (blocking.expiry >= adopted.until && turnTo === state) return refusal;
    const a = this.mem.words;
    const busy = nextWord(word, State.BUSY);
    if (Atomics.compareExchange(a, base, word, busy) !== word) return undefined;
    a[base + S.EXPIRY] = Math.max(blocking.expiry, adopted.until);
    // A lease of this table keeps the key blocked that long after its own result too (SlotMemory.rewrite).
    if (state === State.LEASED && !adoptedLive)
      a[base + S.HOLD_OFF] = Math.max(a[base + S.HOLD_OFF]!, adopted.until);
    if (turnTo !== state) {
      Atomics.sub(a, H.OCCUPANCY, 1);
      a[base + S.MISSES] = adopted.misses;
    }
    Atomics.store(a, base, nextWord(busy, turnTo));
    return BLOCK_LENGTHENED;
  }

  /** Holds the key on its own slot: 2 leases at the first hold, then 4, 8 …, never past the cadence. */
  private hold(own: SlotPick, now: number, options: GrantOptions, misses: number): GrantResult | undefined {
    const a = this.mem.words;
    const { base, word } = own;
    const busy = nextWord(word, State.BUSY);
    if (Atomics.compareExchange(a, base, word, busy) !== word) return undefined;
    if ((word & State.MASK) === State.LEASED) Atomics.sub(a, H.OCCUPANCY, 1);
    const holdMs = Math.min(
      options.cadenceMs,
      options.leaseMs * 2 ** Math.min(misses - options.fastRetries - 1, 40),
    );
    const until = sharedSecondsAtOrAfter(now + holdMs);
    a[base + S.EXPIRY] = until;
    a[base + S.DUE] = toMinute(options.dueMs);
    a[base + S.MISSES] = misses;
    Atomics.store(a, base, nextWord(busy, State.HELD));
    return { ok: false, reason: 'held', heldUntil: fromSharedSeconds(until), misses };
  }
}
