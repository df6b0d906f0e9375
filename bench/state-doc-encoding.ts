// Which encoding the shared queue-state document uses (util/sharedMemory/stateDoc.ts): JSON or msgpackr.
// The state duty writes the document every 5 s on worker 0 and every queue-state request on any worker
// reads it, so decode cost matters more than encode cost. Both paths are measured end to end as the
// store runs them: encode into a shared slot, then copy out of it and decode.
//
//   npx tsc -p tsconfig.json && node dist/bench/state-doc-encoding.js [iterations]
import { Buffer } from 'node:buffer';
import { Packr } from 'msgpackr';

const HOUR_MS = 3_600_000;
const LATENESS_BINS = 5;

/** A queue-state document at the size the spec caps it: 200 classes, 200 byRoute, 60 flow minutes. */
export function realisticStateDoc(now: number): Record<string, unknown> {
  const bins = (seed: number) =>
    Array.from({ length: LATENESS_BINS }, (_, i) => (seed * 7919 + i * 104729) % 5000);
  const classes = Array.from({ length: 200 }, (_, i) => ({
    route: `route-${i % 120}-${['product', 'category', 'article', 'landing'][i % 4]}`,
    cadenceMs: [HOUR_MS, 6 * HOUR_MS, 24 * HOUR_MS, 7 * 24 * HOUR_MS][i % 4],
    fromSitemap: i % 3 !== 0,
    rows: 1000 + ((i * 7717) % 90_000),
    due: (i * 331) % 4000,
    oldestDueAt: now - ((i * 60_000 * 37) % (48 * HOUR_MS)),
    oldestLatenessCadences: ((i * 0.137) % 9) + 0.01,
  }));
  const byRoute = Array.from({ length: 200 }, (_, i) => ({
    route: `route-${i}-${['product', 'category', 'article', 'landing'][i % 4]}`,
    due: (i * 523) % 7000,
    sitemap: bins(i),
    discovered: bins(i + 1000),
  }));
  const flow = Array.from({ length: 60 }, (_, i) => ({
    minute: Math.floor(now / 60_000) * 60_000 - (59 - i) * 60_000,
    cameDue: (i * 97) % 900,
    added: (i * 53) % 300,
    triggered: (i * 89) % 800,
    rescheduled: (i * 83) % 750,
    removed: i % 7,
  }));
  return {
    now: {
      due: 412_345,
      dueSitemap: 300_001,
      dueDiscovered: 112_344,
      dueUrgent: 17,
      inFlight: 2_950,
      unclaimed: 409_395,
      paused: false,
      status: 'queued',
    },
    coming: {
      next15m: 5_230,
      next60m: 21_800,
      byHour: Array.from({ length: 24 }, (_, i) => 20_000 + i * 311),
      next24h: 565_800,
    },
    lateness: {
      edges: [0.25, 1, 2, 4],
      sitemap: bins(1),
      discovered: bins(2),
      byRoute,
      classes,
      listsTruncated: true,
    },
    flow,
    trust: {
      source: 'keeper',
      live: true,
      phase: 'live',
      exact: true,
      stateAt: now,
      maxAgeMs: 20_000,
      keeper: {
        load: { ms: 2_480, rows: 1_000_000 },
        lastPublish: { ms: 3.2, published: 5_000, skippedLeased: 41 },
        headCheck: { checked: 64, repaired: 0 },
        lastVerify: { at: now - 1_200_000, ms: 2_900, repaired: 0 },
        repairedTotal: 0,
        lastError: null,
      },
    },
  };
}

interface Codec {
  name: string;
  /** Writes the document into `slot` and returns the byte length. */
  encodeInto(doc: unknown, slot: Buffer): number;
  /** Copies `length` bytes out of `slot` (the reader must own a stable copy before it decodes) and decodes. */
  decodeFrom(slot: Buffer, length: number): unknown;
}

const jsonCodec: Codec = {
  name: 'JSON',
  encodeInto(doc, slot) {
    const text = JSON.stringify(doc);
    return slot.write(text, 0, 'utf8');
  },
  decodeFrom(slot, length) {
    return JSON.parse(slot.toString('utf8', 0, length));
  },
};

function msgpackCodec(name: string, packr: Packr): Codec {
  return {
    name,
    encodeInto(doc, slot) {
      const bytes = packr.pack(doc);
      slot.set(bytes, 0);
      return bytes.length;
    },
    decodeFrom(slot, length) {
      return packr.unpack(Buffer.from(slot.subarray(0, length)));
    },
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function measure(codec: Codec, doc: unknown, iterations: number) {
  const slot = Buffer.alloc(1 << 20);
  let length = 0;
  for (let i = 0; i < 200; i++) codec.decodeFrom(slot, (length = codec.encodeInto(doc, slot)));
  const encodeUs: number[] = [];
  const decodeUs: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t0 = process.hrtime.bigint();
    length = codec.encodeInto(doc, slot);
    const t1 = process.hrtime.bigint();
    codec.decodeFrom(slot, length);
    const t2 = process.hrtime.bigint();
    encodeUs.push(Number(t1 - t0) / 1000);
    decodeUs.push(Number(t2 - t1) / 1000);
  }
  const round = (x: number) => Math.round(x * 10) / 10;
  return {
    codec: codec.name,
    bytes: length,
    encodeP50us: round(median(encodeUs)),
    decodeP50us: round(median(decodeUs)),
    totalP50us: round(median(encodeUs.map((e, i) => e + decodeUs[i]!))),
  };
}

const iterations = Number(process.argv[2] ?? 2000);
const doc = realisticStateDoc(Date.UTC(2025, 5, 1, 12));
const codecs = [
  jsonCodec,
  msgpackCodec('msgpackr (useRecords: false)', new Packr({ useRecords: false })),
  msgpackCodec('msgpackr (records, inline structures)', new Packr({ useRecords: true })),
];
const results = codecs.map((c) => measure(c, doc, iterations));
console.log(`node ${process.version}, ${iterations} iterations, median per document`);
console.table(results);
