// The bytes of the keeper's held keys (util/keeper/heldRows.ts), off the JS heap: UTF-8 in 1 MiB pages,
// each key at a position HeldRows keeps with its length. Why not JS strings: at a million 60–200-byte
// keys a string costs its bytes plus a 16-byte header, 8-byte alignment and an 8-byte array slot, and a
// major GC marks every one of them; here a key costs its bytes rounded to 4 and HeldRows' 6 bytes of
// position and length. A released key's space goes to the next key of the same rounded length.
import { Buffer } from 'node:buffer';

const PAGE_SHIFT = 20;
const PAGE_BYTES = 1 << PAGE_SHIFT;
// Positions count 4-byte granules: an Int32 position addresses 8 GiB of keys, and a freed block has room
// for the link to the next free block of its size.
const GRANULE_SHIFT = 2;
const PAGE_GRANULES_SHIFT = PAGE_SHIFT - GRANULE_SHIFT;
const PAGE_GRANULES_MASK = (1 << PAGE_GRANULES_SHIFT) - 1;
/** The longest key the arena stores (HeldRows keeps lengths in 16 bits); far above any row key's. */
export const MAX_KEY_BYTES = 0xffff;
const MAX_GRANULES = (MAX_KEY_BYTES + 3) >>> GRANULE_SHIFT;

/** Granules a key of `length` bytes takes (at least one, so every stored key has a distinct position). */
function granulesOf(length: number): number {
  return length === 0 ? 1 : (length + 3) >>> GRANULE_SHIFT;
}

export class KeyArena {
  private readonly pages: Buffer[] = [];
  /** The same pages as Int32 words: a freed block's first word links the next free block of its size. */
  private readonly links: Int32Array[] = [];
  /** The first never-used granule. */
  private end = 0;
  /** Per size in granules, the first free block of that size (-1: none). */
  private readonly free = new Int32Array(MAX_GRANULES + 1).fill(-1);
  /** Bytes of released blocks not yet reused. */
  freeBytes = 0;

  /** Bytes of pages allocated. */
  get capacityBytes(): number {
    return this.pages.length * PAGE_BYTES;
  }

  /**
   * The UTF-8 length of `key`. Keys are expected well formed (a lone surrogate is stored as U+FFFD, and
   * then reads back changed; KeeperCore refuses such keys before they get here).
   */
  static byteLength(key: string): number {
    const n = key.length;
    for (let i = 0; i < n; i++) if (key.charCodeAt(i) >= 0x80) return Buffer.byteLength(key, 'utf8');
    return n;
  }

  /** Stores `key` (`length` = its byteLength) and returns its position. */
  store(key: string, length: number): number {
    if (length > MAX_KEY_BYTES)
      throw new RangeError(`keeper: a key of ${length} bytes is over ${MAX_KEY_BYTES}`);
    const at = this.allocate(granulesOf(length));
    const page = this.pages[at >>> PAGE_GRANULES_SHIFT]!;
    const o = (at & PAGE_GRANULES_MASK) << GRANULE_SHIFT;
    if (length === key.length) {
      for (let i = 0; i < length; i++) page[o + i] = key.charCodeAt(i);
    } else {
      page.write(key, o, length, 'utf8');
    }
    return at;
  }

  /** Gives the space of the key at `at` (`length` bytes) back for reuse. */
  release(at: number, length: number): void {
    const size = granulesOf(length);
    this.links[at >>> PAGE_GRANULES_SHIFT]![at & PAGE_GRANULES_MASK] = this.free[size]!;
    this.free[size] = at;
    this.freeBytes += size << GRANULE_SHIFT;
  }

  /** Whether the key at `at` (`length` bytes) is `key`, compared without building a string. */
  equals(at: number, length: number, key: string): boolean {
    const n = key.length;
    if (n > length) return false; // a string's UTF-8 is never shorter than its UTF-16 units
    const page = this.pages[at >>> PAGE_GRANULES_SHIFT]!;
    const o = (at & PAGE_GRANULES_MASK) << GRANULE_SHIFT;
    if (n === length) {
      // Equal lengths: only an ASCII key can match (any other character takes more bytes than units).
      for (let i = 0; i < n; i++) {
        const c = key.charCodeAt(i);
        if (c !== page[o + i] || c >= 0x80) return false;
      }
      return true;
    }
    return equalsUtf8(page, o, length, key);
  }

  /** The key at `at` (`length` bytes) as a string: built anew on each call. */
  read(at: number, length: number): string {
    const o = (at & PAGE_GRANULES_MASK) << GRANULE_SHIFT;
    return this.pages[at >>> PAGE_GRANULES_SHIFT]!.toString('utf8', o, o + length);
  }

  /** Copies the key at `at` (`length` bytes) into `into` from index `to`; no allocation. */
  copy(at: number, length: number, into: Uint8Array, to: number): void {
    const page = this.pages[at >>> PAGE_GRANULES_SHIFT]!;
    const o = (at & PAGE_GRANULES_MASK) << GRANULE_SHIFT;
    for (let i = 0; i < length; i++) into[to + i] = page[o + i]!;
  }

  private allocate(size: number): number {
    const reused = this.free[size]!;
    if (reused >= 0) {
      this.free[size] = this.links[reused >>> PAGE_GRANULES_SHIFT]![reused & PAGE_GRANULES_MASK]!;
      this.freeBytes -= size << GRANULE_SHIFT;
      return reused;
    }
    let at = this.end;
    // A key never straddles two pages: the rest of a page too short for it is left as a free block.
    const room = (this.pages.length << PAGE_GRANULES_SHIFT) - at;
    if (room < size) {
      if (room > 0) this.release(at, room << GRANULE_SHIFT);
      at = this.pages.length << PAGE_GRANULES_SHIFT;
      const page = Buffer.alloc(PAGE_BYTES);
      this.pages.push(page);
      this.links.push(new Int32Array(page.buffer, page.byteOffset, PAGE_BYTES >>> GRANULE_SHIFT));
    }
    this.end = at + size;
    return at;
  }
}

/** Whether `length` bytes of `page` from `o` are the UTF-8 of `key` (a lone surrogate matches nothing). */
function equalsUtf8(page: Uint8Array, o: number, length: number, key: string): boolean {
  let j = o;
  const end = o + length;
  const n = key.length;
  for (let i = 0; i < n; i++) {
    let c = key.charCodeAt(i);
    if (c < 0x80) {
      if (j >= end || page[j++] !== c) return false;
      continue;
    }
    if (c < 0x800) {
      if (j + 2 > end || page[j] !== (0xc0 | (c >> 6)) || page[j + 1] !== (0x80 | (c & 0x3f))) return false;
      j += 2;
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const d = i + 1 < n ? key.charCodeAt(i + 1) : 0;
      if (c > 0xdbff || d < 0xdc00 || d > 0xdfff) return false;
      c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
      i++;
      if (
        j + 4 > end ||
        page[j] !== (0xf0 | (c >> 18)) ||
        page[j + 1] !== (0x80 | ((c >> 12) & 0x3f)) ||
        page[j + 2] !== (0x80 | ((c >> 6) & 0x3f)) ||
        page[j + 3] !== (0x80 | (c & 0x3f))
      )
        return false;
      j += 4;
      continue;
    }
    if (
      j + 3 > end ||
      page[j] !== (0xe0 | (c >> 12)) ||
      page[j + 1] !== (0x80 | ((c >> 6) & 0x3f)) ||
      page[j + 2] !== (0x80 | (c & 0x3f))
    )
      return false;
    j += 3;
  }
  return j === end;
}
