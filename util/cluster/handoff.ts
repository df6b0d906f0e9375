// Leases that move with their rows (SPEC §9, §3: a grant is exclusive). Leases live in each node's shared
// memory, so when rows move to a node that comes back (or joins), the node that covered for it may still
// have leases out on them: a fleet is rendering those rows right now. Without help the newcomer sees the
// rows due and unleased in its own table and grants them again.
//
// The old holder tells it. For a while after each membership change its heartbeat carries the leases of
// its table on rows it no longer holds (the *handoff*): each one's key hash, its end, its due minute and
// misses. The list is sticky: an entry seen once stays until its end, even after its result came (the
// result's row write replicates through another database than the beat and may arrive later; until then
// the newcomer's copy of the row still reads due). The newcomer records each entry whose row it now holds
// as a lease of its own table (LeaseGrants.adopt) before it picks the rows up, so its publish skips them
// and its claims refuse them until they end. The beat row carries both the view and the list, so the view
// that lets the newcomer take a row arrives with the leases on it.
//
// Why nothing is missed: the old holder stops granting a row when it drops it (it republishes its ready
// set at once) and publishes the view that gives the row away only PUBLISH_SETTLE_MS later
// (util/cluster/membership.ts), after any claim that was already taking the row finished; its scans
// run from the change on, so the beat with that view lists every lease granted on the row.

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
}

/** Beats scan the lease table this long after a membership change (see the top: grants stop at once). */
export const HANDOFF_SCAN_MS = 30_000;
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

/** The list as beat text: little-endian Int32 words, five per lease, base64. */
export function encodeHandoff(leases: readonly HandoffLease[]): string {
  const bytes = Buffer.alloc(leases.length * WORDS * 4);
  let at = 0;
  for (const l of leases) {
    for (const w of [l.hi, l.lo, l.until, l.dueMinute, l.misses]) {
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
    out.push({
      hi: bytes.readInt32LE(at),
      lo: bytes.readInt32LE(at + 4),
      until: bytes.readInt32LE(at + 8),
      dueMinute: bytes.readInt32LE(at + 12),
      misses: bytes.readInt32LE(at + 16),
    });
  }
  return out;
}

/**
 * The leases a node hands over: what its scans found since the last membership change, each kept until
 * its end. One per node (worker 0's keeper leadership).
 */
export class HandoffLedger {
  private readonly leases = new Map<string, HandoffLease>();
  private changedAt = -Infinity;
  /** Leases a full list could not carry, said once per change. */
  private overflowSaid = false;

  /** The membership changed at `now`: the next HANDOFF_SCAN_MS of beats scan. */
  changed(now: number): void {
    this.changedAt = now;
    this.overflowSaid = false;
  }

  /** Whether a beat at `now` should scan the lease table. */
  scanning(now: number): boolean {
    return now - this.changedAt <= HANDOFF_SCAN_MS;
  }

  /** Adds what a scan found (a lease seen again keeps the later end); answers how many were new. */
  note(found: readonly HandoffLease[]): number {
    let added = 0;
    for (const l of found) {
      const id = `${l.hi}:${l.lo}`;
      const had = this.leases.get(id);
      if (!had) added++;
      if (!had || had.until < l.until) this.leases.set(id, l);
    }
    return added;
  }

  /** Drops leases that ended by `nowSeconds` (shared seconds). */
  prune(nowSeconds: number): void {
    for (const [id, l] of this.leases) if (l.until <= nowSeconds) this.leases.delete(id);
  }

  get size(): number {
    return this.leases.size;
  }

  /** The list a beat carries: at most MAX_HANDOFF_LEASES; `left` counts the ones that did not fit. */
  list(): { leases: HandoffLease[]; left: number } {
    const all = [...this.leases.values()];
    if (all.length <= MAX_HANDOFF_LEASES) return { leases: all, left: 0 };
    return { leases: all.slice(0, MAX_HANDOFF_LEASES), left: all.length - MAX_HANDOFF_LEASES };
  }

  /** True once per change: the caller logs the first overflow, not every beat's. */
  sayOverflow(): boolean {
    if (this.overflowSaid) return false;
    this.overflowSaid = true;
    return true;
  }
}
