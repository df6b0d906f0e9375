// A set of URLs held as two 32-bit hashes each (an open-addressing table over one Uint32Array), so a walk
// of a million URLs remembers what it saw in ~16 MB instead of the strings themselves. Two different URLs
// share a 64-bit hash with odds of about 1 in 10^7 at 10^6 URLs: such a URL reads as seen, so at worst it
// is not filed again by that walk (a duplicate) or not unlinked by it.

function hash64(s: string): { hi: number; lo: number } {
  let h1 = 0x811c9dc5;
  let h2 = 0x9747b28c;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193);
    h2 = Math.imul(h2 ^ c, 0x5bd1e995);
    h2 ^= h2 >>> 15;
  }
  // Never (0, 0): that pair marks an empty slot.
  return { hi: h1 >>> 0 || 1, lo: h2 >>> 0 };
}

export class UrlSet {
  private slots: Uint32Array;
  private count = 0;

  constructor(expected = 1024) {
    let cap = 1024;
    while (cap < expected * 2) cap *= 2;
    this.slots = new Uint32Array(cap * 2);
  }

  get size(): number {
    return this.count;
  }

  has(url: string): boolean {
    const { hi, lo } = hash64(url);
    return this.find(this.slots, hi, lo) < 0;
  }

  /** Adds `url`; true when it was not in the set. */
  add(url: string): boolean {
    const { hi, lo } = hash64(url);
    const at = this.find(this.slots, hi, lo);
    if (at < 0) return false;
    this.slots[at] = hi;
    this.slots[at + 1] = lo;
    this.count++;
    if (this.count * 2 > this.slots.length / 2) this.grow();
    return true;
  }

  /** The free slot for (hi, lo), or -1 when the pair is present. */
  private find(slots: Uint32Array, hi: number, lo: number): number {
    const mask = slots.length / 2 - 1;
    let i = (hi ^ Math.imul(lo, 0x9e3779b1)) & mask;
    for (;;) {
      const a = slots[i * 2]!;
      if (a === 0) return i * 2;
      if (a === hi && slots[i * 2 + 1] === lo) return -1;
      i = (i + 1) & mask;
    }
  }

  private grow(): void {
    const old = this.slots;
    const next = new Uint32Array(old.length * 2);
    for (let i = 0; i < old.length; i += 2) {
      const hi = old[i]!;
      if (hi === 0) continue;
      const at = this.find(next, hi, old[i + 1]!);
      next[at] = hi;
      next[at + 1] = old[i + 1]!;
    }
    this.slots = next;
  }
}
