// The pathname a route matches against, without the WHATWG parser for the common URL (issue 15 lever
// 8: `new URL` was ~14 % of the keeper's load, one parse per row). `simplePathname` answers only for
// URLs whose pathname it can tell for certain — `http(s)://` lowercase, a plain host of letters, digits,
// dots and hyphens whose last label is not a number (so no IPv4, IPv6, port, userinfo or punycode), and
// a path of printable ASCII that the parser leaves as it is (no dot segment, no `%2e`, nothing it
// percent-encodes) — and undefined for every other, which the caller parses the full way.
// test/unit/urlPath.test.ts checks it against `new URL` on random and hand-picked URLs.

// One scan, no RegExp and no match array: it runs once per row of a load (1M rows), where the two
// regular expressions it replaces were ~9 % of the load. test/unit/urlPath.test.ts holds them as the
// reference and checks the scan answers exactly as they do.

/** A path character the parser keeps as it is: printable ASCII but " # < > ? [ \\ ] ^ ` { | } and space. */
function keptPathChar(c: number): boolean {
  return (
    c === 0x21 || // !
    (c >= 0x24 && c <= 0x3b) || // $ % & ' ( ) * + , - . / 0-9 : ;
    c === 0x3d || // =
    (c >= 0x40 && c <= 0x5a) || // @ A-Z
    c === 0x5f || // _
    (c >= 0x61 && c <= 0x7a) || // a-z
    c === 0x7e // ~
  );
}

/** `new URL(url).pathname` when it can be told without the parser; undefined otherwise. */
export function simplePathname(url: string): string | undefined {
  // `http://` or `https://`, lowercase.
  if (!url.startsWith('http')) return undefined;
  let i = 4;
  if (url.charCodeAt(i) === 0x73) i++; // s
  if (!url.startsWith('://', i)) return undefined;
  i += 3;
  // The host: a–z, 0–9, '-', '.'; no label may start `xn--` (punycode).
  const hostStart = i;
  let labelStart = i;
  const length = url.length;
  for (; i < length; i++) {
    const c = url.charCodeAt(i);
    if (c === 0x2e) {
      labelStart = i + 1;
      continue;
    }
    if (!((c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2d)) break;
    if (i === labelStart && c === 0x78 && url.startsWith('n--', i + 1)) return undefined;
  }
  if (i === hostStart) return undefined;
  // The last label may not be empty (a trailing dot), all digits (IPv4) or `0x…` (hex IPv4).
  if (labelStart === i || url.startsWith('0x', labelStart)) return undefined;
  let digits = true;
  for (let j = labelStart; j < i && digits; j++) {
    const c = url.charCodeAt(j);
    digits = c >= 0x30 && c <= 0x39;
  }
  if (digits) return undefined;
  // Then the end, the query, the fragment or a path.
  if (i === length) return '/';
  const next = url.charCodeAt(i);
  if (next === 0x3f || next === 0x23) return '/'; // ? #
  if (next !== 0x2f) return undefined; // a port, userinfo, a backslash ...
  const pathStart = i;
  for (i++; i < length; i++) {
    const c = url.charCodeAt(i);
    if (c === 0x3f || c === 0x23) break;
    if (!keptPathChar(c)) return undefined;
    // A segment starting with '.' may be a dot segment; '%2e' may be an encoded one.
    if (c === 0x2e && url.charCodeAt(i - 1) === 0x2f) return undefined;
    if (c === 0x25 && url.charCodeAt(i + 1) === 0x32 && (url.charCodeAt(i + 2) | 0x20) === 0x65)
      return undefined;
  }
  return url.slice(pathStart, i);
}
