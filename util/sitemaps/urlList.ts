// A file's URL list as a walk stores it (services/sitemaps/store.ts FileEntry.urls): newline-joined (a
// URL has no whitespace: util/http/input.ts), gzipped, base64. 50,000 URLs of a site are ~3 MB as text
// and a few hundred KB stored.
import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

export async function packUrls(urls: readonly string[]): Promise<string> {
  return (await gzipAsync(Buffer.from(urls.join('\n'), 'utf8'))).toString('base64');
}

export async function unpackUrls(packed: string): Promise<string[]> {
  const text = (await gunzipAsync(Buffer.from(packed, 'base64'))).toString('utf8');
  return text === '' ? [] : text.split('\n');
}
