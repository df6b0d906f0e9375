// Leases that move with their rows, so that a grant stays exclusive across nodes (docs/clusters.md, "Who
// hands out a row"). Leases live in each node's shared memory, so when rows move to a node that comes back
// (or joins), the node that covered for it may still have leases out on them: a fleet is rendering those rows
// right now. Without help the newcomer sees the rows due and unleased in its own table and grants them again.
//
// The old holder tells it. For a while after each membership change its heartbeat carries the leases of
// its table on rows it no longer holds (the *handoff*): each one's key hash, its end, its due minute and
// misses. The list is sticky: an entry seen once stays until its end, even after its result came (the
// result's row write replicates through another database than the beat and may arrive later; until then
// the newcomer's copy of the row still reads due). The newcomer records each entry whose row it now holds
// as a lease of its own table (LeaseTable.adopt) before it picks the rows up, so its publish skips them
// and its claims refuse them until they end. The beat row carries both the view and the list, so the view
// that lets the newcomer take a row arrives with the leases on it.
//
// Why nothing is missed: the old holder stops granting a row when it drops it (it republishes its ready
// set at once) and publishes the view that gives the row away only PUBLISH_SETTLE_MS later
// (util/cluster/membership.ts), after any claim that was already taking the row finished; the beat that
// first publishes that view scans the lease table after the settle, so it lists every lease granted on
// the row. Later beats check the listed leases for a result (`released`), not the whole table.

/** One lease on a row its granting node no longer holds. */
export interface HandoffLease {
  /** The row key's 64-bit hash (util/keyHash.ts) as two signed 32-bit halves. */
  hi: number;
  lo: number;
  /** Shared seconds (util/time.ts) at which the newcomer may grant the row: the lease's end. */
  until: number;
  /** The grant's due minute (ms / 60 000; NO_DUE for an unknown one), so a miss counts as it would have. */
  dueMinute: number;
  misses: number;
  /**
   * Its result came on the granting node (the lease was released there): the receiver holds the row off
   * just as long, but its next grant counts no miss for it. Carried in the top bit of the misses word.
   */
  released?: boolean;
  /**
   * Not a lease: a hold (too many leases ran out unreported) the granting node had on the row. The receiver
   * holds the row until the same end, and its next grant is the probe with the same miss history. Carried in
   * the second bit of the misses word.
   */
  held?: boolean;
}

/**
 * When beats scan the lease table. Grants on rows a node gives away stop at once, and claims already
 * taking one finish within the settle (PUBLISH_SETTLE_MS, util/cluster/membership.ts), so the scan that
 * matters is the one of the beat that first publishes the view giving the rows away: every beat with a
 * new view scans. Besides, one scan each from these instants after the change (the first beat, after
 * the settle, once more for a claim that ran late), and none HANDOFF_SCAN_MS after it.
 */
export const HANDOFF_SCAN_MS = 30_000;
export const SCANS_AFTER_CHANGE_MS: readonly number[] = [0, 3_000, 10_000];
/**
 * A lease whose result came this recently is handed over too, held off for this long after its result:
 * the result's row write may reach the newcomer after the beat that gives it the row.
 */
export const RELEASED_HANDOFF_MS = 10_000;
/**
 * The receiving node holds a handed-over lease off this much longer than the giver's end: clocks of two
 * nodes differ a little, and a result that came just before the end writes its row through another
 * database than the beat, so the receiver's copy of the row may still read due when the lease ends.
 */
export const HANDOFF_MARGIN_MS = 10_000;
/** The most leases one beat carries (20 bytes each): beyond this the rest are logged, not handed over. */
export const MAX_HANDOFF_LEASES = 50_000;

const WORDS = 5;
const RELEASED_BIT = 0x80000000 | 0;
const HELD_BIT = 0x40000000;
const MISSES_MASK = 0x3fffffff;

/** The list as beat text: little-endian Int32 words, five per lease, base64. */
export function encodeHandoff(leases: readonly HandoffLease[]): string {
  const bytes = Buffer.alloc(leases.length * WORDS * 4);
  let at = 0;
  for (const l of leases) {
    const misses =
      Math.min(l.misses, MISSES_MASK) | (l.released ? RELEASED_BIT : 0) | (l.held ? HELD_BIT : 0);
    for (const w of [l.hi, l.lo, l.until, l.dueMinute, misses]) {
      bytes.writeInt32LE(w | 0, at);
      at += 4;
    }
  }
  return bytes.toString('base64');
}

/** The list from beat text; anything that is not a whole list (a peer of another version) reads as none. */
export function decodeHandoff(text: unknown): HandoffLease[] {
  if (typeof text !== 'string' || text.length === 0) return [];
  const bytes = Buffer.from(text, 'base64');
  if (bytes.length % (WORDS * 4) !== 0) return [];
  const out: HandoffLease[] = [];
  for (let at = 0; at < bytes.length; at += WORDS * 4) {
    const misses = bytes.readInt32LE(at + 16);
    out.push({
      hi: bytes.readInt32LE(at),
      lo: bytes.readInt32LE(at + 4),
      until: bytes.readInt32LE(at + 8),
      dueMinute: bytes.readInt32LE(at + 12),
      misses: misses & MISSES_MASK,
      ...(misses & RELEASED_BIT ? { released: true } : {}),
      ...(misses & HELD_BIT ? { held: true } : {}),
    });
  }
  return out;
}

