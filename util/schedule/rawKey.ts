// The schedule's keys straight from their stored bytes. ordered-binary (lmdb-js's
// key encoding, Harper 4.7.29's for RenderSchedule) stores a string key whose bytes are all printable
// ASCII as exactly those bytes: a first byte ≥ 24 other than 27 means a string, and a string runs to
// the end of the key when no byte is ≤ 4 (terminators and escapes) or ≥ 0x80 (UTF-8). Its reader builds
// such a key 48 characters at a time and joins the pieces (a cons string the keeper's hashes would
// flatten again); here it is one flat copy.
import { Buffer } from 'node:buffer';

/** Node's Buffer keeps the per-encoding decoders behind `toString` on its prototype (lmdb-js calls utf8Slice). */
interface SlicingBuffer extends Buffer {
  latin1Slice?(start: number, end: number): string;
}

/** The key ordered-binary decodes from bytes[start, end) when they are all printable ASCII; else undefined. */
export function printableKey(bytes: Uint8Array, start: number, end: number): string | undefined {
  if (end <= start || !(bytes instanceof Buffer)) return undefined;
  for (let i = start; i < end; i++) {
    const b = bytes[i]!;
    if (b < 0x20 || b > 0x7e) return undefined;
  }
  // Straight to the latin1 decoder: `toString` first looks the encoding up and bounds-checks again,
  // once per row of a load.
  const slicing = bytes as SlicingBuffer;
  return slicing.latin1Slice !== undefined
    ? slicing.latin1Slice(start, end)
    : bytes.toString('latin1', start, end);
}
