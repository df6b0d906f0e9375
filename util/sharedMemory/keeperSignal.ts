// The keeper signal: how worker 0's keeper tells every worker whether it is serving, plus the leader slot
// that keeps a briefly overlapping second worker 0 from running a second keeper, and the poke stamp that
// rate-limits "the ready set ran dry" wake-ups.
//
// Lives in an ordinary shared ArrayBuffer (Harper's getUserSharedBuffer): Atomics without wait. The status
// fields have a single writer (the leader); readers retry briefly on a torn read and otherwise take what they
// saw, since every field is meaningful on its own.
import { fromSharedSeconds, sharedSecondsAtOrAfter } from '../time.js';

export type KeeperPhase = 'stopped' | 'waiting-for-peers' | 'loading' | 'live' | 'failed';
// Index = shared code. A zeroed buffer therefore reads as 'stopped': nobody has started a keeper yet.
const PHASES: readonly KeeperPhase[] = ['stopped', 'waiting-for-peers', 'loading', 'live', 'failed'];

export interface KeeperStatus {
  live: boolean;
  phase: KeeperPhase;
  /** Number of rows due, as last counted by the keeper. */
  dueCount: number;
  /** The load finished (nothing is missing from the keeper's picture). */
  complete: boolean;
  /**
   * The last publish left due, unleased rows out of the set (a burst larger than the set): claims ask for
   * the next one before the set runs dry, and wait briefly for it when it has (services/leases/claims.ts).
   */
  leftOut?: boolean;
}

export interface KeeperLeader {
  ownerId: number;
  /** Rounded up to the second, like every heartbeat here, so staleness is never declared early. */
  heartbeatAt: number;
}

export interface KeeperSignalState extends KeeperStatus {
  /** null until the first write. */
  heartbeatAt: number | null;
  leader: KeeperLeader | null;
  lastPokeAt: number | null;
}

/**
 * The oldest state document queue-state (and the metrics) may still vouch for: three state intervals
 * plus 5 s, so a document that missed two computations in a row still counts.
 */
export function stateMaxAgeMs(stateInterval: number): number {
  return 3 * stateInterval + 5000;
}

/** A keeper is stale once its heartbeat is older than max(30 s, 10 × publishInterval). */
export function keeperStaleAfterMs(publishInterval: number): number {
  return Math.max(30_000, 10 * publishInterval);
}

// Worker 0 publishes on a poke at most every 50 ms; claims that find the set dry more often
// than that are answered by the publish already on its way.
export const POKE_MIN_INTERVAL_MS = 50;
// A poke stamp further in the future than this is a clock step, not a recent poke; without it a
// backwards clock jump would silence pokes until the clock caught up.
const CLOCK_STEP_MS = 1_000;
const READ_ATTEMPTS = 4;

const MAGIC = 0x4b505331; // 'KPS1'
const I_MAGIC = 0;
const I_SEQ = 1; // odd while the leader writes the status fields
const I_LIVE = 2;
const I_PHASE = 3;
const I_HEARTBEAT = 4;
const I_DUE = 5;
const I_COMPLETE = 6;
const I_LEFT_OUT = 7;
// 64-bit words (BigInt64 index = byte offset / 8).
const B_LEADER = 4; // owner id << 32 | heartbeat seconds: one CAS claims AND stamps, so no window exists
// where an owner is recorded with somebody else's (stale) heartbeat
const B_POKE_MS = 5; // plain ms since 1970: 50 ms resolution does not fit Int32 seconds
const BYTES = 64;

export class KeeperSignal {
  private readonly ints: Int32Array;
  private readonly words: BigInt64Array;

  static byteLength(): number {
    return BYTES;
  }

  constructor(buf: ArrayBuffer) {
    if (buf.byteLength < BYTES)
      throw new RangeError(`keeper signal needs ${BYTES} bytes, the buffer has ${buf.byteLength}`);
    this.ints = new Int32Array(buf, 0, BYTES / 4);
    this.words = new BigInt64Array(buf, 0, BYTES / 8);
    const magic = Atomics.compareExchange(this.ints, I_MAGIC, 0, MAGIC);
    if (magic !== 0 && magic !== MAGIC)
      throw new Error('shared buffer holds another structure, not a keeper signal');
  }

  /** Writes the status and the heartbeat. Only the leader calls this. */
  write(status: KeeperStatus, now: number): void {
    const a = this.ints;
    // Force the counter odd from whatever it was, so a writer killed mid-write cannot leave the parity
    // inverted (readers would then retry forever on every later read).
    const writing = (Atomics.load(a, I_SEQ) + 1) | 1;
    Atomics.store(a, I_SEQ, writing);
    Atomics.store(a, I_LIVE, status.live ? 1 : 0);
    Atomics.store(a, I_PHASE, Math.max(0, PHASES.indexOf(status.phase)));
    Atomics.store(a, I_DUE, Math.max(0, Math.min(0x7fffffff, Math.floor(status.dueCount))));
    Atomics.store(a, I_COMPLETE, status.complete ? 1 : 0);
    Atomics.store(a, I_LEFT_OUT, status.leftOut === true ? 1 : 0);
    Atomics.store(a, I_HEARTBEAT, sharedSecondsAtOrAfter(now));
    Atomics.store(a, I_SEQ, (writing + 1) | 0);
  }

