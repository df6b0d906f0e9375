// A site's robots.txt as a sitemap source (docs/sitemaps.md): its `Sitemap:` lines, in order, each once.
// Pure text in, URLs out; whether each may be fetched is the walk's question.

/** robots.txt lines are read up to this many; a file of more is cut there (Google reads 500 KiB). */
const MAX_ROBOTS_LINES = 50_000;

/** The `Sitemap:` values of a robots.txt (the directive is case-insensitive and applies to the whole file). */
export function robotsSitemaps(text: string): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  const lines = text.split(/\r\n|\r|\n/, MAX_ROBOTS_LINES);
  for (const line of lines) {
    const m = /^\s*sitemap\s*:\s*(\S+)/i.exec(line.replace(/#.*$/, ''));
    if (m === null) continue;
    const url = m[1]!;
    if (!seen.has(url)) {
      seen.add(url);
      out.push(url);
    }
  }
  return out;
}

/** Whether a registered URL names a robots.txt rather than a sitemap (its path is exactly /robots.txt). */
export function isRobotsUrl(url: URL): boolean {
  return url.pathname === '/robots.txt';
}
