// Raw reads of RenderSchedule: the claim's point read and the keeper's walk
// take the stored bytes from the primary store (lmdb-js) and decode only the fields they use
// (util/schedule/rawRecord.ts), instead of Harper building the whole record. Whatever the raw reader
// cannot read for certain is read through store.ts's full path, so both answer exactly what readRow and
// walkSchedule answer. The table itself is reached only through store.ts (its owner).
import type { ScheduleRow } from '../../util/schedule/rules.js';
import { HELD_FIELDS, HeldFieldsSink } from '../../util/keeper/heldFields.js';
import { printableKey } from '../../util/schedule/rawKey.js';
import type { HeldFields } from '../../util/keeper/types.js';
import {
  CLAIM_FIELDS,
  claimRowOf,
  NOT_DECODED,
  RawRecordReader,
  ROW_FIELDS,
  scheduleRowOf,
  type ClaimRow,
  type Decoded,
  storedIsDeletion,
  type TypedStruct,
} from '../../util/schedule/rawRecord.js';
import type { RawStore } from '../runtime/harper.js';
import { readRow, schedulePrimaryStore, type WalkOptions } from './store.js';

/** What lmdb-js and Harper's RecordEncoder give beyond RawStore (lmdb-js 3.5, harperdb 4.7.29). */
interface BinaryStore extends RawStore {
  /** Decodes a key from lmdb-js's key buffer (ordered-binary's readKey for this store). */
  readKey(bytes: Uint8Array, start: number, end: number): unknown;
  /** The stored bytes in lmdb-js's reused buffer (valid until the next read), or undefined. */
  getBinaryFast(key: string): Uint8Array | undefined;
  /** lmdb-js's mdb_stat of the store (entryCount: its records, deleted-row markers included). */
  getStats?(): { entryCount?: number };
  /** The record decoder; its typedStructs are the shared structures records refer to. */
  decoder?: { typedStructs?: readonly TypedStruct[] };
}

const binaryStore = () => schedulePrimaryStore() as BinaryStore;

// Process-wide: one reader per field set on this thread. Each caches only a decode plan per shared
// struct (the store's structures, themselves process-wide); it holds no rows and no request's state.
const processWideClaimReader = new RawRecordReader(CLAIM_FIELDS, claimRowOf);
const processWideRowReader = new RawRecordReader(ROW_FIELDS, scheduleRowOf);

/**
 * A walk's stand-in decoder: it only notes where lmdb-js put a value's bytes (its reused buffer, as the
 * decoder says it copies) so the walk decodes the fields it wants itself. `take` hands them over once.
 */
class ByteNote {
  private bytes: Uint8Array | null = null;
  size = 0;

  decode(b: Uint8Array, n: number): boolean {
    this.bytes = b;
    this.size = n;
    return true;
  }

  take(): Uint8Array | null {
    const b = this.bytes;
    this.bytes = null;
    return b;
  }
}

/**
 * A range over the store whose values are only noted, not decoded: Harper's getRange (an own property of
 * the store) calls lmdb-js's with this view as `this`, so lmdb-js hands each value's bytes to `noteBytes`
 * (its reused buffer, as the decoder says it copies) and, when given, decodes keys with `readKey`.
 */
function notedRange(
  store: BinaryStore,
  noteBytes: ByteNote,
  opts: WalkOptions & { versions?: boolean },
  readKey?: BinaryStore['readKey'],
): Iterable<{ key: unknown; version?: unknown }> {
  const view = Object.create(store, {
    decoder: { value: noteBytes },
    decoderCopies: { value: true },
    ...(readKey ? { readKey: { value: readKey } } : {}),
  }) as BinaryStore;
  return view.getRange({
    start: opts.start,
    end: opts.end,
    reverse: opts.reverse ?? false,
    limit: opts.limit,
    exclusiveStart: opts.exclusiveStart,
    ...(opts.versions ? { versions: true } : {}),
  });
}

/** One key's stored bytes through `reader`; what it cannot read for certain goes through readRow. */
function pointRead<T>(reader: RawRecordReader<T>, key: string): T | ScheduleRow | undefined {
  const store = binaryStore();
  const bytes = store.getBinaryFast(key);
  if (bytes === undefined) return undefined;
  const row = reader.row(key, bytes, bytes.length, store.decoder?.typedStructs);
  return row === NOT_DECODED ? readRow(key) : row;
}

/**
 * Whether the store holds a live value under `key`: bytes that are no deletion's marker, decodable or not
 * (a layout not known here answers false). The keeper asks it when a read found no row.
 */
export function scheduleValueStored(key: string): boolean {
  const bytes = binaryStore().getBinaryFast(key);
  return bytes !== undefined && storedIsDeletion(bytes, bytes.length) === false;
}

