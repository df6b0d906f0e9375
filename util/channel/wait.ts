// The wait of the channel's sockets (docs/fleets.md, "The persistent channel"): a socket whose claim granted
// nothing holds its credits, and is claimed for again only when the ready set may have something for it, as
// read from shared memory without a claim:
//   - a publish (a new generation) left entries for the socket's scope: the global top for an unscoped
//     socket, its queues' sections for a scoped one (a publish of an empty set wakes nobody, and the
//     keeper publishes every publishInterval whether or not anything changed);
//   - its empty claim took entries off the set (leased or stale ones) and some are still left: the next
//     claim takes further along, so this ends once the set is used up;
//   - every CHANNEL_SAFETY_MS regardless, for what the set cannot show: a resume, a keeper turning
//     serving, a status that changed.
// A tick that finds the generation unchanged, no socket new to the wait and no safety claim due reads
// one snapshot of the set's header and nothing else. Each socket is looked at once per generation.
// Pure: the set is read through WaitView, the clock is the tick's `now`; the route module owns the duty.
import type { Counts } from '../duties/scheduler.js';

/** A waiting socket claims again at least this often, even when no publish showed anything for it. */
export const CHANNEL_SAFETY_MS = 1500;

/** What the wait reads of the ready set (util/sharedMemory/readySet.ts). */
export interface WaitView {
  snapshot(): { generation: number; remaining: number };
  /** The section of a queue (its nameHash) in the active set, or null when the queue has none. */
  section(queue: number): { remaining: number } | null;
}

/** A socket as the wait sees it. */
export interface WaitingSocket {
  readonly closed: boolean;
  readonly credits: number;
  /** Claims again (queued behind the socket's messages). */
  schedulePump(): void;
}

/** How a socket's empty claim went. */
export interface EmptyClaim {
  /** The set's generation read just before the claim (a publish during the claim then still wakes it). */
  generation: number;
  /** The claim's queues as nameHashes; null for an unscoped claim (the global top). */
  scope: readonly number[] | null;
  /** The claim took entries off the set (it was not refused before the take: paused, unready). */
  took: boolean;
}

interface Waiter {
  /** The generation this socket was last looked at against; null: look at the next tick. */
  checked: number | null;
  scope: readonly number[] | null;
  since: number;
}

export class ChannelWaits {
  private readonly waiting = new Map<WaitingSocket, Waiter>();
  /** Every waiter has been looked at against this generation, unless `fresh` says one came since. */
  private seenGeneration = Number.NaN;
  private fresh = false;
  /** The earliest safety claim of the waiters. */
  private nextSafetyAt = Infinity;

  constructor(private readonly view: () => WaitView) {}

  get size(): number {
    return this.waiting.size;
  }

  /** The active generation, read before a claim and handed back in `add`. */
  generation(): number {
    return this.view().snapshot().generation;
  }

  /** A socket's claim granted nothing: it waits (replacing any earlier wait of it). */
  add(s: WaitingSocket, claim: EmptyClaim, now: number): void {
    this.waiting.set(s, {
      checked: claim.took ? null : claim.generation,
      scope: claim.scope,
      since: now,
    });
    this.fresh = true;
    this.nextSafetyAt = Math.min(this.nextSafetyAt, now + CHANNEL_SAFETY_MS);
  }

  delete(s: WaitingSocket): void {
    this.waiting.delete(s);
  }

  /** Wakes the waiting sockets the set may have something for, or whose safety claim is due. */
  runOnce(now: number): Counts {
    if (this.waiting.size === 0) return {};
    const snap = this.view().snapshot();
    if (!this.fresh && snap.generation === this.seenGeneration && now < this.nextSafetyAt) return {};
    this.fresh = false;
    this.seenGeneration = snap.generation;
    this.nextSafetyAt = Infinity;
    let woken = 0;
    let safety = 0;
    for (const [s, w] of this.waiting) {
      if (s.closed || s.credits === 0) {
        this.waiting.delete(s);
        continue;
      }
      let wake = now - w.since >= CHANNEL_SAFETY_MS;
      if (wake) safety++;
      else if (w.checked !== snap.generation) {
        w.checked = snap.generation;
        wake = this.hasEntries(w.scope, snap.remaining);
      }
      if (wake) {
        this.waiting.delete(s);
        s.schedulePump();
        woken++;
      } else this.nextSafetyAt = Math.min(this.nextSafetyAt, w.since + CHANNEL_SAFETY_MS);
    }
    return woken > 0 ? { woken, safety } : {};
  }

  /** The active set still holds entries a claim of this scope would take. */
  private hasEntries(scope: readonly number[] | null, globalRemaining: number): boolean {
    if (scope === null) return globalRemaining > 0;
    const view = this.view();
    return scope.some((q) => (view.section(q)?.remaining ?? 0) > 0);
  }
}
