// Reads chosen fields of a RenderSchedule record straight from the bytes Harper 4.7.29 stores, without
// building the record. The layout (read in node_modules/harperdb's bundle, RecordEncoder, and in
// msgpackr 1.11.8's struct.js; bench/README.md "Raw record reads"):
//   [8-byte local timestamp, first byte 0x02] [metadata: 0x0e + 3 bytes, or 2 bytes] [+8 expiry] [+4 residency]
//   then msgpackr with randomAccessStructure: a "typed struct" — 0x20+id (or 0x38–0x3b + id bytes), one
//   fixed-width slot per property in the struct's order, then the string/object area the slots point into.
// Anything this reader does not know for certain (an unknown struct id, a non-struct payload, an object
// slot, a non-ASCII string, an unknown constant, bytes that run short) answers NOT_DECODED, and the caller
// reads the row through Harper's own decode instead. So a row read here always equals the fully decoded one.
import { toScheduleRow, type ScheduleRow } from './rules.js';

/** One property of a msgpackr typed struct: [type, slot size, key, enumeration offset?]. */
export type StructProperty = readonly [number, number, string, number?];
export type TypedStruct = readonly StructProperty[];

/** The fields a claim reads (still due, its cadence and route, the job's sitemap flag). */
export type ClaimRow = Pick<ScheduleRow, 'nextRenderTime' | 'effectiveInterval' | 'fromSitemap'>;

/** The stored fields of a schedule record other than its key (which the store's key already gives). */
export const ROW_FIELDS = [
  'nextRenderTime',
  'fromSitemap',
  'effectiveInterval',
  'verified',
  'urgentAt',
  'changedAt',
  'strikes',
  'lastOutcome',
  'lastRenderedAt',
  'lastStatusCode',
  'lastError',
  'failingSince',
  'state',
  'reason',
  'redirectStrikes',
  'suppressionStrikes',
  'sitemapId',
  'sitemapLastmod',
] as const;
export const CLAIM_FIELDS = ['nextRenderTime', 'effectiveInterval', 'fromSitemap'] as const;

/** Field values in the order of ROW_FIELDS / CLAIM_FIELDS, as read from the slots. */
type Values = readonly unknown[];

// Rows are normalised by toScheduleRow itself, from an object of a fixed shape (fast to build).
export const scheduleRowOf = (key: string, v: Values): ScheduleRow | undefined =>
  toScheduleRow(key, {
    nextRenderTime: v[0],
    fromSitemap: v[1],
    effectiveInterval: v[2],
    verified: v[3],
    urgentAt: v[4],
    changedAt: v[5],
    strikes: v[6],
    lastOutcome: v[7],
    lastRenderedAt: v[8],
    lastStatusCode: v[9],
    lastError: v[10],
    failingSince: v[11],
    state: v[12],
    reason: v[13],
    redirectStrikes: v[14],
    suppressionStrikes: v[15],
    sitemapId: v[16],
    sitemapLastmod: v[17],
  });
export const claimRowOf = (key: string, v: Values): ClaimRow | undefined =>
  toScheduleRow(key, { nextRenderTime: v[0], effectiveInterval: v[1], fromSitemap: v[2] });

/** The bytes could not be read here for certain: read the row the full way. */
export const NOT_DECODED: unique symbol = Symbol('not decoded');
export type Decoded<T> = T | undefined | typeof NOT_DECODED;

// msgpackr struct property types.
const NUMBER = 0;
const OBJECT_DATA = 1;
const UTF8 = 2;
const ASCII = 3;
// Harper's RecordEncoder header.
const LOCAL_TIME_BYTE = 2;
const METADATA_LONG = 14;
const HAS_EXPIRATION = 16;
const HAS_RESIDENCY_ID = 32;
const MSGPACK_NIL = 0xc0;

/**
 * Where the stored value starts after Harper's RecordEncoder header (its version, local time, flags,
 * expiration and residency), or -1 when the bytes are not laid out as this reader knows.
 */
function valueStart(bytes: Uint8Array, end: number): number {
  if (end > bytes.length || end < 1) return -1;
  let p = 0;
  let b = bytes[0]!;
  if (b < 32 && end > 2) {
    if (b === LOCAL_TIME_BYTE) {
      p += 8;
      if (p >= end) return -1;
      b = bytes[p]!;
    }
    if (b < 32) {
      let flags: number;
      if (b === METADATA_LONG) {
        if (p + 4 > end) return -1;
        flags = ((bytes[p + 1]! << 16) | (bytes[p + 2]! << 8) | bytes[p + 3]!) >>> 0;
        p += 4;
      } else {
        if (p + 2 > end) return -1;
        flags = b | (bytes[p + 1]! << 5);
        p += 2;
      }
      if (flags & HAS_EXPIRATION) p += 8;
      if (flags & HAS_RESIDENCY_ID) p += 4;
    }
    if (p >= end) return -1;
  }
  return p;
}