/**
 * The claim's point read: due time, cadence and sitemap flag of the row as stored now, or undefined
 * when there is no row. Same snapshot and same answer as readRow (a row rescheduled or deleted after
 * the keeper published reads as such), for ~1 field decode instead of a whole record.
 */
export function readClaimRow(key: string): ClaimRow | undefined {
  return pointRead(processWideClaimReader, key);
}

/**
 * readRow over the raw value: the whole row as stored now (same snapshot, same answer), decoded from the
 * stored bytes instead of through Harper's record build. The schedule writes read every key twice under
 * its lock — before deciding, and back after the commit — so this is two of a result's three reads.
 */
export function readScheduleRow(key: string): ScheduleRow | undefined {
  return pointRead(processWideRowReader, key);
}

/** How many records the schedule's store holds (lmdb's own count, O(1)); 0 where it cannot tell. */
export function scheduleRowEstimate(): number {
  const n = binaryStore().getStats?.().entryCount;
  return typeof n === 'number' && Number.isFinite(n) && n > 0 ? n : 0;
}

/**
 * The keeper's load walk: walkSchedule's keys in its order, each handed to `visit` with the fields the
 * keeper holds (HeldFields, equal to those of the row walkSchedule yields, or undefined where it
 * yields none). No row object is built: the fields come in one object reused for every key, valid only
 * during that visit. A visit that throws ends the walk, as does an unreadable key. Returns the keys visited.
 */
export function walkScheduleHeld(
  opts: WalkOptions,
  visit: (key: string, fields: HeldFields | undefined) => void,
): number {
  const store = binaryStore();
  // One reader per walk (a chunk of the load): its plan per struct is made on the first row.
  const sink = new HeldFieldsSink();
  const reader = new RawRecordReader(HELD_FIELDS, (_key, v) => sink.fill(v));
  const noteBytes = new ByteNote();
  // Printable-ASCII keys are copied flat (printableKey); the first one is also decoded the store's own
  // way, and if the two ever differ (another key encoding) the walk decodes every key the store's way.
  let keyCheck: 'unchecked' | 'same' | 'differs' = 'unchecked';
  const readKey = (b: Uint8Array, start: number, end: number): unknown => {
    const flat = keyCheck === 'differs' ? undefined : printableKey(b, start, end);
    if (flat === undefined) return store.readKey(b, start, end);
    if (keyCheck === 'unchecked') {
      const own = store.readKey(b, start, end);
      keyCheck = own === flat ? 'same' : 'differs';
      return own;
    }
    return flat;
  };
  let visited = 0;
  for (const { key } of notedRange(store, noteBytes, opts, readKey)) {
    if (typeof key !== 'string') continue;
    const raw = noteBytes.take();
    const fields =
      raw === null ? NOT_DECODED : reader.row(key, raw, noteBytes.size, store.decoder?.typedStructs);
    visit(key, fields === NOT_DECODED ? readRow(key) : fields);
    visited++;
  }
  return visited;
}

/**
 * walkSchedule (store.ts) over the raw values: the same keys in the same order, each row equal to what
 * walkSchedule yields. The store's getRange runs on a view whose decoder only notes where the value's
 * bytes are (lmdb-js passes its reused buffer when the decoder copies), and the row is decoded here.
 */
export function* walkScheduleRaw(
  opts: WalkOptions,
): Generator<{ key: string; row: ScheduleRow | undefined }> {
  const store = binaryStore();
  const noteBytes = new ByteNote();
  const range = notedRange(store, noteBytes, opts);
  for (const { key } of range) {
    if (typeof key !== 'string') continue;
    const raw = noteBytes.take();
    let row: Decoded<ScheduleRow> = NOT_DECODED;
    if (raw !== null) row = processWideRowReader.row(key, raw, noteBytes.size, store.decoder?.typedStructs);
    yield { key, row: row === NOT_DECODED ? readRow(key) : row };
  }
}

/**
 * Replica repair's walk (services/cluster/repair.ts): every key in the range with the version of its
 * stored entry (the origin transaction's time) and whether that entry is a deletion's marker, without
 * decoding any row. Values stay on: lmdb-js reports stale versions for a walk without values. A value
 * whose layout is not known is read through readRow (absent = a deletion). Returns the keys visited.
 */
export function walkScheduleVersions(
  opts: WalkOptions,
  visit: (key: string, version: number, deleted: boolean) => void,
): number {
  const store = binaryStore();
  const noteBytes = new ByteNote();
  const range = notedRange(store, noteBytes, { ...opts, versions: true });
  let visited = 0;
  for (const { key, version } of range) {
    if (typeof key !== 'string') continue;
    const raw = noteBytes.take();
    if (typeof version !== 'number') continue;
    let deleted = raw === null ? undefined : storedIsDeletion(raw, noteBytes.size);
    if (deleted === undefined) deleted = readRow(key) === undefined;
    visit(key, version, deleted);
    visited++;
  }
  return visited;
}
