// A fleet's page bytes to the text stored (docs/prerender-fleet.md): gzip, br or identity, inflated
// with a bound. zlib stops as soon as the output passes `maxOutputLength`, so a few kilobytes that
// would inflate to gigabytes cost at most the bound in memory, never the whole bomb. The text must be
// UTF-8: a stored page that silently turned bytes into U+FFFD would not be what the fleet rendered.
import { brotliDecompress, gunzip, type InputType, type ZlibOptions, type BrotliOptions } from 'node:zlib';
import { utf8Text } from '../text.js';
import type { PageEncoding } from './result.js';

export type PageDecode =
  { ok: true; text: string } | { ok: false; status: 'too_large' | 'undecodable'; detail: string };

type Inflate = (
  buf: InputType,
  options: ZlibOptions & BrotliOptions,
  callback: (error: Error | null, result: Buffer) => void,
) => void;

function inflate(fn: Inflate, bytes: Uint8Array, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    fn(bytes, { maxOutputLength: max }, (e, out) => (e ? reject(e) : resolve(out))),
  );
}

/** Decodes a page of at most `maxBytes` decoded bytes; never throws. */
export async function decodePage(
  bytes: Uint8Array,
  encoding: PageEncoding,
  maxBytes: number,
): Promise<PageDecode> {
  let plain: Uint8Array;
  if (encoding === 'identity') plain = bytes;
  else {
    try {
      // One byte past the limit tells "exactly at the limit" from "over it".
      plain = await inflate(encoding === 'gzip' ? gunzip : brotliDecompress, bytes, maxBytes + 1);
    } catch (e) {
      if ((e as { code?: unknown }).code === 'ERR_BUFFER_TOO_LARGE')
        return {
          ok: false,
          status: 'too_large',
          detail: `the ${encoding} page inflates past ${maxBytes} bytes`,
        };
      return { ok: false, status: 'undecodable', detail: `the page is not valid ${encoding}` };
    }
  }
  if (plain.length > maxBytes)
    return { ok: false, status: 'too_large', detail: `the page is ${plain.length} bytes, over ${maxBytes}` };
  const text = utf8Text(plain);
  return text === null
    ? { ok: false, status: 'undecodable', detail: 'the page is not valid UTF-8' }
    : { ok: true, text };
}
