// Lease tokens as callers see them: the grant instant (which orders a key's grants) followed by 64
// random bits, as 28 lowercase hex digits. The instant alone was guessable — anyone who knew roughly
// when a job was handed out could report it — so the random half is what makes a token a secret.
import { randomFillSync } from 'node:crypto';

export interface TokenParts {
  /** The grant instant in ms; a key's grants only ever grow in it. */
  grantedAt: number;
  randHi: number;
  randLo: number;
}

const INSTANT_DIGITS = 12; // 48 bits of ms: good until the year 10889
const RAND_DIGITS = 8;
const TOKEN_PATTERN = /^[0-9a-f]{28}$/;

const hex = (n: number, digits: number): string => (n >>> 0).toString(16).padStart(digits, '0');

export function formatToken(parts: TokenParts): string {
  return (
    parts.grantedAt.toString(16).padStart(INSTANT_DIGITS, '0') +
    hex(parts.randHi, RAND_DIGITS) +
    hex(parts.randLo, RAND_DIGITS)
  );
}

/** The parts of a well-formed token, or null for anything else (never throws on caller input). */
export function parseToken(token: unknown): TokenParts | null {
  if (typeof token !== 'string' || !TOKEN_PATTERN.test(token)) return null;
  const grantedAt = parseInt(token.slice(0, INSTANT_DIGITS), 16);
  if (!Number.isSafeInteger(grantedAt)) return null;
  return {
    grantedAt,
    randHi: parseInt(token.slice(INSTANT_DIGITS, INSTANT_DIGITS + RAND_DIGITS), 16) | 0,
    randLo: parseInt(token.slice(INSTANT_DIGITS + RAND_DIGITS), 16) | 0,
  };
}

// One syscall fills a pool for 512 grants; a grant takes 8 bytes of it.
const POOL_WORDS = 1024;

/** Words from the operating system's CSPRNG, refilled a pool at a time. */
class RandomPool {
  private readonly words = new Int32Array(POOL_WORDS);
  private at = POOL_WORDS;

  word(): number {
    if (this.at >= POOL_WORDS) {
      randomFillSync(this.words);
      this.at = 0;
    }
    return this.words[this.at++] ?? 0;
  }
}

// process-wide (per thread, as every module is): random bytes are not anyone's state, so every grant of
// this thread draws from one pool instead of each lease table keeping its own syscall batch.
const processWideRandomPool = new RandomPool();

/** 32 random bits from the operating system's CSPRNG (through this thread's pool). */
export function randomWord(): number {
  return processWideRandomPool.word();
}

/**
 * A 32-bit FNV-1a hash of a name (a user, a queue). Only compared for equality against the same
 * hash of another name; a collision between two users' names would let one of them report the
 * other's lease, and then only with that lease's unguessable token.
 */
export function nameHash(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  // 0 is kept for "no one" (a slot written before this field existed reads 0).
  return h === 0 ? 1 : h | 0;
}
