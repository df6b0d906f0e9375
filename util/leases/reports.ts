// What a result does to its lease: the token checks, the report that starts once and keeps its answer
// for every retry, and the release that frees the key after its grace. Each finds the slot of the grant
// a token names in the key's window (util/leases/lookups.ts) and changes it with one rewrite through
// BUSY (SlotMemory.rewrite) from the state word that walk read it under, so a slot that changed since
// fails the CAS; a CAS that loses to another writer reads the window again. Each reads into
// the views its caller passes (`view`, and `latest` with `scratch` for a walk that keeps its latest grant).
import { fromSharedSeconds, MINUTE_MS, sharedSecondsAtOrAfter, sharedSecondsAtOrBefore } from '../time.js';
import { Report, S, State, blocks, nextWord } from './slots.js';
import { MAX_ATTEMPTS, type KeyRef, type SlotMemory, type SlotView } from './memory.js';
import { grantSlot, latestGrant, latestToken } from './lookups.js';
import { formatToken, type TokenParts } from './token.js';

export type TokenCheck = 'current' | 'superseded' | 'none';
/** The answer a result got, kept with the lease so a retry of the same result gets it again. */
/** A report's answer; `nextRenderTime` null when the result retired the row (kept as minute 0). */
export type ReportAnswer =
  { accepted: true; nextRenderTime: number | null } | { accepted: false; code: 'unknown_job' };
/**
 * Whether a result may be applied: `first` (go ahead, then finishReport or abortReport), `duplicate`
 * (the same result was applied already: answer it again), `pending` (the same result is being applied
 * right now), `superseded` (not the key's latest grant, not this caller's, or not a token at all).
 */
export type ReportStart =
  | { kind: 'first' }
  | { kind: 'duplicate'; answer: ReportAnswer }
  | { kind: 'pending' }
  | { kind: 'superseded' };
/** Who a lease went to: the nameHash of the user and of the claim's `x-worker-id`. */
export interface Grantee {
  user: number;
  worker: number;
}
export interface ReportCaller {
  /** nameHash of the reporting user. */
  user: number;
  /** A super_user may report any lease. */
  superUser: boolean;
}

/** Does `view` (a slot of `ref`) carry exactly this token (instant and random bits)? */
function sameGrant(view: SlotView, ref: KeyRef, parts: TokenParts): boolean {
  return (
    view.holds(ref) &&
    view.token === parts.grantedAt &&
    view.randHi === parts.randHi &&
    view.randLo === parts.randLo
  );
}

/** Releases the grant `parts` names, once; clears a hold and the miss count. */
export function release(
  mem: SlotMemory,
  ref: KeyRef,
  parts: TokenParts,
  now: number,
  view: SlotView,
): boolean {
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const base = grantSlot(mem, ref, parts.grantedAt, view);
    if (base < 0) return false;
    const word = view.word;
    if ((word & State.MASK) === State.RELEASED) return false;
    if (!sameGrant(view, ref, parts)) return false;
    if (mem.rewrite(base, word, State.RELEASED, now, view.report, view.answer)) return true;
  }
  return false;
}

/**
 * Starts reporting the lease `parts` names. Only the key's latest grant, reported by its grantee or a
 * super_user, may start; a lease starts once, and every later start of it answers `duplicate` with the
 * first answer (or `pending` while it runs).
 */
export function beginReport(
  mem: SlotMemory,
  ref: KeyRef,
  parts: TokenParts,
  caller: ReportCaller,
  view: SlotView,
): ReportStart {
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    if (latestToken(mem, ref, view) !== parts.grantedAt) return { kind: 'superseded' };
    const base = grantSlot(mem, ref, parts.grantedAt, view);
    if (base < 0) return { kind: 'superseded' };
    const word = view.word;
    const state = word & State.MASK;
    if (!sameGrant(view, ref, parts)) return { kind: 'superseded' };
    if (!caller.superUser && view.user !== 0 && view.user !== caller.user) return { kind: 'superseded' };
    const report = view.report;
    if (report === Report.ACCEPTED)
      return {
        kind: 'duplicate',
        answer: { accepted: true, nextRenderTime: view.answer === 0 ? null : view.answer * MINUTE_MS },
      };
    if (report === Report.UNKNOWN_JOB)
      return { kind: 'duplicate', answer: { accepted: false, code: 'unknown_job' } };
    if (report === Report.PENDING) return { kind: 'pending' };
    // A released slot always carries its answer; anything else here is a lease still to report.
    if (state === State.RELEASED) return { kind: 'superseded' };
    if (mem.rewrite(base, word, state, 0, Report.PENDING, 0)) return { kind: 'first' };
  }
  return { kind: 'pending' };
}

/**
 * Ends a started report of the lease `parts` names: moves its slot to `nextState(state)` with the
 * report words `report` and `answer` (a release at `now` when that state is RELEASED). Nothing when the
 * lease is not the one reporting.
 */
export function endReport(
  mem: SlotMemory,
  ref: KeyRef,
  parts: TokenParts,
  nextState: (state: number) => number,
  report: number,
  answer: number,
  now: number,
  view: SlotView,
): void {
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const base = grantSlot(mem, ref, parts.grantedAt, view);
    if (base < 0) return;
    const word = view.word;
    const state = word & State.MASK;
    if (!sameGrant(view, ref, parts) || view.report !== Report.PENDING) return;
    if (mem.rewrite(base, word, nextState(state), now, report, answer)) return;
  }
}

