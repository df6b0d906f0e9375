// Time arithmetic every room shares: the minute a due time falls in, and the one encoding of an instant
// as Int32 seconds in shared memory. The two are different units, so each has a name of its own.

export const MINUTE_MS = 60_000;

/**
 * The minute index an instant falls in (ms / 60 000, floored). The keeper buckets rows by it; multiply by
 * MINUTE_MS to get back the instant `startOfMinute` returns.
 */
export function minuteOf(ms: number): number {
  return Math.floor(ms / MINUTE_MS);
}

/** The instant, in ms, at which the minute holding `ms` starts. Every schedule writer stores this. */
export function startOfMinute(ms: number): number {
  return minuteOf(ms) * MINUTE_MS;
}

/**
 * Every Int32 time word in shared memory (ready set, state doc, keeper signal, lease table) counts seconds
 * from this instant: good until 2092, so no 2038 overflow. Minute-aligned, so a minute-floored time
 * encodes exactly whichever way it is rounded.
 */
export const SHARED_EPOCH_MS = Date.UTC(2024, 0, 1);
const INT32_MAX = 0x7fffffff;
/** INT32_MIN is never written by the codec: callers keep it free as their "unknown" marker. */
const LOWEST_SECONDS = -INT32_MAX;

/** Clamped to Int32 (a time word never wraps); `| 0` also turns Math.ceil's -0 into 0. */
function saturate(seconds: number): number {
  return Math.min(INT32_MAX, Math.max(LOWEST_SECONDS, seconds)) | 0;
}

function finite(ms: number): number {
  if (!Number.isFinite(ms)) throw new RangeError(`not a finite time: ${ms}`);
  return ms - SHARED_EPOCH_MS;
}

/**
 * ms → shared seconds, rounded down: the decoded instant is never later than `ms`. For instants that say
 * "this happened by then" (a publish, a document write, a due time): a row never looks due later than
 * it is. Saturates at the Int32 range instead of wrapping.
 */
export function sharedSecondsAtOrBefore(ms: number): number {
  return saturate(Math.floor(finite(ms) / 1000));
}

/**
 * ms → shared seconds, rounded up: the decoded instant is never earlier than `ms`. For ends that must not
 * come early (a lease expiry rounded down would expire up to a second before the `expiresAt` a fleet was
 * promised; a release grace or a hold would end short) and for heartbeats, whose age read back must never
 * be overstated (a live keeper would look stale early). Saturates at the Int32 range instead of wrapping.
 */
export function sharedSecondsAtOrAfter(ms: number): number {
  return saturate(Math.ceil(finite(ms) / 1000));
}

/** Shared seconds → ms; the inverse of both encoders for any whole second. */
export function fromSharedSeconds(seconds: number): number {
  return SHARED_EPOCH_MS + seconds * 1000;
}