/**
 * Whether stored bytes are a deleted row's marker (Harper keeps the deletion's version with a nil value
 * while its audit entry lasts): true, false for a value, undefined when the layout is not one we know.
 */
export function storedIsDeletion(bytes: Uint8Array, end: number): boolean | undefined {
  const p = valueStart(bytes, end);
  if (p < 0) return undefined;
  return bytes[p] === MSGPACK_NIL && p + 1 === end;
}

/** A constant in a slot (msgpackr's toConstant); anything else is not one. */
const UNKNOWN = Symbol('unknown constant');
function constant(code: number): null | undefined | boolean | typeof UNKNOWN {
  switch (code) {
    case 0xf6:
      return null;
    case 0xf7:
      return undefined;
    case 0xf8:
      return false;
    case 0xf9:
      return true;
  }
  return UNKNOWN;
}

/** msgpackr's float32 rounding: the power of ten that keeps a float32's significant decimal digits. */
const FLOAT32_DIGITS = Array.from({ length: 256 }, (_, i) => Number(`1e${Math.floor(45.15 - i * 0.30103)}`));

/** Where one wanted field sits in one struct. */
interface Slot {
  /** Index into the wanted fields. */
  field: number;
  type: number;
  size: number;
  offset: number;
  /** For a string slot: the later reference slots, in struct order (the first numeric one ends the string). */
  after: readonly Slot[];
}

interface Plan {
  /** Bytes of all slots: the string area starts here after the struct header. */
  slotsSize: number;
  slots: readonly Slot[];
  /** Wanted fields this struct has no property for (they read as undefined, as on the full record). */
  absent: readonly number[];
  /** False when a slot has a type or size this reader does not handle (a Date slot, say). */
  readable: boolean;
}

const SLOT_SIZES: Record<number, readonly number[]> = {
  [NUMBER]: [1, 4, 8],
  [OBJECT_DATA]: [0, 1, 2, 4],
  [UTF8]: [0, 1, 2, 4],
  [ASCII]: [0, 1, 2, 4],
};

function planFor(struct: TypedStruct, fields: readonly string[]): Plan {
  let offset = 0;
  let readable = true;
  const all: Slot[] = [];
  for (const [type, size, key] of struct) {
    // Every slot, wanted or not: a struct with a slot this reader does not know is not read here.
    if (!SLOT_SIZES[type]?.includes(size)) readable = false;
    all.push({ field: fields.indexOf(key), type, size, offset, after: [] });
    offset += size;
  }
  // msgpackr ends a string at the next reference slot (string or object) that holds an offset.
  const refs = all.filter((s) => s.type !== NUMBER);
  const slots = all
    .filter((s) => s.field >= 0)
    .map((s) => ({ ...s, after: s.type === NUMBER ? [] : refs.slice(refs.indexOf(s) + 1) }));
  const absent = fields.map((_, i) => i).filter((i) => !slots.some((s) => s.field === i));
  return { slotsSize: offset, slots, absent, readable };
}

/**
 * Decodes chosen fields of stored schedule records. One per store and field set: it caches a plan per
 * struct (the struct arrays are replaced, never changed, when Harper reloads its shared structures).
 */
export class RawRecordReader<T> {
  private readonly plans = new WeakMap<TypedStruct, Plan>();
  private lastStruct: TypedStruct | null = null;
  private lastPlan: Plan | undefined = undefined;
  private view: DataView | null = null;
  private viewOf: Uint8Array | null = null;
  /** The values of the last decode, by wanted field (a property missing from the struct is undefined). */
  private readonly values: unknown[];

  /** `build` makes the caller's row from the values of `fields`, in that order. */
  constructor(
    private readonly fields: readonly string[],
    private readonly build: (key: string, values: Values) => T | undefined,
  ) {
    this.values = fields.map(() => undefined);
  }

  /** The row (or undefined where a full read finds no record), or NOT_DECODED. */
  row(key: string, bytes: Uint8Array, end: number, structs: readonly TypedStruct[] | undefined): Decoded<T> {
    const r = this.decode(bytes, end, structs);
    return r === true ? this.build(key, this.values) : r;
  }