  read(): KeeperSignalState {
    const a = this.ints;
    let live = 0;
    let phase = 0;
    let heartbeat = 0;
    let due = 0;
    let complete = 0;
    let leftOut = 0;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const seq = Atomics.load(a, I_SEQ);
      live = Atomics.load(a, I_LIVE);
      phase = Atomics.load(a, I_PHASE);
      heartbeat = Atomics.load(a, I_HEARTBEAT);
      due = Atomics.load(a, I_DUE);
      complete = Atomics.load(a, I_COMPLETE);
      leftOut = Atomics.load(a, I_LEFT_OUT);
      if ((seq & 1) === 0 && Atomics.load(a, I_SEQ) === seq) break;
    }
    const poke = Atomics.load(this.words, B_POKE_MS);
    return {
      live: live === 1,
      phase: PHASES[phase] ?? 'failed',
      heartbeatAt: heartbeat === 0 ? null : fromSharedSeconds(heartbeat),
      dueCount: due,
      complete: complete === 1,
      leftOut: leftOut === 1,
      leader: this.leader(),
      lastPokeAt: poke === 0n ? null : Number(poke),
    };
  }

  /** True when the heartbeat is older than keeperStaleAfterMs(publishInterval), or was never written. */
  isStale(now: number, publishInterval: number): boolean {
    const heartbeat = Atomics.load(this.ints, I_HEARTBEAT);
    return heartbeat === 0 || now - fromSharedSeconds(heartbeat) > keeperStaleAfterMs(publishInterval);
  }

  leader(): KeeperLeader | null {
    const word = Atomics.load(this.words, B_LEADER);
    return word === 0n ? null : unpackLeader(word);
  }

  /**
   * Claims the leader slot for `ownerId` (a positive Int32 unique in the process, e.g. the threadId), or
   * renews it when already held. A holder whose heartbeat is stale by the keeper rule is taken over.
   * Returns false when another live owner holds it, or took it from us: the caller must not run a keeper.
   * Call it every publish tick; the renewal is the leader's heartbeat.
   */
  claimLeadership(ownerId: number, now: number, publishInterval: number): boolean {
    if (!Number.isInteger(ownerId) || ownerId < 1 || ownerId > 0x7fffffff)
      throw new RangeError(`leader owner id must be a positive Int32, got ${ownerId}`);
    const mine = packLeader(ownerId, sharedSecondsAtOrAfter(now));
    const current = Atomics.load(this.words, B_LEADER);
    if (current !== 0n) {
      const held = unpackLeader(current);
      const stale = now - held.heartbeatAt > keeperStaleAfterMs(publishInterval);
      if (held.ownerId !== ownerId && !stale) return false;
    }
    return Atomics.compareExchange(this.words, B_LEADER, current, mine) === current;
  }

  /** Clears the leader slot if `ownerId` still holds it (call from process.on('exit') and on stop). */
  releaseLeadership(ownerId: number): boolean {
    const current = Atomics.load(this.words, B_LEADER);
    if (current === 0n || unpackLeader(current).ownerId !== ownerId) return false;
    return Atomics.compareExchange(this.words, B_LEADER, current, 0n) === current;
  }

  /**
   * A claim found the ready set used up while due rows remain: should this caller poke worker 0
   * (buf.notify())? True for at most one caller per POKE_MIN_INTERVAL_MS across all workers.
   */
  requestPublish(now: number): boolean {
    const last = Atomics.load(this.words, B_POKE_MS);
    const elapsed = now - Number(last);
    if (elapsed < POKE_MIN_INTERVAL_MS && elapsed > -CLOCK_STEP_MS) return false;
    return Atomics.compareExchange(this.words, B_POKE_MS, last, BigInt(Math.floor(now))) === last;
  }
}

/**
 * A leader id unique per thread of the process: the worker's threadId (Node never reuses one within a
 * process, and a restarted worker 0 gets a new one) in the high bits, random bits below it. The old
 * `pid × 131 + rand(1000)` gave two overlapping worker 0s of one process — same pid — the same id about
 * once in a thousand restarts, and then both published.
 */
export function leaderIdFor(threadId: number, random32: number): number {
  const id = ((threadId & 0xffff) << 15) | (random32 & 0x7fff);
  return id === 0 ? 1 : id;
}

function packLeader(ownerId: number, heartbeatSec: number): bigint {
  return (BigInt(ownerId) << 32n) | BigInt(heartbeatSec >>> 0);
}

function unpackLeader(word: bigint): KeeperLeader {
  return { ownerId: Number(word >> 32n), heartbeatAt: fromSharedSeconds(Number(BigInt.asIntN(32, word))) };
}
