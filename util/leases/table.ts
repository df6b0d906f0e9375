// The lease table: which keys are out with a renderer right now, shared by every worker thread of one
// process through a plain ArrayBuffer. Lock-free apart from a per-slot write section of a handful of
// stores. This class is the one way in; it works out each call's KeyRef once and hands it to the parts:
//   util/leases/slots.ts      the layout: header and slot words, states, pure helpers
//   util/leases/memory.ts     the memory: header set-up, a key's window and reach, consistent slot reads
//   util/leases/grantScan.ts  a grant's scan of the window (read-only) and its decision (pure)
//   util/leases/grant.ts      grant, give-back, hold and adopt, with the lock-free exclusivity argument
//   util/leases/reports.ts    release, result reports and token checks
//   util/leases/lookups.ts    the read-only walks of one key's window
//   util/leases/upkeep.ts     expiry, reconcile and the other passes over every slot
import type { HandoffLease } from '../cluster/handoff.js';
import { minuteOf } from '../time.js';
import { H, Report, S, State, slotCountFor } from './slots.js';
import { SlotMemory, SlotView, type KeyRef } from './memory.js';
import { Grants, type GrantStep } from './grant.js';
import type { GrantOptions, GrantResult } from './grantScan.js';
import {
  beginReport,
  check,
  endReport,
  extend,
  grantOf,
  release,
  type Grantee,
  type ExtendResult,
  type ExtendTerms,
  type ReportAnswer,
  type ReportCaller,
  type ReportStart,
  type TokenCheck,
} from './reports.js';
import { blockedUntil, latestReported, lookup, type LeaseView } from './lookups.js';
import { LeaseUpkeep } from './upkeep.js';
import { parseToken } from './token.js';

export { MAX_REACH, PROBE_WINDOW, RELEASE_GRACE_MS } from './slots.js';
export { DEAD_SLOT_RETENTION_MS, type ReconcileResult, type StoredReconcile } from './upkeep.js';
export type { GrantOptions, GrantResult } from './grantScan.js';
export type { GrantStep } from './grant.js';
export type {
  ExtendResult,
  ExtendTerms,
  Grantee,
  ReportAnswer,
  ReportCaller,
  ReportStart,
  TokenCheck,
} from './reports.js';
export type { LeaseState, LeaseView } from './lookups.js';

export interface LeaseTableOptions {
  /** Called inside each grant before its claim CAS, before its publish and before its rescan (tests). */
  onGrantStep?: (step: GrantStep, slot: number) => void;
  /** 32 random bits per call (tests inject a fixed sequence); the OS CSPRNG by default. */
  random?: () => number;
  /** The fewest slots the table keeps (the node passes RELEASE_ROOM_SLOTS); 4 per lease otherwise. */
  minSlots?: number;
}

export class LeaseTable {
  /** The table's own capacity, which is the first allocation's even when this caller asked otherwise. */
  readonly maxLeases: number;
  readonly slotCount: number;
  /** True when the buffer was sized for another maxLeases; the caller should log it loudly. */
  readonly sizeMismatch: boolean;
  private readonly mem: SlotMemory;
  private readonly grants: Grants;
  /**
   * The passes over every slot (util/leases/upkeep.ts): expiry, reconcile, the per-queue gauge and the
   * handover scan. Callers use it directly; the table adds nothing to them.
   */
  readonly upkeep: LeaseUpkeep;
  /**
   * What the reports and lookups read slots into, passed to each: `view` for the slot at hand, `latest`
   * for the latest grant a walk keeps. Allocated once, since the publish's lease skip and every result
   * read through them; each call fills them afresh before it reads them.
   */
  private readonly view = new SlotView();
  private readonly latest = new SlotView();
  // A one-entry memo of refOf, a pure function of the key: a claim asks isLeased then grant of one key,
  // a result beginReport then finishReport.
  private memoKey: string | undefined;
  private memoRef: KeyRef | undefined;

  /** Bytes needed for `maxLeases` (and at least `minSlots` slots); allocate the shared buffer with this. */
  static byteLength(maxLeases: number, minSlots?: number): number {
    return (H.WORDS + slotCountFor(maxLeases, minSlots) * S.WORDS) * 4;
  }

  constructor(buffer: ArrayBuffer | SharedArrayBuffer, maxLeases: number, options: LeaseTableOptions = {}) {
    this.mem = new SlotMemory(buffer, maxLeases, options.minSlots);
    this.grants = new Grants(this.mem, options.random, options.onGrantStep);
    this.upkeep = new LeaseUpkeep(this.mem);
    this.maxLeases = this.mem.maxLeases;
    this.slotCount = this.mem.slotCount;
    this.sizeMismatch = this.mem.sizeMismatch;
  }

  private refOf(key: string): KeyRef {
    if (key === this.memoKey) return this.memoRef!;
    const ref = this.mem.refOf(key);
    this.memoKey = key;
    this.memoRef = ref;
    return ref;
  }

  /** First slot of `key`'s probe window (for explain output and tests that need colliding keys). */
  windowStart(key: string): number {
    return this.refOf(key).home;
  }

