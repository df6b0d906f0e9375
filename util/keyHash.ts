// A 64-bit FNV-1a hash of a key's UTF-8 bytes, computed without BigInt.
//
// Every claim hashes its key once or twice, so this stays allocation-free apart from the result
// object: the 64-bit state lives in four 16-bit limbs, and the multiply by the FNV prime
// (2^40 + 0x1b3) is a shift-and-add over those limbs, which keeps every intermediate far below 2^31
// so V8 stays on small-integer arithmetic. The string form encodes UTF-8 on the fly (lone surrogates
// become U+FFFD, as TextEncoder does), so hashing a string and hashing its encoded bytes from the
// shared key region give the same value.

/** A 64-bit key hash as two signed 32-bit halves (how they sit in an Int32Array). Never both 0. */
export interface KeyHash {
  readonly hi: number;
  readonly lo: number;
}

// FNV-1a 64 offset basis 0xcbf29ce484222325, split into 16-bit limbs from the low end.
const BASIS0 = 0x2325;
const BASIS1 = 0x8422;
const BASIS2 = 0x9ce4;
const BASIS3 = 0xcbf2;

/** Hash of the UTF-8 encoding of `key`. */
export function keyHash(key: string): KeyHash {
  let h0 = BASIS0;
  let h1 = BASIS1;
  let h2 = BASIS2;
  let h3 = BASIS3;
  const length = key.length;
  for (let i = 0; i < length; i++) {
    const unit = key.charCodeAt(i);
    // `bytes` holds the code point's UTF-8 bytes packed low byte first; `count` says how many.
    let bytes: number;
    let count: number;
    if (unit < 0x80) {
      bytes = unit;
      count = 1;
    } else if (unit < 0x800) {
      bytes = 0xc0 | (unit >>> 6) | ((0x80 | (unit & 0x3f)) << 8);
      count = 2;
    } else if (unit >= 0xd800 && unit <= 0xdfff) {
      const next = i + 1 < length ? key.charCodeAt(i + 1) : 0;
      if (unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        const point = 0x10000 + ((unit - 0xd800) << 10) + (next - 0xdc00);
        bytes =
          0xf0 |
          (point >>> 18) |
          ((0x80 | ((point >>> 12) & 0x3f)) << 8) |
          ((0x80 | ((point >>> 6) & 0x3f)) << 16) |
          ((0x80 | (point & 0x3f)) << 24);
        count = 4;
        i++;
      } else {
        bytes = 0xef | (0xbf << 8) | (0xbd << 16); // U+FFFD for a lone surrogate
        count = 3;
      }
    } else {
      bytes = 0xe0 | (unit >>> 12) | ((0x80 | ((unit >>> 6) & 0x3f)) << 8) | ((0x80 | (unit & 0x3f)) << 16);
      count = 3;
    }
    for (let k = 0; k < count; k++) {
      h0 ^= (bytes >>> (k << 3)) & 0xff;
      // h × (2^40 + 0x1b3) mod 2^64: limb j gets h_j × 0x1b3, limb j+2 gets h_j × 0x100, then carry.
      const t0 = h0 * 0x1b3;
      const t1 = h1 * 0x1b3 + (t0 >>> 16);
      const t2 = h2 * 0x1b3 + h0 * 0x100 + (t1 >>> 16);
      const t3 = h3 * 0x1b3 + h1 * 0x100 + (t2 >>> 16);
      h0 = t0 & 0xffff;
      h1 = t1 & 0xffff;
      h2 = t2 & 0xffff;
      h3 = t3 & 0xffff;
    }
  }
  return finish(h0, h1, h2, h3);
}

function finish(h0: number, h1: number, h2: number, h3: number): KeyHash {
  const hi = (h3 << 16) | h2;
  const lo = (h1 << 16) | h0;
  // Zero is reserved to mean "no key" in the shared structures; a key hashing to 0 (odds 2^-64) is
  // moved to 1 rather than becoming indistinguishable from an empty slot.
  return hi === 0 && lo === 0 ? { hi: 0, lo: 1 } : { hi, lo };
}

/** murmur3's 32-bit finaliser: spreads every input bit over the output (an unsigned 32-bit result). */
export function mix32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}