/** Is `parts` (null: not a token) the key's latest grant? A late result of an expired lease is current. */
export function check(mem: SlotMemory, ref: KeyRef, parts: TokenParts | null, view: SlotView): TokenCheck {
  const latest = latestToken(mem, ref, view);
  if (latest < 0) return 'none';
  if (!parts || latest !== parts.grantedAt) return 'superseded';
  const base = grantSlot(mem, ref, parts.grantedAt, view);
  return base >= 0 && sameGrant(view, ref, parts) ? 'current' : 'superseded';
}

/**
 * The token of the key's latest grant when that grant went to exactly this grantee (the same user and
 * the same worker id), else null. A result that carries no lease token finds its lease this way
 * (docs/prerender-fleet.md); there is no super_user exception, since a token-less result names no
 * lease of its own and only the grantee can say it rendered this one.
 */
export function grantOf(
  mem: SlotMemory,
  ref: KeyRef,
  grantee: Grantee,
  latest: SlotView,
  scratch: SlotView,
): string | null {
  if (!latestGrant(mem, ref, latest, scratch)) return null;
  if (latest.user !== grantee.user || latest.worker !== grantee.worker) return null;
  return formatToken({ grantedAt: latest.token, randHi: latest.randHi, randLo: latest.randLo });
}

/** What an extension came to: the lease's new end, or why it was refused (nothing changed then). */
export type ExtendResult =
  | { ok: true; expiresAt: number }
  /** `superseded`: not the key's latest grant, or not this caller's; `ended`: past its end or reported. */
  | { ok: false; reason: 'superseded' | 'ended' };

/** How far an extension may move a lease's end. */
export interface ExtendTerms {
  /** The new end is this long after `now` (the caller clamps it to its own maximum first). */
  byMs: number;
  /** The end never passes the grant instant plus this. */
  maxLeaseMs: number;
}

const EXTEND_SUPERSEDED: ExtendResult = { ok: false, reason: 'superseded' };
const EXTEND_ENDED: ExtendResult = { ok: false, reason: 'ended' };

/**
 * Moves the end of the live lease `parts` names to `byMs` after `now`, never past its grant plus
 * `maxLeaseMs` and never earlier than it is. The same fencing as its result (beginReport): only the
 * key's latest grant, by its grantee or a super_user. A lease past its end, or whose result has started,
 * is not extended: a grant may already be free to hand the key out again.
 *
 * Exclusivity. The lease blocked its key when this read it and blocks it for longer after the write, so
 * a grant that scans after the write refuses. A grant whose clock has already passed the old end takes
 * the key's own latest slot, which is this lease's (util/leases/grantScan.ts decideGrant): it and this
 * write meet on that slot's CAS, one wins, and the other reads the window again (the property test in
 * test/unit/leaseExtend.test.ts interleaves them). Should a grant ever publish on another slot instead,
 * the rescan after the write sees it, as a grant's rescan does (util/leases/grant.ts), and puts the old
 * end back and answers `superseded`; the grant rules today leave no path to it.
 */
export function extend(
  mem: SlotMemory,
  ref: KeyRef,
  parts: TokenParts,
  caller: ReportCaller,
  terms: ExtendTerms,
  now: number,
  view: SlotView,
): ExtendResult {
  const a = mem.words;
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    if (latestToken(mem, ref, view) !== parts.grantedAt) return EXTEND_SUPERSEDED;
    const base = grantSlot(mem, ref, parts.grantedAt, view);
    if (base < 0 || !sameGrant(view, ref, parts)) return EXTEND_SUPERSEDED;
    if (!caller.superUser && view.user !== 0 && view.user !== caller.user) return EXTEND_SUPERSEDED;
    const word = view.word;
    const was = view.expiry;
    if ((word & State.MASK) !== State.LEASED || view.report !== Report.NONE) return EXTEND_ENDED;
    if (fromSharedSeconds(was) <= now) return EXTEND_ENDED;
    // Rounded up as every end is (S.EXPIRY), except at the cap, which rounds down so it is never passed.
    const wanted = sharedSecondsAtOrAfter(now + Math.max(0, terms.byMs));
    const cap = sharedSecondsAtOrBefore(parts.grantedAt + terms.maxLeaseMs);
    const until = Math.max(was, Math.min(wanted, cap));
    if (until === was) return { ok: true, expiresAt: fromSharedSeconds(was) };
    const busy = nextWord(word, State.BUSY);
    if (Atomics.compareExchange(a, base, word, busy) !== word) continue;
    a[base + S.EXPIRY] = until;
    const published = nextWord(busy, State.LEASED);
    Atomics.store(a, base, published);
    if (rivalOf(mem, ref, base, now, view)) {
      // Nothing but this call changes a live lease's end; a report or release that got in since keeps it.
      const back = nextWord(published, State.BUSY);
      if (Atomics.compareExchange(a, base, published, back) === published) {
        a[base + S.EXPIRY] = was;
        Atomics.store(a, base, nextWord(back, State.LEASED));
      }
      return EXTEND_SUPERSEDED;
    }
    return { ok: true, expiresAt: fromSharedSeconds(until) };
  }
  return EXTEND_SUPERSEDED;
}

/** Does a slot of `ref`'s window other than `own` block the key at `now` (a grant that raced)? */
function rivalOf(mem: SlotMemory, ref: KeyRef, own: number, now: number, view: SlotView): boolean {
  for (let k = 0, n = mem.window(ref); k < n; k++) {
    const base = mem.windowBase(ref, k);
    if (base === own) continue;
    const state = mem.read(base, false, view) & State.MASK;
    if (view.holds(ref) && blocks(state, view.expiry, now)) return true;
  }
  return false;
}
