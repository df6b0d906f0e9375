// The bytes of the keeper's held keys (util/keeper/heldRows.ts), off the JS heap: UTF-8 in 1 MiB pages,
// each key at a position HeldRows keeps with its length and its host. Why not JS strings: at a million
// 60–200-byte keys a string costs its bytes plus a 16-byte header, 8-byte alignment and an 8-byte array
// slot, and a major GC marks every one of them. Here a URL key's scheme and host (`https://shop.example`)
// are stored once for every key that shares them (a site's URLs do), and a key costs the rest of its
// bytes rounded up to 4, plus HeldRows' 8 bytes of position, length and host. A released key's space goes
// to the next key of the same rounded length.
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
// `copy` reads the pages as Int32 words in the platform's byte order and must write them back in it.
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** Granules `length` bytes take (at least one, so every stored key has a distinct position). */
function granulesOf(length: number): number {
  return length === 0 ? 1 : (length + 3) >>> GRANULE_SHIFT;
}

/** Host 0: the key is stored whole. */
export const NO_HOST = 0;
// Host numbers are 16 bits (HeldRows keeps them per row); keys of further hosts are stored whole.
const MAX_HOSTS = 0xffff;
// A longer scheme+host is stored with each key: sharing it is not worth a table entry.
const MAX_HOST_UNITS = 255;

/**
 * The scheme+host prefixes keys share: the key's characters up to the first `/` after `://`, ASCII only
 * (WHATWG URL serialisation punycodes a host). Kept once seen: at most 65,535 of at most 255 bytes.
 */
class KeyHosts {
  /** Each host's prefix by number (0: none), as a flat string and as bytes from a 4-byte boundary. */
  readonly names: string[] = [''];
  readonly at: number[] = [0];
  bytes = Buffer.alloc(4096);
  words = new Int32Array(this.bytes.buffer, this.bytes.byteOffset, this.bytes.length >>> 2);
  private end = 0;
  private table = new Uint16Array(256);
  private hashes: number[] = [0];
  // A load walks keys in order, a site's URLs together: the last host found is tried first.
  private last = NO_HOST;

  /** The number of `key`'s scheme+host, interned on first sight; NO_HOST when it has none to share. */
  of(key: string): number {
    const last = this.names[this.last]!;
    // The name holds no `/` past its `://`, so the key's first one there is right after the name.
    if (this.last !== NO_HOST && key.charCodeAt(last.length) === 0x2f && key.startsWith(last))
      return this.last;
    const id = this.find(key);
    if (id !== NO_HOST) this.last = id;
    return id;
  }

  private find(key: string): number {
    const scheme = key.indexOf('://');
    if (scheme < 0 || scheme > 16) return NO_HOST;
    const end = key.indexOf('/', scheme + 3);
    if (end < 0 || end > MAX_HOST_UNITS) return NO_HOST;
    let h = 0x811c9dc5 | 0;
    for (let i = 0; i < end; i++) {
      const c = key.charCodeAt(i);
      if (c >= 0x80) return NO_HOST;
      h = Math.imul(h ^ c, 0x01000193);
    }
    const mask = this.table.length - 1;
    for (let i = h & mask; ; i = (i + 1) & mask) {
      const id = this.table[i]!;
      if (id === NO_HOST) break;
      const name = this.names[id]!;
      if (this.hashes[id] === h && name.length === end && key.startsWith(name)) return id;
    }
    if (this.names.length > MAX_HOSTS) return NO_HOST;
    // Kept flat: a slice would hold on to the whole key it was cut from.
    return this.add(Buffer.from(key.slice(0, end), 'latin1').toString('latin1'), h);
  }

  private add(name: string, h: number): number {
    const id = this.names.length;
    if (this.end + name.length > this.bytes.length) {
      const grown = Buffer.alloc(this.bytes.length * 2);
      this.bytes.copy(grown);
      this.bytes = grown;
      this.words = new Int32Array(grown.buffer, grown.byteOffset, grown.length >>> 2);
    }
    this.bytes.write(name, this.end, 'latin1');
    this.names.push(name);
    this.at.push(this.end);
    this.hashes.push(h);
    this.end += (name.length + 3) & ~3;
    if (this.names.length * 2 > this.table.length) this.rehash(this.table.length * 2);
    else this.place(id, this.table);
    return id;
  }

  private place(id: number, table: Uint16Array): void {
    const mask = table.length - 1;
    let i = this.hashes[id]! & mask;
    while (table[i] !== NO_HOST) i = (i + 1) & mask;
    table[i] = id;
  }

  private rehash(size: number): void {
    this.table = new Uint16Array(size);
    for (let id = 1; id < this.names.length; id++) this.place(id, this.table);
  }
}

export class KeyArena {
  private readonly pages: Buffer[] = [];
  /**
   * The same pages as Int32 words: a freed block's first word links the next free block of its size, and
   * `copy` reads keys through them.
   */
  private readonly links: Int32Array[] = [];
  /** The first never-used granule. */
  private end = 0;
  /** Per size in granules, the first free block of that size (-1: none). */
  private readonly free = new Int32Array(MAX_GRANULES + 1).fill(-1);
  /** Bytes of released blocks not yet reused. */
  freeBytes = 0;
  /** The last target of `copy`, and a view of it that writes four bytes at any offset. */
  private target: Uint8Array | null = null;
  private targetView: DataView | null = null;
  private readonly hosts = new KeyHosts();

  /** Hosts interned so far. */
  get hostCount(): number {
    return this.hosts.names.length - 1;
  }

  /** Bytes of pages allocated. */
  get capacityBytes(): number {
    return this.pages.length * PAGE_BYTES;
  }