  /**
   * Reads the wanted fields into `values`. True when read; undefined for a stored nil (what a deleted
   * row can leave); NOT_DECODED when anything is outside what this reader knows.
   */
  private decode(
    bytes: Uint8Array,
    end: number,
    structs: readonly TypedStruct[] | undefined,
  ): true | undefined | typeof NOT_DECODED {
    let p = valueStart(bytes, end);
    if (p < 0) return NOT_DECODED;
    const b = bytes[p]!;
    if (b === MSGPACK_NIL && p + 1 === end) return undefined;
    if (b < 0x20 || b >= 0x3c || structs === undefined) return NOT_DECODED;
    let id = b - 0x20;
    p++;
    if (id >= 24) {
      const n = id - 23;
      if (p + n > end) return NOT_DECODED;
      id = 0;
      for (let i = n - 1; i >= 0; i--) id = id * 256 + bytes[p + i]!;
      p += n;
    }
    const struct = structs[id];
    if (struct === undefined) return NOT_DECODED;
    let plan = struct === this.lastStruct ? this.lastPlan : this.plans.get(struct);
    if (plan === undefined) {
      plan = planFor(struct, this.fields);
      this.plans.set(struct, plan);
    }
    this.lastStruct = struct;
    this.lastPlan = plan;
    if (!plan.readable) return NOT_DECODED;
    const refStart = p + plan.slotsSize;
    if (refStart > end) return NOT_DECODED;
    if (this.viewOf !== bytes) {
      this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      this.viewOf = bytes;
    }
    const view = this.view!;
    const values = this.values;
    for (let i = 0; i < plan.absent.length; i++) values[plan.absent[i]!] = undefined;
    for (let i = 0; i < plan.slots.length; i++) {
      const s = plan.slots[i]!;
      const at = p + s.offset;
      let v: unknown;
      if (s.type === NUMBER) v = readNumber(view, bytes, at, s.size);
      else {
        const ref = readRef(view, bytes, at, s.size);
        if (typeof ref !== 'number') v = ref;
        else {
          if (s.type === OBJECT_DATA) return NOT_DECODED;
          let stop = end - refStart;
          for (let j = 0; j < s.after.length; j++) {
            const next = s.after[j]!;
            const r = readRef(view, bytes, p + next.offset, next.size);
            if (r === UNKNOWN) return NOT_DECODED;
            if (typeof r === 'number') {
              stop = r;
              break;
            }
          }
          v = asciiText(bytes, refStart + ref, refStart + stop, end);
        }
      }
      if (v === UNKNOWN || v === NOT_DECODED) return NOT_DECODED;
      values[s.field] = v;
    }
    return true;
  }
}

function readNumber(view: DataView, bytes: Uint8Array, at: number, size: number): unknown {
  if (size === 1) {
    const v = bytes[at]!;
    return v < 0xf6 ? v : constant(v);
  }
  if (size === 4) {
    const v = view.getInt32(at, true);
    if (v < 0x20000000) {
      if (v > -0x1f000000) return v;
      if (v > -0x20000000) return constant(v & 0xff);
    }
    const f = view.getFloat32(at, true);
    const m = FLOAT32_DIGITS[((bytes[at + 3]! & 0x7f) << 1) | (bytes[at + 2]! >> 7)]!;
    return ((m * f + (f > 0 ? 0.5 : -0.5)) >> 0) / m;
  }
  const v = view.getFloat64(at, true);
  if (Number.isNaN(v) && bytes[at]! >= 0xf6) return constant(bytes[at]!);
  return v;
}

/** A reference slot: an offset into the string area, or the constant it holds instead. */
function readRef(view: DataView, bytes: Uint8Array, at: number, size: number) {
  switch (size) {
    case 0:
      return 0;
    case 1: {
      const r = bytes[at]!;
      return r >= 0xf6 ? constant(r) : r;
    }
    case 2: {
      const r = view.getUint16(at, true);
      return r >= 0xff00 ? constant(r & 0xff) : r;
    }
    default: {
      const r = view.getUint32(at, true);
      return r >= 0xffffff00 ? constant(r & 0xff) : r;
    }
  }
}

/** The string in [from, to) when it is ASCII (where every decoder agrees); otherwise NOT_DECODED. */
function asciiText(bytes: Uint8Array, from: number, to: number, end: number): string | typeof NOT_DECODED {
  if (from < 0 || to > end || from > to) return NOT_DECODED;
  let s = '';
  for (let i = from; i < to; i++) {
    const c = bytes[i]!;
    if (c >= 0x80) return NOT_DECODED;
    s += String.fromCharCode(c);
  }
  return s;
}
