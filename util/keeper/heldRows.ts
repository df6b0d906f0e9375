import { rowHash } from '../schedule/rowKey.js';
import { KeyArena } from './keyArena.js';
import { KeyWalks, type KeyWalk } from './keyWalks.js';
import { hashUrl } from './urlHash.js';

// Storage for the keeper's held rows: key → slot, and the rows themselves packed by bucket.
//
// Why not a Map<string, …> plus an array per bucket: on a 2-core box a V8 Map costs ~29 B per entry and
// ~1.6 µs per fresh insert at 1M entries, and per-bucket arrays cost ~200 B each with thousands of
// sparse minute buckets — together well over a budget of 170 B per held row. Here a row costs a
// 4-byte table entry (the table is kept 38–75% full, so 5–11 B), the key's UTF-8 bytes in the key arena
// (util/keeper/keyArena.ts: past its shared scheme+host, rounded up to 4, no JS string) with a 4-byte
// position, a 2-byte length and a 2-byte host, and a 4-byte stored hash (and per slot the lease table's
// 8-byte rowHash and a 4-byte park, both read by the publish's lease skip, and the verification walk's
// 1-byte sighting). Neither the table nor the slot pages shrink after mass deletions; freed chunks and
// freed key space are reused by later rows.
//
// Every row lives at a slot `g` inside a fixed-size chunk owned by one bucket, so `g` alone names both
// the row's bucket (through the chunk) and its place, and removal is an O(1) swap with the bucket's
// last row. Buckets read their rows chunk by chunk, contiguously, which keeps top-K cheap.

/** Rows per chunk: small enough that sparse minute buckets waste little, large enough to read in runs. */
export const CHUNK = 8;
const CHUNK_SHIFT = 3;
const PAGE = 4096; // key slots per page; pages avoid re-copying one giant array as the keeper grows
const PAGE_SHIFT = 12;
const PAGE_MASK = PAGE - 1;
// A table entry packs a 4-bit hash tag over `g + 1` (0 = empty). The tag spares most string compares
// on a probe; 27 bits of slot bound the keeper at ~134M rows.
const TAG_SHIFT = 27;
const SLOT_MASK = (1 << TAG_SHIFT) - 1;
const MAX_LOAD = 0.75;
// Parks are stored as seconds since 2023-11-14 (1.7e9 s after 1970): 31 bits last until 2091. A clock
// before that epoch (a test's) parks nothing: 0 means not parked.
const PARK_EPOCH_S = 1_700_000_000;
// reserve() sizes the table for at most this many rows (a 2^26-entry table, 256 MiB); beyond it grows.
// Growing re-files every entry in one go: about 2 s of worker 0 at 13M rows (bench/held-growth.ts), so a
// load that knows its rows reserves for all of them up to here.
const MAX_RESERVE = 1 << 25;

/** What HeldRows needs of a bucket: its row count and the chunk holding its newest rows. */
export interface ChunkList {
  count: number;
  /** The partly filled chunk (or -1 when empty); older chunks follow through `chunkNext`, all full. */
  head: number;
}

export class HeldRows<B extends ChunkList> {
  /** Seed of `hash`; random unless a test fixes it. */
  readonly seed: number;
  private table = new Int32Array(1024);
  private mask = 1023;
  private used = 0;
  private readonly arena = new KeyArena();
  /** Each row's key: its position in the arena, its length in bytes and its host (keyArena.ts). */
  private keyPosPages: Int32Array[] = [];
  private keyLenPages: Uint16Array[] = [];
  private keyHostPages: Uint16Array[] = [];
  private hashPages: Int32Array[] = [];
  /**
   * Each row's rowHash (hi, lo), as the lease table hashes it: the publish's lease skip reads it here.
   * Computed on the first read, not on insert (a load holds 1M rows, a publish reads a few thousand):
   * 0/0 is never a rowHash, so it stands for "not computed yet".
   */
  private leasePages: Int32Array[] = [];
  /**
   * Each row's park: the second (PARK_EPOCH_S-based) before which the publish knows the row is leased and
   * passes it without asking the lease table again; 0 = not parked. Any change to the row clears it.
   */
  private parkPages: Int32Array[] = [];
  /**
   * Each row's sighting: the number of the last verification walk that saw it in the table (0: none
   * since the row was added). The walk's point checks read only the rows it did not see.
   */
  private sightPages: Uint8Array[] = [];
  private sighting = 0;
  private chunkNext = new Int32Array(512);
  private chunkOwner: (B | null)[] = [];
  private chunks = 0;
  private freeChunk = -1;
  /** The open KeyWalks (a deletion or a regrowth that moves entries tells them). */
  private readonly walks = new KeyWalks({
    entries: () => this.table,
    keyOf: (entry) => this.keyAt((entry & SLOT_MASK) - 1),
  });

