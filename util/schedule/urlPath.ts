// The pathname a route matches against, without the WHATWG parser for the common URL (`new URL`
// per row costs ~14 % of the keeper's load). `simplePathname` answers only for
// URLs whose pathname it can tell for certain — `http(s)://` lowercase, a plain host of letters, digits,
// dots and hyphens whose last label is not a number (so no IPv4, IPv6, port, userinfo or punycode), and
// a path of printable ASCII that the parser leaves as it is (no dot segment, no `%2e`, nothing it
// percent-encodes) — and undefined for every other, which the caller parses the full way.
// test/unit/urlPath.test.ts checks it against `new URL` on random and hand-picked URLs.

// `http(s)://`, a host of a–z, 0–9, '-' and '.', then optionally a path of printable ASCII the parser
// keeps as it is (not: " < > [ \ ] ^ ` { | } and space), ending at the query, the fragment or the end.
// Only tested, never exec'd: a load asks once per row (1M rows), and a match array with its two
// captured strings per row cost more than finding the host's and path's ends again by hand.
const SIMPLE_URL = /^https?:\/\/[a-z0-9.-]+(?:\/[!$-;=@-Z_a-z~]*)?(?:[?#]|$)/;

/**
 * Whether url[start, end) (a–z, 0–9, '-', '.' only) is a host the parser reads as a plain domain: its
 * last label not empty (a trailing dot), not all digits and not `0x…` (the IPv4 parser, which may
 * refuse it), and no label `xn--…` (punycode, decoded and possibly refused).
 */
function plainHost(url: string, start: number, end: number): boolean {
  let label = start;
  for (let i = start; i < end; i++) {
    const c = url.charCodeAt(i);
    if (c === 0x2e) label = i + 1;
    else if (i === label && c === 0x78 && url.startsWith('n--', i + 1)) return false;
  }
  if (label === end || url.startsWith('0x', label)) return false;
  for (let i = label; i < end; i++) {
    const c = url.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return true;
  }
  return false; // all digits
}

/** `new URL(url).pathname` when it can be told without the parser; undefined otherwise. */
export function simplePathname(url: string): string | undefined {
  if (!SIMPLE_URL.test(url)) return undefined;
  // As tested: the host runs to the first '/', '?' or '#' (or the end), the path from that '/' to the
  // first '?' or '#' (or the end). Found by native scans rather than a loop per character.
  const length = url.length;
  const hostStart = url.charCodeAt(4) === 0x73 ? 8 : 7; // after `https://` or `http://`
  let pathEnd = url.indexOf('?', hostStart);
  if (pathEnd < 0) pathEnd = length;
  const hash = url.indexOf('#', hostStart);
  if (hash >= 0 && hash < pathEnd) pathEnd = hash;
  const slash = url.indexOf('/', hostStart);
  const hostEnd = slash >= 0 && slash < pathEnd ? slash : pathEnd;
  if (!plainHost(url, hostStart, hostEnd)) return undefined;
  if (hostEnd === pathEnd) return '/';
  // A segment starting with '.' may be a dot segment; '%2e' may be an encoded one.
  const dot = url.indexOf('/.', hostEnd);
  if (dot >= 0 && dot < pathEnd) return undefined;
  for (let at = url.indexOf('%2', hostEnd); at >= 0 && at < pathEnd; at = url.indexOf('%2', at + 1)) {
    if ((url.charCodeAt(at + 2) | 0x20) === 0x65 && at + 2 < pathEnd) return undefined; // e or E
  }
  return url.slice(hostEnd, pathEnd);
}
