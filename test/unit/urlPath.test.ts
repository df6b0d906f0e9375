// The route matcher's pathname without the WHATWG parser (util/schedule/urlPath.ts): wherever it
// answers, it must answer exactly what `new URL(url).pathname` does (null where the parser refuses).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { simplePathname } from '../../util/schedule/urlPath.js';
import { queueOf } from '../../util/schedule/rules.js';

// urlPath.ts as it was before it stopped capturing (exec, a match array and two strings per URL): the
// tested-only version must answer exactly as this one does.
const SIMPLE_URL = /^https?:\/\/([a-z0-9.-]+)(\/[!$-;=@-Z_a-z~]*)?(?:[?#]|$)/;
const NOT_PLAIN_HOST = /(?:^|\.)(?:[0-9]*|0x[a-z0-9-]*)\.?$|(?:^|\.)xn--/;
function byRegExp(url: string): string | undefined {
  const m = SIMPLE_URL.exec(url);
  if (m === null || NOT_PLAIN_HOST.test(m[1]!)) return undefined;
  const path = m[2];
  if (path === undefined) return '/';
  if (path.includes('/.') || path.includes('%2e') || path.includes('%2E')) return undefined;
  return path;
}

function parsed(url: string): string | null {
  try {
    return new URL(url).pathname;
  } catch {
    return null;
  }
}

test('a common page URL is answered without the parser, with the parser’s pathname', () => {
  for (const url of [
    'https://www.example-shop.com/catalog/products/item-1a-abcdefghij',
    'http://example.com',
    'https://example.com?q=1',
    'https://example.com/a/b.html?x=/../y#frag',
    "https://example.com/~!$&'()*+,;=:@%20/",
  ]) {
    const got = simplePathname(url);
    assert.notEqual(got, undefined, url);
    assert.equal(got, parsed(url), url);
  }
});

test('what the parser would rewrite or may refuse is left to the parser', () => {
  for (const url of [
    'https://example.com/a/./b',
    'https://example.com/a/../b',
    'https://example.com/a/%2e%2E/b',
    'https://example.com/a b',
    'https://example.com/a|b',
    'https://example.com/a^b',
    'https://EXAMPLE.com/a',
    'HTTPS://example.com/a',
    'https://1.2.3.4/a',
    'https://example.0x1f/a',
    'https://xn--nxasmq6b.com/a',
    'https://user@example.com/a',
    'https://example.com:8080/a',
    'https:///example.com/a',
    'ftp://example.com/a',
  ])
    assert.equal(simplePathname(url), undefined, url);
});

test('property: wherever it answers, the pathname equals new URL’s', () => {
  const hostChar = fc.constantFrom(...'ab09x.-');
  const pathChar = fc.constantFrom(...'ab0.-/:?#%2eE~@![]^|`{}<>" \\\u00e9AZ_'.split(''));
  const url = fc
    .tuple(
      fc.constantFrom('https://', 'http://'),
      fc.array(hostChar, { minLength: 1, maxLength: 10 }),
      fc.array(pathChar, { maxLength: 16 }),
    )
    .map(([scheme, host, path]) => scheme + host.join('') + path.join(''));
  let answered = 0;
  fc.assert(
    fc.property(url, (u) => {
      const got = simplePathname(u);
      if (got === undefined) return;
      answered++;
      assert.equal(got, parsed(u));
    }),
    { numRuns: 20_000 },
  );
  assert.ok(answered > 2000, `only ${answered} of 20,000 answered without the parser`);
});

test('property: it answers exactly as the exec-and-capture version it replaced, undefined included', () => {
  // Characters around every edge of the scan: scheme, host classes, labels (digits, 0x, xn--), the
  // path's kept set and what ends it; a host part mostly of host characters, then anything.
  const hostPiece = fc.constantFrom(...'aenx019.-'.split(''), 'xn--', '0x', '..', 'A', ':', '@', '');
  const kept = fc.constantFrom(...'ab9/-_~.:;=@!$'.split(''));
  const odd = fc.constantFrom(
    ...'aehnpstx019AZ.-_/:?#%2eE~@!$;=[]^|`{}<>" \\\u00e9\u0000\u007f'.split(''),
    'http://',
    'xn--',
    '0x',
    '/.',
    '%2e',
    '%2E',
    '..',
  );
  const url = fc
    .tuple(
      fc.constantFrom('https://', 'http://', 'http', 'https:/', 'httpx://', ''),
      fc.array(hostPiece, { maxLength: 6 }),
      fc.constantFrom('', '/', '/', '?', '#', ':'),
      fc.array(fc.oneof({ arbitrary: kept, weight: 6 }, { arbitrary: odd, weight: 1 }), { maxLength: 10 }),
    )
    .map(([head, host, sep, rest]) => head + host.join('') + sep + rest.join(''));
  let answered = 0;
  fc.assert(
    fc.property(url, (u) => {
      const got = simplePathname(u);
      assert.equal(got, byRegExp(u), u);
      if (got !== undefined) answered++;
    }),
    { numRuns: 50_000 },
  );
  assert.ok(answered > 2000, `only ${answered} of 50,000 answered`);
  for (const u of [
    'https://a.b.',
    'https://a..b/c',
    'https://0x/',
    'https://a.0x1f',
    'https://a-0x.b/',
    'https://xn-/a',
  ])
    assert.equal(simplePathname(u), byRegExp(u), u);
});

test('property: the route match made in place picks the route the parsed pathname picks', () => {
  // Routes and URLs over a few path pieces, so prefixes, exact paths, '/' and '' meet often.
  const piece = fc.constantFrom('/', '/p', '/p/', '/pq', '/blog/', 'a', '.', '?', '#', '%2e', ' ');
  const routePath = fc.constantFrom('/', '', '/p', '/p/', '/pq', '/blog/', '/blog/a');
  const routes = fc.array(
    fc.record({ match: fc.constantFrom('exact' as const, 'prefix' as const), path: routePath }),
    { minLength: 1, maxLength: 4 },
  );
  const url = fc
    .tuple(
      fc.constantFrom('https://ex.com', 'http://a-b.c', 'https://1.2.3.4', 'https://EX.com'),
      fc.array(piece, { maxLength: 5 }),
    )
    .map(([origin, path]) => origin + path.join(''));
  fc.assert(
    fc.property(routes, url, (rs, u) => {
      const named = rs.map((r, i) => ({ ...r, name: `r${i}` }));
      const path = parsed(u);
      const expected =
        path === null
          ? 'unrouted'
          : (named.find((r) => (r.match === 'exact' ? path === r.path : path.startsWith(r.path)))?.name ??
            'unrouted');
      assert.equal(queueOf(u, named), expected, `${u} ${JSON.stringify(rs)}`);
    }),
    { numRuns: 20_000 },
  );
});
