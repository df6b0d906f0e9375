import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { type ChunkList, HeldRows } from '../../util/keeper/heldRows.js';
import { keyHash } from '../../util/keyHash.js';

/** A bucket as HeldRows sees one: a row count and its head chunk. */
const bucket = (): ChunkList => ({ count: 0, head: -1 });

/** The slot of every held key, read through the table as the core reads it. */
function slotOf(rows: HeldRows<ChunkList>, key: string): number {
  const index = rows.locate(key, rows.hash(key));
  assert.ok(index >= 0, `${key} is held`);
  return rows.slotAt(index);
}

describe('HeldRows', () => {
  it("answers each row's keyHash, read first before or after the row moved, was swapped by a delete or took a reused slot", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            op: fc.constantFrom('put', 'put', 'move', 'delete', 'read'),
            n: fc.integer({ min: 0, max: 80 }),
            to: fc.integer({ min: 0, max: 2 }),
          }),
          { minLength: 1, maxLength: 400, size: 'max' },
        ),
        (ops) => {
          const rows = new HeldRows<ChunkList>(7);
          const buckets = [bucket(), bucket(), bucket()];
          const held = new Set<string>();
          for (const { op, n, to } of ops) {
            // Non-ASCII and astral keys: the lease hash is over UTF-8, the table's hash over UTF-16.
            const key = `https://x.example/${n % 4 === 0 ? 'é' : n % 4 === 1 ? '😀' : 'p'}/${n}`;
            const index = rows.locate(key, rows.hash(key));
            if (op === 'put' && index < 0) {
              rows.insert(index, buckets[to]!, key, rows.hash(key));
              held.add(key);
            } else if (op === 'move' && index >= 0) {
              rows.move(index, buckets[to]!);
            } else if (op === 'delete' && index >= 0) {
              rows.delete(index);
              held.delete(key);
            } else if (op === 'read' && index >= 0) {
              // The first read computes the hash; later moves and swaps must carry it along intact.
              const want = keyHash(key);
              const slot = rows.slotAt(index);
              assert.deepEqual([rows.leaseLo(slot), rows.leaseHi(slot)], [want.lo, want.hi], key);
            }
          }
          for (const key of held) {
            const slot = slotOf(rows, key);
            const want = keyHash(key);
            assert.deepEqual([rows.leaseHi(slot), rows.leaseLo(slot)], [want.hi, want.lo], key);
          }
          assert.equal(rows.size, held.size);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("gives a key that takes a freed slot its own hash, not the hash read for the slot's previous key", () => {
    const rows = new HeldRows<ChunkList>(3);
    const b = bucket();
    const put = (key: string) => rows.insert(rows.locate(key, rows.hash(key)), b, key, rows.hash(key));
    put('https://x.example/old');
    const slot = slotOf(rows, 'https://x.example/old');
    assert.equal(rows.leaseHi(slot), keyHash('https://x.example/old').hi);
    rows.delete(rows.locate('https://x.example/old', rows.hash('https://x.example/old')));
    put('https://x.example/new');
    assert.equal(slotOf(rows, 'https://x.example/new'), slot, 'the freed slot is reused');
    const want = keyHash('https://x.example/new');
    assert.deepEqual([rows.leaseHi(slot), rows.leaseLo(slot)], [want.hi, want.lo]);
  });

  it('finds every row after reserve sized its table, grows past the reservation, and never drops rows on a smaller one', () => {
    const rows = new HeldRows<ChunkList>(11);
    const b = bucket();
    const key = (i: number) => `https://x.example/r/${i}`;
    const put = (k: string) => rows.insert(rows.locate(k, rows.hash(k)), b, k, rows.hash(k));
    for (let i = 0; i < 100; i++) put(key(i));
    rows.reserve(5_000);
    for (let i = 100; i < 5_000; i++) put(key(i));
    rows.reserve(10); // smaller than what is held: nothing moves out
    for (let i = 5_000; i < 12_000; i++) put(key(i)); // past the reservation: the table grows as usual
    assert.equal(rows.size, 12_000);
    for (let i = 0; i < 12_000; i++) {
      const slot = slotOf(rows, key(i));
      assert.equal(rows.keyAt(slot), key(i));
    }
    assert.ok(rows.locate(key(12_000), rows.hash(key(12_000))) < 0);
  });

  it('reserves room for 20M rows at once: a load that size never re-files the table in one go', () => {
    // Growing at 12.6M rows re-filed every entry in one slice, a 2 s hold of worker 0 (bench/held-growth.ts).
    const rows = new HeldRows<ChunkList>(11);
    rows.reserve(22_000_000); // 20M rows and the load's slack
    assert.ok(rows.roomRows >= 22_000_000, `room for ${rows.roomRows} rows`);
  });

  it('hands a sliced key walk every key held from its first slice to its last, while rows are put, moved and deleted between slices and the table grows', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 500, max: 760 }),
        fc.array(
          fc.record({
            op: fc.constantFrom('put', 'put', 'move', 'delete', 'delete', 'slice'),
            n: fc.integer({ min: 0, max: 1_000 }),
            to: fc.integer({ min: 0, max: 2 }),
            max: fc.integer({ min: 1, max: 6 }),
          }),
          { minLength: 600, maxLength: 1_200 },
        ),
        (start, ops) => {
          // 500–760 rows in a 1,024-entry table (it grows at 768): long probe runs, so deletions shift
          // entries across the walk, and puts may grow the table under it.
          const rows = new HeldRows<ChunkList>(5);
          const buckets = [bucket(), bucket(), bucket()];
          const key = (n: number) => `https://x.example/k/${n}`;
          const put = (k: string, to: number) => {
            const index = rows.locate(k, rows.hash(k));
            if (index < 0) rows.insert(index, buckets[to]!, k, rows.hash(k));
          };
          for (let n = 0; n < start; n++) put(key(n), n % 3);
          const throughout = new Set<string>();
          for (let n = 0; n < start; n++) throughout.add(key(n));
          const ever = new Set(throughout);
          const seen = new Set<string>();
          const walk = rows.keyWalk();
          const take = (max: number) => {
            const keys = walk.next(max);
            if (keys === null) return false;
            assert.ok(keys.length > 0 && keys.length <= max);
            for (const k of keys) {
              assert.ok(ever.has(k), `${k} was held at some point`);
              seen.add(k);
            }
            return true;
          };
          for (const { op, n, to, max } of ops) {
            const k = key(n);
            const index = rows.locate(k, rows.hash(k));
            if (op === 'put' && index < 0) {
              put(k, to);
              ever.add(k);
            } else if (op === 'move' && index >= 0) rows.move(index, buckets[to]!);
            else if (op === 'delete' && index >= 0) {
              rows.delete(index);
              throughout.delete(k);
            } else if (op === 'slice') take(max);
          }
          while (take(17));
          for (const k of throughout) assert.ok(seen.has(k), `${k} was held throughout and handed out`);
          assert.equal(walk.next(5), null, 'a finished walk stays finished');
        },
      ),
      { numRuns: 400 },
    );
  });

  it('starts a sliced key walk over when the table grows under it, so no key held throughout is missed', () => {
    const rows = new HeldRows<ChunkList>(9);
    const b = bucket();
    const key = (i: number) => `https://x.example/g/${i}`;
    const put = (k: string) => rows.insert(rows.locate(k, rows.hash(k)), b, k, rows.hash(k));
    for (let i = 0; i < 700; i++) put(key(i));
    const seen = new Set<string>();
    const walk = rows.keyWalk();
    for (let i = 0; i < 20; i++) for (const k of walk.next(20) ?? []) seen.add(k);
    for (let i = 700; i < 5_000; i++) put(key(i)); // the 1,024-entry table grows twice, every entry moves
    for (let keys = walk.next(50); keys !== null; keys = walk.next(50)) for (const k of keys) seen.add(k);
    for (let i = 0; i < 700; i++) assert.ok(seen.has(key(i)), `${key(i)} handed out`);
  });
  // Guard: the sightings copied in `move` and `detach`. Without either, a row that moved or was swapped
  // into a deleted row's slot reads as not seen (or takes another row's mark) (checked).
  it("keeps each row's sighting through moves, swaps, reused slots and the wrap of the walk number", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            op: fc.constantFrom('put', 'put', 'move', 'delete', 'sight', 'sight', 'walk'),
            n: fc.integer({ min: 0, max: 60 }),
            to: fc.integer({ min: 0, max: 2 }),
            walks: fc.constantFrom(1, 1, 1, 254, 255, 256),
          }),
          { minLength: 100, maxLength: 500, size: 'max' },
        ),
        (ops) => {
          const rows = new HeldRows<ChunkList>(3);
          rows.startSighting(); // as the verification walk does before it sights any row
          const buckets = [bucket(), bucket(), bucket()];
          const key = (n: number) => `https://x.example/s/${n}`;
          // The keys the current walk has seen: the model the stored sightings must match.
          const seen = new Set<string>();
          const held = new Set<string>();
          for (const { op, n, to, walks } of ops) {
            const k = key(n);
            const index = rows.locate(k, rows.hash(k));
            if (op === 'put' && index < 0) {
              rows.insert(index, buckets[to]!, k, rows.hash(k));
              held.add(k);
            } else if (op === 'move' && index >= 0) rows.move(index, buckets[to]!);
            else if (op === 'delete' && index >= 0) {
              rows.delete(index);
              held.delete(k);
              seen.delete(k);
            } else if (op === 'sight' && index >= 0) {
              rows.sight(index);
              seen.add(k);
            } else if (op === 'walk') {
              for (let i = 0; i < walks; i++) rows.startSighting();
              seen.clear();
            }
          }
          for (const k of held) {
            const index = rows.locate(k, rows.hash(k));
            assert.equal(rows.sighted(index), seen.has(k), k);
          }
        },
      ),
      { numRuns: 400 },
    );
  });
  it('gives back every key as it was stored, non-ASCII included, by string and by bytes, through moves, swaps and deletes', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            op: fc.constantFrom('put', 'put', 'move', 'delete'),
            n: fc.integer({ min: 0, max: 50 }),
            to: fc.integer({ min: 0, max: 2 }),
          }),
          { minLength: 1, maxLength: 300, size: 'max' },
        ),
        (ops) => {
          const rows = new HeldRows<ChunkList>(13);
          const buckets = [bucket(), bucket(), bucket()];
          // Keys of 1- to 4-byte characters, and ASCII keys whose length equals another's UTF-8 length.
          const scripts = ['p', 'é', 'ü€', '😀', 'Ã©'];
          const key = (n: number) => `https://x.example/${scripts[n % scripts.length]}/${n}|desktop`;
          const held = new Set<string>();
          for (const { op, n, to } of ops) {
            const k = key(n);
            const index = rows.locate(k, rows.hash(k));
            if (op === 'put' && index < 0) {
              rows.insert(index, buckets[to]!, k, rows.hash(k));
              held.add(k);
            } else if (op === 'move' && index >= 0) rows.move(index, buckets[to]!);
            else if (op === 'delete' && index >= 0) {
              rows.delete(index);
              held.delete(k);
            }
          }
          assert.equal(rows.size, held.size);
          for (let n = 0; n <= 50; n++) {
            const k = key(n);
            const index = rows.locate(k, rows.hash(k));
            assert.equal(index >= 0, held.has(k), k);
            if (index < 0) continue;
            const slot = rows.slotAt(index);
            assert.equal(rows.keyAt(slot), k);
            const utf8 = Buffer.from(k, 'utf8');
            assert.equal(rows.keyLength(slot), utf8.length);
            const into = new Uint8Array(utf8.length);
            rows.copyKey(slot, into, 0);
            assert.deepEqual(Buffer.from(into), utf8);
          }
          const walked = new Set<string>();
          const walk = rows.keyWalk();
          for (let keys = walk.next(7); keys !== null; keys = walk.next(7))
            for (const k of keys) walked.add(k);
          assert.deepEqual([...walked].sort(), [...held].sort());
        },
      ),
      { numRuns: 300 },
    );
  });

  // Guard: the release in `delete`. Without it every refiled key takes new space (checked).
  it("reuses a deleted row's key space for the next key of its length: deleting and refiling grows no key page", () => {
    const rows = new HeldRows<ChunkList>(17);
    const b = bucket();
    const key = (i: number, gen: number) => `https://x.example/${gen}/${'k'.repeat(i % 150)}/${i}`;
    const put = (k: string) => rows.insert(rows.locate(k, rows.hash(k)), b, k, rows.hash(k));
    const remove = (k: string) => rows.delete(rows.locate(k, rows.hash(k)));
    for (let i = 0; i < 20_000; i++) put(key(i, 1));
    const filled = rows.keySpace();
    assert.ok(filled.capacityBytes >= 2 * (1 << 20), 'the keys fill more than one page');
    for (let round = 2; round < 6; round++) {
      for (let i = 0; i < 20_000; i++) remove(key(i, round - 1));
      assert.ok(rows.keySpace().freeBytes > filled.capacityBytes / 2, 'the deleted keys are free space');
      // The same lengths under new names: each takes a freed block.
      for (let i = 0; i < 20_000; i++) put(key(i, round));
      assert.deepEqual(rows.keySpace(), filled, `round ${round}`);
    }
    for (let i = 0; i < 20_000; i++) assert.equal(rows.keyAt(slotOf(rows, key(i, 5))), key(i, 5));
  });
});
