// The body of a notify wake (docs/wakes.md, "What a delivery looks like") and the name bounds that keep it
// inside 4 KiB. A wake names one URL twice (job.id, the row's key `<url>|<device>`, and job.url), so its
// size is set by the longest URL we accept, and the budget left over is what queue (route) and fleet names
// may use. Pure.

/** A wake body is never larger than this: small enough for any receiver's request limit. */
export const MAX_WAKE_BODY_BYTES = 4096;
/** The most a row key's device suffix adds to job.id: `|` and a 32-character device name. */
const DEVICE_SUFFIX_BYTES = 33;

/** Route names are queue names: letters, digits, '_', '.', '-' — no byte of them is JSON-escaped. */
export const MAX_QUEUE_NAME_CHARS = 64;
export const QUEUE_NAME = new RegExp(`^[A-Za-z0-9_.-]{1,${MAX_QUEUE_NAME_CHARS}}$`);

/**
 * Fleet names are free text for people, so they are bounded in UTF-8 bytes, with no control character
 * and no `"` or `\` (JSON escapes exactly those, and lone surrogates, which are refused too), so their
 * JSON form is their bytes plus two quotes.
 *
 * The budget: the body with a 1,900-byte URL (no escaped characters: util/schedule/targetChecks.ts refuses them)
 * twice, 13-digit `dueAt` and `createdAt`, `attempt` 10 (notify.maxAttempts is at most 10), reason
 * `requeued` and empty names is 3,971 bytes, which leaves 125 bytes for the two names: 64 + 60 = 124.
 * A device suffix on the key (up to 33 bytes, util/schedule/rowKey.ts) can take the worst case past the
 * limit by those bytes: the fleet name, a label for people, is then cut to fit (wakeBody).
 * test/unit/wakeBody.test.ts builds that worst case and checks it fits.
 */
export const MAX_FLEET_NAME_BYTES = 60;

const FLEET_NAME_REFUSED = /[\u0000-\u001f\u007f-\u009f"\\]/;

/** Why a fleet name is refused, or null. */
export function fleetNameProblem(name: string): string | null {
  if (name.trim() === '') return 'must not be empty';
  if (!(name as unknown as { isWellFormed(): boolean }).isWellFormed())
    return 'must be well-formed Unicode (it has a lone surrogate)';
  if (FLEET_NAME_REFUSED.test(name)) return 'must not contain control characters, " or \\';
  if (Buffer.byteLength(name, 'utf8') > MAX_FLEET_NAME_BYTES)
    return `must be at most ${MAX_FLEET_NAME_BYTES} bytes of UTF-8`;
  return null;
}

export interface WakeBodyInput {
  reason: string;
  queue: string;
  fleet: string;
  job: { id: string; url: string; dueAt: number; fromSitemap: boolean };
  attempt: number;
  createdAt: number;
}

/**
 * The JSON body of one attempt, fields in the order docs/wakes.md shows them. Over MAX_WAKE_BODY_BYTES
 * (a longest URL under a long device name, with the longest names) the fleet name is cut to fit.
 */
export function wakeBody(w: WakeBodyInput): string {
  const body = (fleet: string) =>
    JSON.stringify({
      type: 'render.ready',
      reason: w.reason,
      queue: w.queue,
      fleet,
      job: { id: w.job.id, url: w.job.url, dueAt: w.job.dueAt, fromSitemap: w.job.fromSitemap },
      attempt: w.attempt,
      createdAt: w.createdAt,
    });
  const whole = body(w.fleet);
  const over = Buffer.byteLength(whole) - MAX_WAKE_BODY_BYTES;
  // Only what a device suffix can add is cut; anything larger is a body the bounds never allow, which the
  // dispatcher refuses to send (a fault of ours, services/notify/dispatcher.ts).
  if (over <= 0 || over > DEVICE_SUFFIX_BYTES) return whole;
  // Fleet names are never escaped in JSON (fleetNameProblem), so each character costs its UTF-8 bytes.
  const chars = [...w.fleet];
  let cut = 0;
  while (chars.length > 0 && cut < over) cut += Buffer.byteLength(chars.pop()!);
  return body(chars.join(''));
}
