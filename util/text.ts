// String helpers for text a caller sent: lone surrogates (which `ordered-binary` stores as U+FFFD and strict
// JSON parsers refuse) and quoting a value into an answer or a log line.

/** No lone surrogate: `ordered-binary` would store one as U+FFFD, and the key would never read back. */
export function isWellFormed(s: string): boolean {
  return (s as unknown as { isWellFormed(): boolean }).isWellFormed();
}

/** `s` with every lone surrogate replaced by U+FFFD (String.prototype.toWellFormed, Node 20). */
export function wellFormed(s: string): string {
  return (s as unknown as { toWellFormed(): string }).toWellFormed();
}

/**
 * `s` fit for one line: cut to `max` characters (marked with `…`), made well-formed and JSON-quoted, so no
 * newline can forge a line and no lone surrogate reaches a JSON answer.
 */
export function quotedCut(s: string, max: number): string {
  return JSON.stringify(wellFormed(s.length > max ? s.slice(0, max) + '…' : s));
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The text of UTF-8 bytes, or null when they are not well-formed UTF-8 (never U+FFFD in their place). */
export function utf8Text(bytes: Uint8Array): string | null {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return null;
  }
}

/** a string a caller sent is echoed at most this long. */
export const MAX_ECHO_CHARS = 200;

/**
 * A caller's value fit to quote in an answer or a log line: a string is cut to 200 characters, made
 * well-formed and JSON-quoted (no newline, no lone surrogate); anything else is named by its type only,
 * so no nested value is ever stringified.
 */
export function echo(v: unknown): string {
  if (typeof v !== 'string') return v === null ? 'null' : Array.isArray(v) ? 'an array' : `a ${typeof v}`;
  return quotedCut(v, MAX_ECHO_CHARS);
}

/** A value named by its JSON type, as an answer says what a field was ("not a string", "not missing"). */
export function describeType(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'missing';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}