  constructor(seed = (Math.random() * 0x100000000) | 0) {
    this.seed = seed | 0;
  }

  /** Rows the table takes before it must grow (and re-file every entry in one go). */
  get roomRows(): number {
    return Math.floor(this.table.length * MAX_LOAD);
  }

  get size(): number {
    return this.used;
  }

  hash(key: string): number {
    return hashUrl(key, this.seed);
  }

  /** Table index of `key` (≥ 0), or the bitwise NOT of the empty index where it would go (< 0). */
  locate(key: string, hash: number): number {
    const tag = (hash >>> 28) & 0xf;
    const table = this.table;
    let i = hash & this.mask;
    for (;;) {
      const entry = table[i]!;
      if (entry === 0) return ~i;
      if (entry >>> TAG_SHIFT === tag && this.keyIs((entry & SLOT_MASK) - 1, key)) return i;
      i = (i + 1) & this.mask;
    }
  }

  /** Table index of the entry naming `slot` (held, its stored hash `hash`): found without a key compare. */
  private locateSlot(slot: number, hash: number): number {
    const named = slot + 1;
    const table = this.table;
    let i = hash & this.mask;
    while ((table[i]! & SLOT_MASK) !== named) i = (i + 1) & this.mask;
    return i;
  }

  private keyIs(slot: number, key: string): boolean {
    const page = slot >>> PAGE_SHIFT;
    const i = slot & PAGE_MASK;
    return this.arena.equals(
      this.keyPosPages[page]![i]!,
      this.keyLenPages[page]![i]!,
      this.keyHostPages[page]![i]!,
      key,
    );
  }

  /** The slot of the row at a found table index. */
  slotAt(index: number): number {
    return (this.table[index]! & SLOT_MASK) - 1;
  }

  /** The key of the row at `slot`, as a new string (the row holds bytes, not a string). */
  keyAt(slot: number): string {
    const page = slot >>> PAGE_SHIFT;
    const i = slot & PAGE_MASK;
    return this.arena.read(
      this.keyPosPages[page]![i]!,
      this.keyLenPages[page]![i]!,
      this.keyHostPages[page]![i]!,
    );
  }

