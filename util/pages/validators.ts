// The validators and compressed copies a stored page carries, decided once when it is stored so that
// serving it (docs/serving.md) costs no hashing or compression per request. Pure.
import { createHash } from 'node:crypto';

/**
 * A strong entity tag from the page's bytes: the same bytes always give the same tag (on every node and
 * after every restart), different bytes a different one. 128 bits of SHA-256, base64url.
 */
export function strongEtag(bytes: Uint8Array): string {
  return `"${createHash('sha256').update(bytes).digest('base64url').slice(0, 22)}"`;
}

/**
 * The strong tag a page is stored with when the origin sent no `etag` of its own, else null: an origin's
 * tag is served as it is, so its conditional requests stay the origin's.
 */
export function computedEtag(
  headers: Readonly<Record<string, string>> | null,
  bytes: Uint8Array,
): string | null {
  return headers?.etag === undefined ? strongEtag(bytes) : null;
}

/** Below this a compressed copy saves less than a TCP segment: pages this small are served as stored. */
export const COMPRESS_MIN_BYTES = 1024;

/** Whether a compressed copy is worth keeping: it must save at least an eighth of the bytes. */
export function worthKeeping(original: number, compressed: number): boolean {
  return compressed <= original - original / 8;
}
