// Standard Webhooks v1 signing: HMAC-SHA256 over `id.timestamp.body`, keyed by the bytes after
// `whsec_`. Receivers verify with any Standard Webhooks library, so the byte layout here is the contract.
import { createHmac, randomBytes } from 'node:crypto';

const SECRET_PREFIX = 'whsec_';
/** 32 bytes matches the SHA-256 output: a shorter key would weaken the MAC, a longer one adds nothing. */
const SECRET_BYTES = 32;

/** A fresh hook secret: `whsec_` + standard base64 of 32 random bytes. Shown once, then only sealed. */
export function mintSecret(): string {
  return SECRET_PREFIX + randomBytes(SECRET_BYTES).toString('base64');
}

/** A delivery id, stable across the retries of one delivery so receivers can deduplicate. */
export function mintMessageId(): string {
  return 'msg_' + randomBytes(16).toString('base64url');
}

/** The HMAC key of a secret; the prefix is optional, as in the reference libraries. */
export function secretKey(secret: string): Buffer {
  const b64 = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) throw new TypeError('webhook secret is not base64');
  return Buffer.from(b64, 'base64');
}

function sign(key: Buffer, msgId: string, timestampSec: number, body: string): string {
  return (
    'v1,' + createHmac('sha256', key).update(`${msgId}.${timestampSec}.${body}`, 'utf8').digest('base64')
  );
}

/**
 * The `webhook-signature` value: one `v1,<sig>` per secret, space separated. During a rotation grace both
 * the new and the previous secret sign, so a receiver holding either one verifies.
 */
export function signatureHeader(
  secrets: readonly string[],
  msgId: string,
  timestampSec: number,
  body: string,
): string {
  if (secrets.length === 0) throw new RangeError('at least one secret is needed to sign');
  if (!Number.isSafeInteger(timestampSec) || timestampSec < 0) {
    throw new RangeError('webhook timestamp must be whole seconds');
  }
  return secrets.map((s) => sign(secretKey(s), msgId, timestampSec, body)).join(' ');
}

export interface SigningSecrets {
  current: string;
  previous?: string | null;
  /** Epoch ms until which `previous` still signs: 24 h after a rotation, for receivers to roll over. */
  previousValidUntil?: number | null;
}

/** The secrets that sign at `now`: the current one, then the previous one while its grace lasts. */
export function activeSecrets(s: SigningSecrets, now: number): string[] {
  const grace = s.previous != null && s.previousValidUntil != null && now < s.previousValidUntil;
  return grace ? [s.current, s.previous!] : [s.current];
}

export interface WebhookMessage {
  msgId: string;
  /** Fresh per attempt: receivers reject stale timestamps (5 min in the reference libraries). */
  timestampSec: number;
  body: string;
  secrets: readonly string[];
  userAgent: string;
}

/** Every header a delivery carries (docs/wakes.md, "What a delivery looks like"). */
export function webhookHeaders(m: WebhookMessage): Record<string, string> {
  return {
    'content-type': 'application/json',
    'user-agent': m.userAgent,
    'webhook-id': m.msgId,
    'webhook-timestamp': String(m.timestampSec),
    'webhook-signature': signatureHeader(m.secrets, m.msgId, m.timestampSec, m.body),
  };
}