  /** The UTF-8 length of the key of the row at `slot`. */
  keyLength(slot: number): number {
    return this.keyLenPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK]!;
  }

  /** Copies the UTF-8 key of the row at `slot` into `into` from index `at` (keyLength bytes). */
  copyKey(slot: number, into: Uint8Array, at: number): void {
    const page = slot >>> PAGE_SHIFT;
    const i = slot & PAGE_MASK;
    this.arena.copy(
      this.keyPosPages[page]![i]!,
      this.keyLenPages[page]![i]!,
      this.keyHostPages[page]![i]!,
      into,
      at,
    );
  }

  /** Bytes of key space freed by deletions and not yet reused, and bytes of key pages in all. */
  keySpace(): { freeBytes: number; capacityBytes: number; hosts: number } {
    return {
      freeBytes: this.arena.freeBytes,
      capacityBytes: this.arena.capacityBytes,
      hosts: this.arena.hostCount,
    };
  }

  hashAt(slot: number): number {
    return this.hashPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK]!;
  }

  /** The high half of the row's rowHash (computed and kept on the first read of either half). */
  leaseHi(slot: number): number {
    const page = this.leasePages[slot >>> PAGE_SHIFT]!;
    const at = (slot & PAGE_MASK) << 1;
    if (page[at] === 0 && page[at + 1] === 0) this.fillLease(slot, page, at);
    return page[at]!;
  }

  /** The low half of the row's rowHash (computed and kept on the first read of either half). */
  leaseLo(slot: number): number {
    const page = this.leasePages[slot >>> PAGE_SHIFT]!;
    const at = (slot & PAGE_MASK) << 1;
    if (page[at] === 0 && page[at + 1] === 0) this.fillLease(slot, page, at);
    return page[at + 1]!;
  }

  private fillLease(slot: number, page: Int32Array, at: number): void {
    const lease = rowHash(this.keyAt(slot));
    page[at] = lease.hi;
    page[at + 1] = lease.lo;
  }

  /** The stored lease halves as they are, 0/0 while not computed (moves copy them unchanged). */
  private storedLeaseHi(slot: number): number {
    return this.leasePages[slot >>> PAGE_SHIFT]![(slot & PAGE_MASK) << 1]!;
  }

  private storedLeaseLo(slot: number): number {
    return this.leasePages[slot >>> PAGE_SHIFT]![((slot & PAGE_MASK) << 1) | 1]!;
  }

  /** Whether the row at `slot` is parked as leased at `now` (see `park`). */
  parkedAt(slot: number, now: number): boolean {
    const until = Math.abs(this.parkPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK]!);
    return until !== 0 && until > Math.floor(now / 1000) - PARK_EPOCH_S;
  }

  /**
   * When the block the row at `slot` is parked on ends (ms, a whole second): 0 when it is not parked, or
   * when its park only runs out before the block does (`park` with `blockEnds` false).
   */
  parkedBlockEnd(slot: number): number {
    const until = this.parkPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK]!;
    return until <= 0 ? 0 : (until + PARK_EPOCH_S) * 1000;
  }

  /**
   * Parks the row at `slot` until `until` (ms, rounded down to the second): the lease table said it is
   * leased until then. A cache of the lease table's answer, so a publish over many leased rows does not
   * probe the table for each of them every time; cleared by any change to the row (insert, move, `touch`).
   * `blockEnds` says whether the block ends at `until` (false: the park is shorter than the block, and
   * runs out only to ask the table again); it is kept as the stored value's sign.
   */
  park(slot: number, until: number, blockEnds = true): void {
    const seconds = Math.max(0, Math.floor(until / 1000) - PARK_EPOCH_S);
    this.parkPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = blockEnds ? seconds : -seconds;
  }

  /** Clears the park of the row at a found table index: its stored row changed. */
  touch(index: number): void {
    const slot = this.slotAt(index);
    this.parkPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = 0;
  }

  /** A new verification walk: the rows it sees from now on carry its number (see `sight`). */
  startSighting(): void {
    if (this.sighting === 255) {
      for (const page of this.sightPages) page.fill(0);
      this.sighting = 0;
    }
    this.sighting++;
  }

  /** Marks the row at a found table index as seen in the table by the current walk. */
  sight(index: number): void {
    const slot = this.slotAt(index);
    this.sightPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = this.sighting;
  }

  /** Whether the current walk saw the row at a found table index (never before the first walk). */
  sighted(index: number): boolean {
    const slot = this.slotAt(index);
    return this.sighting !== 0 && this.sightPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] === this.sighting;
  }

  private setLease(slot: number, hi: number, lo: number): void {
    const page = this.leasePages[slot >>> PAGE_SHIFT]!;
    const at = (slot & PAGE_MASK) << 1;
    page[at] = hi;
    page[at + 1] = lo;
  }

  bucketOf(slot: number): B {
    return this.chunkOwner[slot >>> CHUNK_SHIFT]!;
  }

  nextChunk(chunk: number): number {
    return this.chunkNext[chunk]!;
  }

  /** Calls `visit` with each key of `bucket`, newest chunk first, until it returns false. */
  eachKey(bucket: B, visit: (key: string) => boolean): void {
    for (let chunk = bucket.head, fill = HeldRows.headFill(bucket); chunk !== -1; fill = CHUNK) {
      for (let i = 0; i < fill; i++) if (!visit(this.keyAt(chunk * CHUNK + i))) return;
      chunk = this.nextChunk(chunk);
    }
  }

  /** Rows in a bucket's head chunk (the others are full). */
  static headFill(bucket: ChunkList): number {
    return ((bucket.count - 1) & (CHUNK - 1)) + 1;
  }

  /**
   * Sizes the table for `rows` rows in all (capped), so a load that knows roughly how many rows come
   * grows it once instead of doubling it ~10 times on the way to 1M rows. Never shrinks it.
   */
  reserve(rows: number): void {
    const want = Math.min(Math.max(0, Math.floor(rows)), MAX_RESERVE);
    let size = this.table.length;
    while (want > size * MAX_LOAD) size *= 2;
    if (size > this.table.length) this.rehash(size);
  }

  /** Adds a new row to `bucket`; `index` is what `locate` just returned for it (negative). */
  insert(index: number, bucket: B, key: string, hash: number): void {
    let at = ~index;
    if (this.used + 1 > this.table.length * MAX_LOAD) {
      this.rehash(this.table.length * 2);
      at = ~this.locate(key, hash); // growing moved every index
    }
    const length = KeyArena.byteLength(key);
    const host = this.arena.hostOf(key);
    const pos = this.arena.store(key, length, host);
    this.table[at] = this.entry(hash, this.append(bucket, pos, length, host, hash, 0, 0, 0));
    this.used++;
  }

  /** Moves the row at a found table index to `bucket`; its key bytes stay where they are. */
  move(index: number, bucket: B): void {
    const slot = this.slotAt(index);
    const page = slot >>> PAGE_SHIFT;
    const i = slot & PAGE_MASK;
    const pos = this.keyPosPages[page]![i]!;
    const length = this.keyLenPages[page]![i]!;
    const host = this.keyHostPages[page]![i]!;
    const hash = this.hashPages[page]![i]!;
    const hi = this.storedLeaseHi(slot);
    const lo = this.storedLeaseLo(slot);
    const seen = this.sightPages[page]![i]!;
    this.detach(slot);
    this.table[index] = this.entry(hash, this.append(bucket, pos, length, host, hash, hi, lo, seen));
  }

  /** Moves the row stored at `slot` to `bucket` (for walks that hold slots, not table indexes). */
  moveSlot(slot: number, bucket: B): void {
    this.move(this.locateSlot(slot, this.hashAt(slot)), bucket);
  }

  /** The slot of a bucket's newest row; the bucket must hold rows. */
  static lastSlot(bucket: ChunkList): number {
    return (bucket.head << CHUNK_SHIFT) | ((bucket.count - 1) & (CHUNK - 1));
  }

  /** Deletes the row at a found table index. */
  delete(index: number): void {
    const slot = this.slotAt(index);
    this.arena.release(
      this.keyPosPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK]!,
      this.keyLenPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK]!,
      this.keyHostPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK]!,
    );
    this.detach(slot);
    this.used--;
    // Backward-shift deletion: later entries of the probe run move up, so lookups never need tombstones.
    const table = this.table;
    const mask = this.mask;
    let hole = index;
    let j = index;
    table[hole] = 0;
    for (;;) {
      j = (j + 1) & mask;
      const entry = table[j]!;
      if (entry === 0) return;
      const home = this.hashAt((entry & SLOT_MASK) - 1) & mask;
      // The entry may fill the hole unless its home lies cyclically in (hole, j].
      const stays = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (!stays) {
        table[hole] = entry;
        table[j] = 0;
        if (this.walks.open) this.walks.shifted(hole, j, entry);
        hole = j;
      }
    }
  }

  /** Every held key in slices of the table (keyWalks.ts); no copy of the whole key set is ever made. */
  keyWalk(): KeyWalk {
    return this.walks.start();
  }

  private entry(hash: number, slot: number): number {
    return (((hash >>> 28) & 0xf) << TAG_SHIFT) | (slot + 1);
  }

  private append(
    bucket: B,
    pos: number,
    length: number,
    host: number,
    hash: number,
    leaseHi: number,
    leaseLo: number,
    seen: number,
  ): number {
    const fill = bucket.count & (CHUNK - 1);
    if (fill === 0) {
      const chunk = this.newChunk(bucket);
      this.chunkNext[chunk] = bucket.head;
      bucket.head = chunk;
    }
    const slot = (bucket.head << CHUNK_SHIFT) | fill;
    this.keyPosPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = pos;
    this.keyLenPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = length;
    this.keyHostPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = host;
    this.hashPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = hash;
    this.setLease(slot, leaseHi, leaseLo);
    this.parkPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = 0;
    this.sightPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = seen;
    bucket.count++;
    return slot;
  }

  /** Takes a row out of its bucket by moving the bucket's last row into its place. */
  private detach(slot: number): void {
    const bucket = this.bucketOf(slot);
    const last = HeldRows.lastSlot(bucket);
    if (last !== slot) {
      const movedHash = this.hashAt(last);
      const movedIndex = this.locateSlot(last, movedHash);
      this.keyPosPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] =
        this.keyPosPages[last >>> PAGE_SHIFT]![last & PAGE_MASK]!;
      this.keyLenPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] =
        this.keyLenPages[last >>> PAGE_SHIFT]![last & PAGE_MASK]!;
      this.keyHostPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] =
        this.keyHostPages[last >>> PAGE_SHIFT]![last & PAGE_MASK]!;
      this.hashPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] = movedHash;
      this.setLease(slot, this.storedLeaseHi(last), this.storedLeaseLo(last));
      this.parkPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] =
        this.parkPages[last >>> PAGE_SHIFT]![last & PAGE_MASK]!;
      this.sightPages[slot >>> PAGE_SHIFT]![slot & PAGE_MASK] =
        this.sightPages[last >>> PAGE_SHIFT]![last & PAGE_MASK]!;
      this.table[movedIndex] = this.entry(movedHash, slot);
    }
    bucket.count--;
    if ((bucket.count & (CHUNK - 1)) === 0) {
      const chunk = bucket.head;
      bucket.head = this.chunkNext[chunk]!;
      this.chunkNext[chunk] = this.freeChunk;
      this.chunkOwner[chunk] = null;
      this.freeChunk = chunk;
    }
  }

  private newChunk(owner: B): number {
    let chunk = this.freeChunk;
    if (chunk >= 0) {
      this.freeChunk = this.chunkNext[chunk]!;
    } else {
      chunk = this.chunks++;
      if (chunk << CHUNK_SHIFT > SLOT_MASK - CHUNK) throw new RangeError('keeper: too many held rows');
      if ((chunk << CHUNK_SHIFT) % PAGE === 0) {
        this.keyPosPages.push(new Int32Array(PAGE));
        this.keyLenPages.push(new Uint16Array(PAGE));
        this.keyHostPages.push(new Uint16Array(PAGE));
        this.hashPages.push(new Int32Array(PAGE));
        this.leasePages.push(new Int32Array(2 * PAGE));
        this.parkPages.push(new Int32Array(PAGE));
        this.sightPages.push(new Uint8Array(PAGE));
      }
      if (chunk >= this.chunkNext.length) {
        const grown = new Int32Array(this.chunkNext.length * 2);
        grown.set(this.chunkNext);
        this.chunkNext = grown;
      }
    }
    this.chunkOwner[chunk] = owner;
    return chunk;
  }

  private rehash(size: number): void {
    this.walks.restart();
    const old = this.table;
    this.table = new Int32Array(size);
    this.mask = size - 1;
    for (const entry of old) {
      if (entry === 0) continue;
      let i = this.hashAt((entry & SLOT_MASK) - 1) & this.mask;
      while (this.table[i] !== 0) i = (i + 1) & this.mask;
      this.table[i] = entry;
    }
  }
}
