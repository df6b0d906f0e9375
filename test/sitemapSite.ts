// A sitemap site on 127.0.0.1 for the sitemap tests and bench: files served from memory with ETags (a
// matching If-None-Match answers 304), `.gz` paths gzipped, and streams written on demand (a file that
// never ends). It counts what it answered per path, so a test can see a 304 or a fetch that never came.
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';

export interface UrlEntry {
  loc: string;
  changefreq?: string;
  lastmod?: string;
}

export function urlset(entries: readonly UrlEntry[]): string {
  const body = entries
    .map(
      (e) =>
        `<url><loc>${e.loc}</loc>${e.lastmod ? `<lastmod>${e.lastmod}</lastmod>` : ''}${
          e.changefreq ? `<changefreq>${e.changefreq}</changefreq>` : ''
        }</url>`,
    )
    .join('\n');
  return `<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n${body}\n</urlset>\n`;
}

export function sitemapIndex(locs: readonly string[]): string {
  const body = locs.map((l) => `<sitemap><loc>${l}</loc></sitemap>`).join('\n');
  return `<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n${body}\n</sitemapindex>\n`;
}

interface Served {
  body: Buffer;
  etag: string;
  contentType: string;
}

export interface Hits {
  ok: number;
  notModified: number;
  /** Bytes written for this path (streams included). */
  bytes: number;
}

export class SitemapSite {
  private server: http.Server | null = null;
  private readonly files = new Map<string, Served>();
  private readonly streams = new Map<string, (res: http.ServerResponse) => void>();
  readonly hits = new Map<string, Hits>();
  base = '';

  async start(): Promise<void> {
    this.server = http.createServer((req, res) => this.answer(req, res));
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.base = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  url(path: string): string {
    return this.base + path;
  }

  /** Serves `text` at `path`; a path ending `.gz` is served gzipped (as a `.xml.gz` file is). */
  set(path: string, text: string | Buffer, contentType = 'application/xml'): void {
    const raw = typeof text === 'string' ? Buffer.from(text) : text;
    const body = path.endsWith('.gz') ? gzipSync(raw) : raw;
    const etag = `"${createHash('sha1').update(body).digest('hex').slice(0, 16)}"`;
    this.files.set(path, {
      body,
      etag,
      contentType: path.endsWith('.gz') ? 'application/gzip' : contentType,
    });
  }

  /** Serves bytes already encoded (a hand-made gzip bomb). */
  setRaw(path: string, body: Buffer, contentType: string): void {
    const etag = `"${createHash('sha1').update(body).digest('hex').slice(0, 16)}"`;
    this.files.set(path, { body, etag, contentType });
  }

  /** Serves `path` by calling `write` with the response (it writes and ends it as it likes). */
  stream(path: string, write: (res: http.ServerResponse) => void): void {
    this.streams.set(path, write);
  }

  hitsOf(path: string): Hits {
    return this.hits.get(path) ?? { ok: 0, notModified: 0, bytes: 0 };
  }

  private count(path: string, f: (h: Hits) => void): void {
    const h = this.hitsOf(path);
    f(h);
    this.hits.set(path, h);
  }

  private answer(req: http.IncomingMessage, res: http.ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0]!;
    const stream = this.streams.get(path);
    if (stream) {
      this.count(path, (h) => h.ok++);
      const write = res.write.bind(res);
      res.write = ((chunk: Buffer | string, ...rest: unknown[]) => {
        this.count(path, (h) => (h.bytes += Buffer.byteLength(chunk)));
        return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
      }) as typeof res.write;
      stream(res);
      return;
    }
    const f = this.files.get(path);
    if (!f) {
      res.writeHead(404).end();
      return;
    }
    if (req.headers['if-none-match'] === f.etag) {
      this.count(path, (h) => h.notModified++);
      res.writeHead(304, { etag: f.etag }).end();
      return;
    }
    this.count(path, (h) => {
      h.ok++;
      h.bytes += f.body.length;
    });
    res.writeHead(200, { 'content-type': f.contentType, etag: f.etag, 'content-length': f.body.length });
    res.end(f.body);
  }
}
