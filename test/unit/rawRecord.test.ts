// The raw schedule-record reader against msgpackr itself: records packed the way Harper 4.7.29's
// primary store packs them (randomAccessStructure, shared typed structs, RecordEncoder's header in
// front), read back field by field, must equal the fully decoded record as readRow normalises it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Packr } from 'msgpackr';
import {
  CLAIM_FIELDS,
  claimRowOf,
  NOT_DECODED,
  RawRecordReader,
  ROW_FIELDS,
  scheduleRowOf,
  type TypedStruct,
} from '../../util/schedule/rawRecord.js';
import { toScheduleRow, type ScheduleRow } from '../../util/schedule/rules.js';
import { HELD_FIELDS, HeldFieldsSink } from '../../util/keeper/heldFields.js';

/** A Packr configured as Harper's record encoder is (OpenDBIObject: randomAccessStructure, freezeData). */
function recordPackr() {
  let saved: unknown;
  // randomAccessStructure is a msgpackr option its typings (1.11.8) do not list.
  const options = {
    randomAccessStructure: true,
    freezeData: true,
    useBigIntExtension: true,
    getStructures: () => saved as never,
    saveStructures: (s: unknown) => {
      saved = s;
    },
  };
  return new Packr(options as ConstructorParameters<typeof Packr>[0]);
}

type Packed = Packr & { typedStructs?: readonly TypedStruct[] };

interface Header {
  localTime?: number;
  /** Metadata flags: the 2-byte form below 14, the 4-byte form (0x0e first) otherwise. */
  flags?: number;
  long?: boolean;
}

/** RecordEncoder's header as Harper writes it (local time float64 BE with 0x40 flipped, then flags). */
function header(h: Header): Uint8Array {
  const parts: number[] = [];
  if (h.localTime !== undefined) {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setFloat64(0, h.localTime);
    b[0] = b[0]! ^ 64;
    parts.push(...b);
  }
  if (h.flags !== undefined) {
    const f = h.flags;
    if (h.long) parts.push(14, (f >> 16) & 0xff, (f >> 8) & 0xff, f & 0xff);
    else parts.push(f & 31, f >> 5);
    if (f & 16) parts.push(...new Uint8Array(new Float64Array([Date.now() + 1e6]).buffer));
    if (f & 32) parts.push(0, 0, 0, 7);
  }
  return Uint8Array.from(parts);
}

function stored(packr: Packr, record: Record<string, unknown>, h: Header = {}): Uint8Array {
  const payload = packr.pack(record);
  const head = header(h);
  const out = new Uint8Array(head.length + payload.length);
  out.set(head);
  out.set(payload, head.length);
  return out;
}

/** What readRow answers for the same bytes: Harper strips the header, msgpackr decodes in full. */
function fullRead(packr: Packr, key: string, payload: Uint8Array): ScheduleRow | undefined {
  let v: unknown;
  try {
    v = packr.unpack(payload);
  } catch {
    v = null; // Harper's decode logs and answers null
  }
  if (!v || typeof v !== 'object') return undefined;
  return toScheduleRow(key, v as Record<string, unknown>);
}

const KEY = 'https://example.com/a';
const typical = {
  cacheKey: KEY,
  nextRenderTime: 1_796_136_240_000,
  fromSitemap: true,
  effectiveInterval: 7 * 86_400_000,
  verified: true,
  urgentAt: null,
  changedAt: 1_796_136_271_445.5,
  strikes: 2,
  lastOutcome: 'failed',
  lastRenderedAt: 1_796_136_000_000,
  lastStatusCode: 503,
};

test('a stored record reads back equal to the full decode, behind every header form Harper writes', () => {
  const packr = recordPackr();
  const rows = new RawRecordReader(ROW_FIELDS, scheduleRowOf);
  const headers: Header[] = [
    {},
    { localTime: 1_796_136_271_838.85, flags: 0 },
    { localTime: 1_796_136_271_838.85, flags: 0x0e000000, long: true },
    { flags: 3 },
    { localTime: 1_796_136_271_838.85, flags: 16 | 32, long: true },
    { flags: 16 },
  ];
  for (const h of headers) {
    const bytes = stored(packr, typical, h);
    const got = rows.row(KEY, bytes, bytes.length, (packr as Packed).typedStructs);
    assert.deepEqual(got, toScheduleRow(KEY, typical), JSON.stringify(h));
  }
});

test('the claim reader reads the three claim fields and they equal the full row', () => {
  const packr = recordPackr();
  const bytes = stored(packr, typical, { localTime: 1.7e12, flags: 0 });
  const got = new RawRecordReader(CLAIM_FIELDS, claimRowOf).row(
    KEY,
    bytes,
    bytes.length,
    (packr as Packed).typedStructs,
  );
  assert.ok(got && got !== NOT_DECODED);
  assert.deepEqual(
    {
      nextRenderTime: got.nextRenderTime,
      effectiveInterval: got.effectiveInterval,
      fromSitemap: got.fromSitemap,
    },
    {
      nextRenderTime: typical.nextRenderTime,
      effectiveInterval: typical.effectiveInterval,
      fromSitemap: true,
    },
  );
});

