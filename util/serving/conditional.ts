// Conditional GET (RFC 9110 §13): `If-None-Match` uses the weak comparison, takes a list or `*`, and when
// present decides alone; only without it does `If-Modified-Since` count. Pure.

export interface Validators {
  etag: string | null;
  lastModified: string | null;
}

export interface Conditions {
  ifNoneMatch: string | null | undefined;
  ifModifiedSince: string | null | undefined;
}

/** The entity tags of an If-None-Match list (commas inside quotes are part of a tag). */
export function entityTags(header: string): string[] {
  const tags: string[] = [];
  const re = /\s*((?:W\/)?"[^"]*"|\*|[^,\s]+)\s*(?:,|$)/gy;
  let m: RegExpExecArray | null;
  while ((m = re.exec(header)) !== null && m[0] !== '') tags.push(m[1]!);
  return tags;
}

/** The opaque tag without its weak prefix: the weak comparison compares only these. */
function opaque(tag: string): string {
  return tag.startsWith('W/') ? tag.slice(2) : tag;
}

/** Whether a request's validators match the page's, so the answer is 304 Not Modified. */
export function notModified(c: Conditions, v: Validators): boolean {
  if (c.ifNoneMatch !== null && c.ifNoneMatch !== undefined) {
    const tags = entityTags(c.ifNoneMatch);
    if (tags.includes('*')) return true;
    if (v.etag === null) return false;
    const mine = opaque(v.etag.trim());
    return tags.some((t) => opaque(t) === mine);
  }
  if (c.ifModifiedSince === null || c.ifModifiedSince === undefined || v.lastModified === null) return false;
  const since = Date.parse(c.ifModifiedSince);
  const modified = Date.parse(v.lastModified);
  if (Number.isNaN(since) || Number.isNaN(modified)) return false;
  return modified <= since;
}