  /**
   * The UTF-8 length of `key`. Keys are expected well formed (a lone surrogate is stored as U+FFFD, and
   * then reads back changed; KeeperCore refuses such keys before they get here).
   */
  static byteLength(key: string): number {
    return Buffer.byteLength(key, 'utf8');
  }

  /** The host `store` shares `key`'s scheme+host under (interned on first sight), or NO_HOST. */
  hostOf(key: string): number {
    return this.hosts.of(key);
  }

  /** Stores `key` (`length` = its byteLength, `host` = hostOf(key)) and returns its position. */
  store(key: string, length: number, host: number): number {
    if (length > MAX_KEY_BYTES)
      throw new RangeError(`keeper: a key of ${length} bytes is over ${MAX_KEY_BYTES}`);
    const skip = this.hosts.names[host]!.length;
    const rest = length - skip;
    const at = this.allocate(granulesOf(rest));
    const page = this.pages[at >>> PAGE_GRANULES_SHIFT]!;
    const o = (at & PAGE_GRANULES_MASK) << GRANULE_SHIFT;
    // As many bytes as units means ASCII, which latin1 copies without UTF-8 encoding (and reads back
    // the same as UTF-8). Native writes: a JS loop over the units takes ~4× as long at URL lengths.
    const tail = skip === 0 ? key : key.slice(skip);
    page.write(tail, o, rest, length === key.length ? 'latin1' : 'utf8');
    return at;
  }

  /** Gives the space of the key at `at` (`length` bytes, `host`) back for reuse. */
  release(at: number, length: number, host: number): void {
    this.releaseGranules(at, granulesOf(length - this.hosts.names[host]!.length));
  }

  private releaseGranules(at: number, size: number): void {
    this.links[at >>> PAGE_GRANULES_SHIFT]![at & PAGE_GRANULES_MASK] = this.free[size]!;
    this.free[size] = at;
    this.freeBytes += size << GRANULE_SHIFT;
  }

  /** Whether the key at `at` (`length` bytes, `host`) is `key`, compared without building a string. */
  equals(at: number, length: number, host: number, key: string): boolean {
    const n = key.length;
    if (n > length) return false; // a string's UTF-8 is never shorter than its UTF-16 units
    let skip = 0;
    if (host !== NO_HOST) {
      const name = this.hosts.names[host]!;
      if (!key.startsWith(name)) return false;
      skip = name.length;
    }
    const page = this.pages[at >>> PAGE_GRANULES_SHIFT]!;
    const o = ((at & PAGE_GRANULES_MASK) << GRANULE_SHIFT) - skip; // key unit i is at page[o + i]
    if (n === length) {
      // Equal lengths: only an ASCII key can match (any other character takes more bytes than units).
      for (let i = skip; i < n; i++) {
        const c = key.charCodeAt(i);
        if (c !== page[o + i] || c >= 0x80) return false;
      }
      return true;
    }
    return equalsUtf8(page, o + skip, length - skip, key, skip);
  }

  /** The key at `at` (`length` bytes, `host`) as a string: built anew on each call. */
  read(at: number, length: number, host: number): string {
    const name = this.hosts.names[host]!;
    const o = (at & PAGE_GRANULES_MASK) << GRANULE_SHIFT;
    return name + this.pages[at >>> PAGE_GRANULES_SHIFT]!.toString('utf8', o, o + length - name.length);
  }

  /**
   * Copies the key at `at` (`length` bytes) into `into` from index `to`, four bytes a step (keys start on
   * a 4-byte boundary; `to` need not). Allocates nothing per key, unlike Buffer.copy or set(subarray()),
   * which make a view each call; a DataView is made once per target.
   */
  copy(at: number, length: number, host: number, into: Uint8Array, to: number): void {
    if (into !== this.target) {
      this.target = into;
      this.targetView = new DataView(into.buffer, into.byteOffset, into.byteLength);
    }
    let skip = 0;
    if (host !== NO_HOST) {
      const hosts = this.hosts;
      skip = hosts.names[host]!.length;
      copyWords(hosts.bytes, hosts.words, hosts.at[host]!, skip, this.targetView!, into, to);
    }
    const page = at >>> PAGE_GRANULES_SHIFT;
    const from = (at & PAGE_GRANULES_MASK) << GRANULE_SHIFT;
    copyWords(this.pages[page]!, this.links[page]!, from, length - skip, this.targetView!, into, to + skip);
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
      if (room > 0) this.releaseGranules(at, room);
      at = this.pages.length << PAGE_GRANULES_SHIFT;
      const page = Buffer.alloc(PAGE_BYTES);
      this.pages.push(page);
      this.links.push(new Int32Array(page.buffer, page.byteOffset, PAGE_BYTES >>> GRANULE_SHIFT));
    }
    this.end = at + size;
    return at;
  }
}

/**
 * Copies `length` bytes of `bytes` from `from` (a 4-byte boundary; `words` is the same memory) into
 * `into` from `to` (any offset; `view` is `into`'s view), four bytes a step.
 */
function copyWords(
  bytes: Uint8Array,
  words: Int32Array,
  from: number,
  length: number,
  view: DataView,
  into: Uint8Array,
  to: number,
): void {
  let w = from >>> 2;
  const whole = length & ~3;
  let i = 0;
  for (; i < whole; i += 4) view.setInt32(to + i, words[w++]!, LITTLE_ENDIAN);
  for (; i < length; i++) into[to + i] = bytes[from + i]!;
}

/**
 * Whether `length` bytes of `page` from `o` are the UTF-8 of `key` from unit `start` on (a lone
 * surrogate matches nothing).
 */
function equalsUtf8(page: Uint8Array, o: number, length: number, key: string, start: number): boolean {
  let j = o;
  const end = o + length;
  const n = key.length;
  for (let i = start; i < n; i++) {
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