test('a stored nil (what a delete can leave) reads as no row', () => {
  const bytes = Uint8Array.from([...header({ localTime: 1.7e12, flags: 0 }), 0xc0]);
  assert.equal(new RawRecordReader(ROW_FIELDS, scheduleRowOf).row(KEY, bytes, bytes.length, []), undefined);
});

test('what the reader cannot know answers NOT_DECODED: unknown struct, no structs yet, a plain map, a non-ASCII string, an object slot', () => {
  const packr = recordPackr();
  const rows = new RawRecordReader(ROW_FIELDS, scheduleRowOf);
  const bytes = stored(packr, typical);
  assert.equal(rows.row(KEY, bytes, bytes.length, []), NOT_DECODED);
  assert.equal(rows.row(KEY, bytes, bytes.length, undefined), NOT_DECODED);
  const plain = new Packr({ useRecords: false }).pack(typical);
  assert.equal(rows.row(KEY, plain, plain.length, (packr as Packed).typedStructs), NOT_DECODED);
  const accented = stored(packr, { ...typical, lastOutcome: 'réussi' });
  assert.equal(rows.row(KEY, accented, accented.length, (packr as Packed).typedStructs), NOT_DECODED);
  const nested = stored(packr, { ...typical, urgentAt: [1] });
  assert.equal(rows.row(KEY, nested, nested.length, (packr as Packed).typedStructs), NOT_DECODED);
});

test('bytes inside a larger reused buffer are read only up to the given end', () => {
  const packr = recordPackr();
  const bytes = stored(packr, typical, { localTime: 1.7e12, flags: 0 });
  const big = new Uint8Array(bytes.length + 64).fill(0xee);
  big.set(bytes, 16);
  const view = big.subarray(16);
  const got = new RawRecordReader(ROW_FIELDS, scheduleRowOf).row(
    KEY,
    view,
    bytes.length,
    (packr as Packed).typedStructs,
  );
  assert.deepEqual(got, toScheduleRow(KEY, typical));
});

test('struct ids past 15 and past 239 (two- and three-byte struct headers) read back', () => {
  const packr = recordPackr();
  const rows = new RawRecordReader(ROW_FIELDS, scheduleRowOf);
  for (let i = 0; i < 300; i++) {
    const r = { ...typical, [`extra${i}`]: i, nextRenderTime: typical.nextRenderTime + i };
    const bytes = stored(packr, r, { localTime: 1.7e12, flags: 0 });
    const got = rows.row(KEY, bytes, bytes.length, (packr as Packed).typedStructs);
    assert.deepEqual(got, toScheduleRow(KEY, r), `record ${i}`);
  }
  assert.ok(((packr as Packed).typedStructs?.length ?? 0) >= 300);
});

// ---------------------------------------------------------------------------------- properties

const anyNumber = fc.oneof(
  fc.integer({ min: 0, max: 0xf5 }),
  fc.integer({ min: -0x1f000000, max: 0x1fffffff }),
  fc.integer(),
  fc.double({ noNaN: false }),
  fc.double({ min: -1e6, max: 1e6 }).map((x) => Math.round(x * 100) / 100),
  fc.constantFrom(7 * 86_400_000, 30 * 86_400_000, 3_600_000, 1.5, 0.1, -0, 2 ** 32, 2 ** 31 - 1),
  fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 }),
);
const asciiText = fc.string({ unit: fc.integer({ min: 0, max: 0x7f }).map((c) => String.fromCharCode(c)) });
/** Values a stored schedule record can hold for any field (the schema's, and some it should not). */
const fieldValue = fc.oneof(
  { weight: 4, arbitrary: anyNumber },
  { weight: 2, arbitrary: fc.constantFrom(null, undefined, true, false) },
  { weight: 1, arbitrary: asciiText },
  { weight: 1, arbitrary: fc.string() },
  { weight: 1, arbitrary: fc.constantFrom([1], { a: 1 }, new Date(1_700_000_000_000), 10n) },
);
const fieldNames = [...ROW_FIELDS, 'cacheKey', 'other'] as const;
const record = fc
  .uniqueArray(fc.constantFrom(...fieldNames), { minLength: 0, maxLength: fieldNames.length })
  .chain((names) =>
    fc.tuple(fc.constant(names), fc.array(fieldValue, { minLength: names.length, maxLength: names.length })),
  )
  .map(([names, values]) => Object.fromEntries(names.map((n, i) => [n, values[i]])));
const anyHeader = fc.record(
  {
    localTime: fc.double({ min: 1.1e12, max: 2.1e12, noNaN: true }),
    flags: fc.integer({ min: 0, max: 0xffffff }),
    long: fc.boolean(),
  },
  { requiredKeys: [] },
) as fc.Arbitrary<Header>;

