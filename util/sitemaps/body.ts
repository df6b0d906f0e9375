// A fetched file's bytes as text, inflated when gzipped (a `.xml.gz`, or `content-encoding: gzip`: both
// start with the gzip magic bytes), with one bound on the bytes read and inflated: a gzip bomb stops at
// the bound like a plain file that is too large (docs/sitemaps.md "Limits"). Node's zlib, no Harper.
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';

export class BodyLimitError extends Error {
  override name = 'BodyLimitError';
  constructor(readonly limit: number) {
    super(`the file is larger than ${limit} bytes (sitemaps.maxFileBytes)`);
  }
}

export interface BodyText {
  /** The text, chunk by chunk (UTF-8, decoded across chunk edges). */
  chunks: AsyncGenerator<string>;
  /** Bytes received so far (before inflating). */
  received(): number;
}

const GZIP_MAGIC_0 = 0x1f;
const GZIP_MAGIC_1 = 0x8b;

/** Reads `source` as text, inflating gzip, throwing BodyLimitError once more than `maxBytes` would be read. */
export function boundedText(source: AsyncIterable<Uint8Array>, maxBytes: number): BodyText {
  let received = 0;
  async function* raw(): AsyncGenerator<Uint8Array> {
    for await (const chunk of source) {
      received += chunk.length;
      if (received > maxBytes) throw new BodyLimitError(maxBytes);
      yield chunk;
    }
  }
  async function* text(): AsyncGenerator<string> {
    const it = raw();
    const first = await it.next();
    if (first.done) return;
    const head = first.value;
    const gzipped = head.length >= 2 && head[0] === GZIP_MAGIC_0 && head[1] === GZIP_MAGIC_1;
    const decoder = new TextDecoder('utf-8');
    let inflated = 0;
    async function* rest(): AsyncGenerator<Uint8Array> {
      yield head;
      for (;;) {
        const n = await it.next();
        if (n.done) return;
        yield n.value;
      }
    }
    if (!gzipped) {
      for await (const c of rest()) yield decoder.decode(c, { stream: true });
    } else {
      const gunzip = createGunzip();
      const input = Readable.from(rest());
      // A source that fails (the byte bound, a reset connection) fails the inflater, so this loop sees it.
      input.on('error', (e) => gunzip.destroy(e));
      input.pipe(gunzip);
      try {
        for await (const c of gunzip as AsyncIterable<Buffer>) {
          inflated += c.length;
          if (inflated > maxBytes) throw new BodyLimitError(maxBytes);
          yield decoder.decode(c, { stream: true });
        }
      } finally {
        gunzip.destroy();
        input.destroy();
      }
    }
    const tail = decoder.decode();
    if (tail !== '') yield tail;
  }
  return { chunks: text(), received: () => received };
}
