// The pathname a route matches against, without the WHATWG parser for the common URL (issue 15 lever
// 8: `new URL` was ~14 % of the keeper's load, one parse per row). `simplePathname` answers only for
// URLs whose pathname it can tell for certain — `http(s)://` lowercase, a plain host of letters, digits,
// dots and hyphens whose last label is not a number (so no IPv4, IPv6, port, userinfo or punycode), and
// a path of printable ASCII that the parser leaves as it is (no dot segment, no `%2e`, nothing it
// percent-encodes) — and undefined for every other, which the caller parses the full way.
// test/unit/urlPath.test.ts checks it against `new URL` on random and hand-picked URLs.

// `http(s)://`, a host of a–z, 0–9, '-' and '.', then optionally a path of printable ASCII the parser
// keeps as it is (not: " < > [ \ ] ^ ` { | } and space), ending at the query, the fragment or the end.
const SIMPLE_URL = /^https?:\/\/([a-z0-9.-]+)(\/[!$-;=@-Z_a-z~]*)?(?:[?#]|$)/;

// A host (of a–z, 0–9, '-', '.') the parser may read otherwise than as a plain domain: its last label
// (one trailing dot aside) empty, all digits or hex `0x…` (the IPv4 parser, which may refuse it), or a
// punycode label `xn--…` (decoded, and possibly refused).
const NOT_PLAIN_HOST = /(?:^|\.)(?:[0-9]*|0x[a-z0-9-]*)\.?$|(?:^|\.)xn--/;

/** `new URL(url).pathname` when it can be told without the parser; undefined otherwise. */
export function simplePathname(url: string): string | undefined {
  const m = SIMPLE_URL.exec(url);
  if (m === null || NOT_PLAIN_HOST.test(m[1]!)) return undefined;
  const path = m[2];
  if (path === undefined) return '/';
  // A segment starting with '.' may be a dot segment; '%2e' may be an encoded one.
  if (path.includes('/.') || path.includes('%2e') || path.includes('%2E')) return undefined;
  return path;
}