test('property: raw read of a random record is NOT_DECODED or exactly the full decode (row and claim fields)', () => {
  const packr = recordPackr();
  const rows = new RawRecordReader(ROW_FIELDS, scheduleRowOf);
  const claims = new RawRecordReader(CLAIM_FIELDS, claimRowOf);
  let read = 0;
  fc.assert(
    fc.property(record, anyHeader, (r, h) => {
      if (!h.long && h.flags !== undefined) {
        // The 2-byte form: its first byte is neither the 4-byte form's 14 nor, first in the value, a local time's 2.
        let f = h.flags & 0x1fff;
        if ((f & 31) === 14 || ((f & 31) === 2 && h.localTime === undefined)) f ^= 1;
        h.flags = f;
      }
      const bytes = stored(packr, r, h);
      const payload = packr.pack(r);
      const want = fullRead(packr, KEY, payload);
      const structs = (packr as Packed).typedStructs;
      const got = rows.row(KEY, bytes, bytes.length, structs);
      if (got !== NOT_DECODED) {
        assert.deepEqual(got, want);
        read++;
      }
      const c = claims.row(KEY, bytes, bytes.length, structs);
      if (c !== NOT_DECODED)
        assert.deepEqual(
          c && { n: c.nextRenderTime, e: c.effectiveInterval, s: c.fromSitemap },
          want && { n: want.nextRenderTime, e: want.effectiveInterval, s: want.fromSitemap },
        );
    }),
    { numRuns: 3000 },
  );
  // Most random records hold no Date, object or non-ASCII string in a field read: they must be read raw.
  assert.ok(read > 1000, `only ${read} of 3000 random records were read raw`);
});

test('property: the keeper load reader (seven held fields into one reused object) equals the full decode', () => {
  const packr = recordPackr();
  const sink = new HeldFieldsSink();
  const held = new RawRecordReader(HELD_FIELDS, (_key, v) => sink.fill(v));
  // A time or interval of -0 is 0: the raw reader may read a stored -0 as 0, which nothing tells apart.
  const zero = <T>(x: T): T => (x === 0 ? (0 as T) : x);
  const heldOf = (row: ScheduleRow | undefined) =>
    row && {
      nextRenderTime: zero(row.nextRenderTime),
      fromSitemap: row.fromSitemap,
      effectiveInterval: zero(row.effectiveInterval),
      verified: row.verified,
      urgentAt: zero(row.urgentAt),
      changedAt: zero(row.changedAt),
      state: row.state,
    };
  let read = 0;
  fc.assert(
    fc.property(record, (r) => {
      const bytes = stored(packr, r, {});
      const want = heldOf(fullRead(packr, KEY, packr.pack(r)));
      const got = held.row(KEY, bytes, bytes.length, (packr as Packed).typedStructs);
      if (got === NOT_DECODED) return;
      // Copied at once: the next read overwrites the object.
      assert.deepEqual(got && heldOf({ ...got } as ScheduleRow), want);
      read++;
    }),
    { numRuns: 3000 },
  );
  assert.ok(read > 1000, `only ${read} of 3000 random records were read raw`);
});

test('property: records of the schema shape (numbers, null, booleans, ASCII outcome) are always read raw', () => {
  const packr = recordPackr();
  const rows = new RawRecordReader(ROW_FIELDS, scheduleRowOf);
  const maybe = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: null });
  const schemaRecord = fc.record({
    cacheKey: fc.webUrl(),
    nextRenderTime: anyNumber,
    fromSitemap: fc.boolean(),
    effectiveInterval: maybe(anyNumber),
    verified: fc.boolean(),
    urgentAt: maybe(anyNumber),
    changedAt: maybe(anyNumber),
    strikes: fc.integer({ min: 0, max: 100 }),
    lastOutcome: maybe(fc.constantFrom('rendered', 'failed', 'redirected', 'non-indexable')),
    lastRenderedAt: maybe(anyNumber),
    lastStatusCode: maybe(fc.integer({ min: 100, max: 599 })),
  });
  fc.assert(
    fc.property(schemaRecord, (r) => {
      const bytes = stored(packr, r, { localTime: 1.7e12, flags: 0x0e000000, long: true });
      const got = rows.row(r.cacheKey, bytes, bytes.length, (packr as Packed).typedStructs);
      assert.notEqual(got, NOT_DECODED);
      assert.deepEqual(got, fullRead(packr, r.cacheKey, packr.pack(r)));
    }),
    { numRuns: 2000 },
  );
});

test('property: arbitrary or cut-short bytes never throw', () => {
  const packr = recordPackr();
  const rows = new RawRecordReader(ROW_FIELDS, scheduleRowOf);
  const sample = stored(packr, typical, { localTime: 1.7e12, flags: 0 });
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 80 }), fc.nat(sample.length), (junk, cut) => {
      rows.row(KEY, junk, junk.length, (packr as Packed).typedStructs);
      const r = rows.row(KEY, sample.subarray(0, cut), cut, (packr as Packed).typedStructs);
      if (r !== NOT_DECODED && r !== undefined) assert.equal(typeof r.nextRenderTime, 'number');
    }),
    { numRuns: 3000 },
  );
});
