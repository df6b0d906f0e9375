// Hook secrets at rest: AES-256-GCM under the operator's QUEUE_KEEPER_SECRET_KEY, so a copy
// of the database alone cannot sign webhooks. Format `v1.<nonce>.<ciphertext>.<tag>`, each part base64url.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

const KEY_BYTES = 32;
/** 96-bit nonces are GCM's native size; random ones stay safe far beyond the secrets we will ever seal. */
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const VERSION = 'v1';

export class SealError extends Error {
  override name = 'SealError';
}

/**
 * Reads the sealing key from its environment value. Absent or blank → null (hooks are then unavailable);
 * present but not 32 bytes of standard base64 → throws, because a typo must not silently disable hooks.
 */
export function parseSealKey(envValue: string | undefined): Buffer | null {
  const text = envValue?.trim() ?? '';
  if (text === '') return null;
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) {
    throw new SealError('QUEUE_KEEPER_SECRET_KEY must be standard base64 (e.g. `openssl rand -base64 32`)');
  }
  const key = Buffer.from(text, 'base64');
  if (key.length !== KEY_BYTES) {
    throw new SealError(`QUEUE_KEEPER_SECRET_KEY must decode to ${KEY_BYTES} bytes, got ${key.length}`);
  }
  return key;
}

function checkKey(key: Buffer): void {
  if (key.length !== KEY_BYTES) throw new SealError(`sealing key must be ${KEY_BYTES} bytes`);
}

/**
 * Seals a secret. `context` (e.g. the hook id) is bound as associated data: a sealed value copied onto
 * another row will not open there.
 */
export function sealSecret(key: Buffer, plaintext: string, context = ''): string {
  checkKey(key);
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(Buffer.from(context, 'utf8'));
  const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return [VERSION, nonce, ct, cipher.getAuthTag()]
    .map((p) => (typeof p === 'string' ? p : p.toString('base64url')))
    .join('.');
}

/** Opens a sealed secret. Any tamper, wrong key, wrong context or bad format throws SealError. */
export function openSecret(key: Buffer, sealed: string, context = ''): string {
  checkKey(key);
  const parts = sealed.split('.');
  const b64url = /^[A-Za-z0-9_-]*$/;
  if (parts.length !== 4 || parts[0] !== VERSION || !parts.slice(1).every((p) => b64url.test(p))) {
    throw new SealError('sealed secret has an unknown format');
  }
  const [nonce, ct, tag] = parts.slice(1).map((p) => Buffer.from(p, 'base64url')) as [Buffer, Buffer, Buffer];
  // A short tag would let GCM accept a truncated check; the length is fixed, not trusted from input.
  if (nonce.length !== NONCE_BYTES || tag.length !== TAG_BYTES) {
    throw new SealError('sealed secret has an unknown format');
  }
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
    decipher.setAAD(Buffer.from(context, 'utf8'));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(ct), decipher.final()]).toString('utf8');
  } catch {
    throw new SealError('sealed secret does not open under this key');
  }
}