  /**
   * Grants `key` exclusively, or says why not. An expired lease of the key counts a miss and reports
   * `requeued`; enough misses hold the key instead.
   */
  grant(key: string, now: number, options: GrantOptions): GrantResult {
    return this.grants.grant(this.refOf(key), now, options);
  }

  /** Records a lease another node had out on a row this node now holds (Grants.adopt says how). */
  adopt(lease: HandoffLease, now: number): boolean {
    return this.grants.adopt(lease, now);
  }

  /** Releases the grant that `token` names, once; clears a hold and the miss count. */
  release(key: string, token: string, now: number): boolean {
    const parts = parseToken(token);
    return parts !== null && release(this.mem, this.refOf(key), parts, now, this.view);
  }

  /**
   * Starts reporting the lease `token` names. Only the key's latest grant, reported by its grantee or a
   * super_user, may start; a lease starts once, and every later start of it answers `duplicate` with the
   * first answer (or `pending` while it runs).
   */
  beginReport(key: string, token: unknown, caller: ReportCaller): ReportStart {
    const parts = parseToken(token);
    if (!parts) return { kind: 'superseded' };
    return beginReport(this.mem, this.refOf(key), parts, caller, this.view);
  }

  /**
   * Moves the end of the live lease `token` names to `terms.byMs` after `now` (never past its grant plus
   * `terms.maxLeaseMs`, never earlier than it is), with the fencing of its result: only the key's latest
   * grant, by its grantee or a super_user (util/leases/reports.ts extend).
   */
  extend(key: string, token: unknown, caller: ReportCaller, terms: ExtendTerms, now: number): ExtendResult {
    const parts = parseToken(token);
    if (!parts) return { ok: false, reason: 'superseded' };
    return extend(this.mem, this.refOf(key), parts, caller, terms, now, this.view);
  }

  /**
   * Records the answer of a started report: releases the lease (5 s grace) unless `keepLease` (the
   * fast-retry lane, where the lease paces the retry), and keeps the answer for retries.
   */
  finishReport(key: string, token: string, answer: ReportAnswer, keepLease: boolean, now: number): void {
    const parts = parseToken(token);
    if (!parts) return;
    const code = answer.accepted ? Report.ACCEPTED : Report.UNKNOWN_JOB;
    const minute = answer.accepted && answer.nextRenderTime !== null ? minuteOf(answer.nextRenderTime) : 0;
    const next = (state: number): number => (keepLease ? state : State.RELEASED);
    endReport(this.mem, this.refOf(key), parts, next, code, minute, now, this.view);
  }

  /** Gives a started report up (its write failed): the next report of the lease starts afresh. */
  abortReport(key: string, token: string): void {
    const parts = parseToken(token);
    if (parts) endReport(this.mem, this.refOf(key), parts, (state) => state, Report.NONE, 0, 0, this.view);
  }

  /**
   * The token of the key's latest grant when that grant went to exactly this grantee (the same user and
   * the same worker id), else null (docs/prerender-fleet.md).
   */
  grantOf(key: string, grantee: Grantee): string | null {
    return grantOf(this.mem, this.refOf(key), grantee, this.latest, this.view);
  }

  /** Is `token` the key's latest grant? A late result of an expired, not re-granted lease is current. */
  check(key: string, token: string): TokenCheck {
    return check(this.mem, this.refOf(key), parseToken(token), this.view);
  }

  /** The keeper's skip predicate: a live lease, a release grace or an active hold. */
  isLeased(key: string, now: number): boolean {
    return blockedUntil(this.mem, this.refOf(key), now, this.view) > 0;
  }

  /** isLeased for a key whose rowHash the caller already holds (the keeper stores one per row). */
  isLeasedHash(hi: number, lo: number, now: number): boolean {
    return blockedUntil(this.mem, this.mem.refOfHash(hi, lo), now, this.view) > 0;
  }

  /**
   * isLeasedHash with the end of the block it found: 0 when nothing blocks the key, else the instant
   * (ms) that block ends — the lease's expiry, a release grace's end or a hold's end, rounded as the
   * table stores it. Another slot of the key may block it for longer; never for less than this unless
   * the slot is released or given back first (the keeper parks a row on this, util/keeper/heldRows.ts).
   * A lease whose result is being written answers `now + 1`: its release is moments away, and the row's
   * change may already have reached the keeper, so it should not be parked until the lease's end.
   */
  leasedUntilHash(hi: number, lo: number, now: number): number {
    return blockedUntil(this.mem, this.mem.refOfHash(hi, lo), now, this.view);
  }

  /**
   * Whether the latest grant of the key with this hash had its result: released, or kept by the
   * fast-retry lane with its report answered. The beat's check of leases it hands over
   * (util/cluster/handoff.ts), so their new holder counts no miss for a render that succeeded.
   */
  reportedHash(hi: number, lo: number): boolean {
    return latestReported(this.mem, this.mem.refOfHash(hi, lo), this.latest, this.view);
  }

  /** The key's latest grant as explain shows it. */
  lookup(key: string, now: number): LeaseView {
    return lookup(this.mem, this.refOf(key), now, this.latest, this.view);
  }

  /** Gauge of leases out: exact for grants and releases, high by leases that expired since reconcile. */
  occupancy(): number {
    return this.mem.occupancy();
  }
}
