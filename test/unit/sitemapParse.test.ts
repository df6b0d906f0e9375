// The streaming sitemap parser, the bounded inflate and robots.txt (util/sitemaps/): fed in chunks cut
// anywhere, an entry comes out once its closing tag has arrived, and every refusal is typed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { BodyLimitError, boundedText } from '../../util/sitemaps/body.js';
import { SitemapParseError, SitemapParser, type SitemapEntry } from '../../util/sitemaps/parse.js';
import { isRobotsUrl, robotsSitemaps } from '../../util/sitemaps/robots.js';

const URLSET = (n: number) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">` +
  Array.from(
    { length: n },
    (_, i) =>
      `<url><loc> https://example.com/p/${i}?a=1&amp;b=2 </loc><lastmod>2026-01-0${(i % 9) + 1}</lastmod>` +
      `<changefreq>daily</changefreq><image:image><image:loc>https://cdn.example.com/${i}.png</image:loc></image:image></url>`,
  ).join('\n') +
  `</urlset>`;

function parseAll(
  text: string,
  cuts: readonly number[],
  max = 50_000,
): { entries: SitemapEntry[]; kind: string | null } {
  const p = new SitemapParser(max);
  const entries: SitemapEntry[] = [];
  let at = 0;
  for (const c of [...cuts].sort((a, b) => a - b)) {
    p.write(text.slice(at, c));
    entries.push(...p.take());
    at = c;
  }
  p.write(text.slice(at));
  p.end();
  entries.push(...p.take());
  return { entries, kind: p.kind };
}

test('a urlset cut into chunks anywhere gives the same entries as read whole', () => {
  const text = URLSET(20);
  const whole = parseAll(text, []);
  assert.equal(whole.kind, 'urlset');
  assert.equal(whole.entries.length, 20);
  assert.deepEqual(whole.entries[3], {
    loc: 'https://example.com/p/3?a=1&b=2',
    lastmod: '2026-01-04',
    changefreq: 'daily',
  });
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: text.length }), { maxLength: 40 }), (cuts) => {
      assert.deepEqual(parseAll(text, cuts).entries, whole.entries);
    }),
  );
});

test('an entry comes out as soon as its closing tag has arrived, not at the end of the file', () => {
  const p = new SitemapParser(10);
  p.write('<urlset><url><loc>https://example.com/a</loc></url><url><loc>https://exa');
  assert.deepEqual(p.take(), [{ loc: 'https://example.com/a' }]);
  p.write('mple.com/b</loc></url>');
  assert.deepEqual(p.take(), [{ loc: 'https://example.com/b' }]);
});

test('a sitemap index gives its child locations, namespace prefixes or not', () => {
  const text =
    '<sm:sitemapindex xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9">' +
    '<sm:sitemap><sm:loc>https://example.com/a.xml.gz</sm:loc><sm:lastmod>2026-01-01</sm:lastmod></sm:sitemap>' +
    '<sm:sitemap><sm:loc>https://example.com/b.xml</sm:loc></sm:sitemap></sm:sitemapindex>';
  const r = parseAll(text, [17, 90]);
  assert.equal(r.kind, 'sitemapindex');
  assert.deepEqual(
    r.entries.map((e) => e.loc),
    ['https://example.com/a.xml.gz', 'https://example.com/b.xml'],
  );
});

test('a malformed tail stops the file: the entries before it come out, none after', () => {
  const p = new SitemapParser(100);
  const text =
    '<urlset><url><loc>https://example.com/1</loc></url><url><loc>https://example.com/2</loc></url>' +
    '<url><loc>https://example.com/3</loc><oops<</url><url><loc>https://example.com/4</loc></url></urlset>';
  assert.throws(
    () => p.write(text),
    (e: unknown) => e instanceof SitemapParseError && e.code === 'malformed',
  );
  assert.deepEqual(
    p.take().map((e) => e.loc),
    ['https://example.com/1', 'https://example.com/2'],
  );
});

test('a file that ends inside an element, or is not a sitemap, is refused', () => {
  const open = new SitemapParser(10);
  open.write('<urlset><url><loc>https://example.com/1</loc></url><url>');
  assert.throws(
    () => open.end(),
    (e: unknown) => e instanceof SitemapParseError && e.code === 'malformed',
  );
  const html = new SitemapParser(10);
  assert.throws(
    () => html.write('<html><body>not found</body></html>'),
    (e: unknown) => e instanceof SitemapParseError && e.code === 'not_a_sitemap',
  );
});

test('more entries than the per-file limit stops the file at the limit', () => {
  const p = new SitemapParser(5);
  assert.throws(
    () => p.write(URLSET(8)),
    (e: unknown) => e instanceof SitemapParseError && e.code === 'too_many_urls',
  );
  assert.equal(p.take().length, 5);
});

test('an endless <loc> is cut while reading, so one text node cannot grow without bound', () => {
  const p = new SitemapParser(5);
  p.write('<urlset><url><loc>https://example.com/');
  for (let i = 0; i < 100; i++) p.write('a'.repeat(10_000));
  p.write('</loc></url></urlset>');
  p.end();
  const [e] = p.take();
  assert.equal(e!.loc.length, 8192);
});

async function readAll(source: AsyncIterable<Uint8Array>, max: number): Promise<string> {
  let out = '';
  for await (const c of boundedText(source, max).chunks) out += c;
  return out;
}

async function* chunks(buf: Buffer, size: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}

test('gzip is inflated whichever way it came; plain text passes through; UTF-8 survives chunk edges', async () => {
  const text = URLSET(50) + 'é'.repeat(100);
  assert.equal(await readAll(chunks(gzipSync(text), 7), 1 << 20), text);
  assert.equal(await readAll(chunks(Buffer.from(text), 3), 1 << 20), text);
});

test('a gzip bomb stops at the bound on inflated bytes, having read only a little of it', async () => {
  const bomb = gzipSync(Buffer.alloc(64 * 1024 * 1024, 0x20));
  assert.ok(bomb.length < 100 * 1024);
  const body = boundedText(chunks(bomb, 1024), 1024 * 1024);
  await assert.rejects(async () => {
    for await (const _ of body.chunks) void _;
  }, BodyLimitError);
  assert.ok(body.received() < bomb.length, `read ${body.received()} of ${bomb.length} compressed bytes`);
});

test('a plain file over the bound stops at the bound on bytes read', async () => {
  await assert.rejects(readAll(chunks(Buffer.alloc(3000, 0x61), 100), 1000), BodyLimitError);
  assert.equal((await readAll(chunks(Buffer.alloc(1000, 0x61), 100), 1000)).length, 1000);
});

test('robots.txt: every Sitemap: line once, any case, comments and other directives ignored', () => {
  const text =
    'User-agent: *\r\nDisallow: /private # no\nSITEMAP: https://example.com/a.xml\n' +
    '  sitemap:https://example.com/b.xml.gz # trailing\n# Sitemap: https://example.com/commented.xml\n' +
    'Sitemap: https://example.com/a.xml\nSitemap:\n';
  assert.deepEqual(robotsSitemaps(text), ['https://example.com/a.xml', 'https://example.com/b.xml.gz']);
  assert.equal(isRobotsUrl(new URL('https://example.com/robots.txt')), true);
  assert.equal(isRobotsUrl(new URL('https://example.com/robots.txt.xml')), false);
});