function sameEntry(a: HandoffLease, b: HandoffLease): boolean {
  return (
    a.until >= b.until &&
    a.misses === b.misses &&
    a.dueMinute === b.dueMinute &&
    !a.released === !b.released &&
    !a.held === !b.held
  );
}

/**
 * The leases a node hands over: what its scans found since the last membership change, each kept until
 * its end. One per node (worker 0's keeper leadership). Keyed by the two hash halves (no strings: a
 * ledger may hold the whole list of a big lease table). The list a beat carries is built again only
 * when the ledger changed, live leases first when it does not all fit.
 */
export class HandoffLedger {
  private readonly leases = new Map<number, Map<number, HandoffLease>>();
  private count = 0;
  private changedAt = -Infinity;
  /** How many of SCANS_AFTER_CHANGE_MS have run since the change. */
  private scansDone = 0;
  /** Leases a full list could not carry, said once per change. */
  private overflowSaid = false;
  private listed: { leases: HandoffLease[]; left: number } | null = null;

  /** The membership changed at `now`: the scans of SCANS_AFTER_CHANGE_MS start again. */
  changed(now: number): void {
    this.changedAt = now;
    this.scansDone = 0;
    this.overflowSaid = false;
  }

  /** Whether `now` is within HANDOFF_SCAN_MS of the last membership change. */
  inWindow(now: number): boolean {
    return now - this.changedAt <= HANDOFF_SCAN_MS;
  }

  /** Whether a beat at `now` should scan the lease table: the next of SCANS_AFTER_CHANGE_MS is due. */
  scanDue(now: number): boolean {
    if (!this.inWindow(now)) return false;
    const next = SCANS_AFTER_CHANGE_MS[this.scansDone];
    return next !== undefined && now - this.changedAt >= next;
  }

  /**
   * Adds what a scan that started at `startedAt` found (a key seen again takes what this scan says of
   * it, keeping the later end); answers how many were new. The scans due by
   * `startedAt` count as done.
   */
  note(found: readonly HandoffLease[], startedAt = -Infinity): number {
    while (this.scanDue(startedAt)) this.scansDone++;
    let added = 0;
    for (const l of found) {
      const had = this.get(l.hi, l.lo);
      if (!had) {
        added++;
        this.set(l);
      } else if (!sameEntry(had, l)) {
        // The later scan says what the key is now (live, released, a hold, its misses); the hold-off
        // keeps the later end.
        this.set({ ...l, until: Math.max(had.until, l.until) });
      }
    }
    return added;
  }

  /**
   * Marks a listed lease released (its result came on this node after the scan that found it), with
   * no misses, as a release clears them (and as the scan lists a release).
   */
  release(hi: number, lo: number): void {
    const had = this.get(hi, lo);
    if (had && !had.released) {
      const { held: _held, ...lease } = had;
      this.set({ ...lease, misses: 0, released: true });
    }
  }

  /** The listed leases not yet known to be released, for the beat's check of their results. */
  *unreleased(): Iterable<HandoffLease> {
    for (const byLo of this.leases.values()) for (const l of byLo.values()) if (!l.released) yield l;
  }

  /** Drops leases that ended by `nowSeconds` (shared seconds). */
  prune(nowSeconds: number): void {
    for (const [hi, byLo] of this.leases) {
      for (const [lo, l] of byLo)
        if (l.until <= nowSeconds) {
          byLo.delete(lo);
          this.count--;
          this.listed = null;
        }
      if (byLo.size === 0) this.leases.delete(hi);
    }
  }

  get size(): number {
    return this.count;
  }

  /**
   * The list a beat carries: at most MAX_HANDOFF_LEASES, live leases before released ones (a released
   * lease's row is moving anyway; a live one is being rendered); `left` counts the ones that did not
   * fit. The same arrays until the ledger changes.
   */
  list(): { leases: HandoffLease[]; left: number } {
    if (this.listed) return this.listed;
    const live: HandoffLease[] = [];
    const released: HandoffLease[] = [];
    for (const byLo of this.leases.values())
      for (const l of byLo.values()) (l.released ? released : live).push(l);
    const all = live.concat(released);
    this.listed =
      all.length <= MAX_HANDOFF_LEASES
        ? { leases: all, left: 0 }
        : { leases: all.slice(0, MAX_HANDOFF_LEASES), left: all.length - MAX_HANDOFF_LEASES };
    return this.listed;
  }

  /** True once per change: the caller logs the first overflow, not every beat's. */
  sayOverflow(): boolean {
    if (this.overflowSaid) return false;
    this.overflowSaid = true;
    return true;
  }

  private get(hi: number, lo: number): HandoffLease | undefined {
    return this.leases.get(hi)?.get(lo);
  }

  private set(l: HandoffLease): void {
    let byLo = this.leases.get(l.hi);
    if (!byLo) this.leases.set(l.hi, (byLo = new Map()));
    if (!byLo.has(l.lo)) this.count++;
    byLo.set(l.lo, l);
    this.listed = null;
  }
}
