// The streaming sitemap parser (docs/sitemaps.md): a urlset or a sitemap index is read chunk by chunk
// with saxes, and every complete `<url>` or `<sitemap>` entry is handed out as soon as its closing tag
// arrives, so a file is never held whole. Pure: bytes in, entries out; the walk (services/sitemaps/walk.ts)
// decides what each entry does.
import { SaxesParser } from 'saxes';

export type SitemapKind = 'urlset' | 'sitemapindex';

/** One entry as the file gave it; values are trimmed text, never checked here. */
export interface SitemapEntry {
  loc: string;
  lastmod?: string;
  changefreq?: string;
}

/** Why a file stopped being read: the walk reports it and files nothing read after it. */
export class SitemapParseError extends Error {
  override name = 'SitemapParseError';
  constructor(
    readonly code: 'malformed' | 'not_a_sitemap' | 'too_many_urls',
    message: string,
  ) {
    super(message);
  }
}

/**
 * A `<loc>` longer than this is cut while reading (it is refused later as too long); without the cut one
 * endless text node would grow without bound inside a file that is itself within the byte limit.
 */
const MAX_TEXT_CHARS = 8192;

/** The element name without its namespace prefix (`<sm:url>` is `url`). */
function localName(name: string): string {
  const i = name.indexOf(':');
  return i < 0 ? name : name.slice(i + 1);
}

/**
 * Feeds text chunks in; `take()` answers the entries completed so far. The root element decides the kind;
 * a root that is neither `urlset` nor `sitemapindex` is an error, as is anything saxes refuses.
 */
export class SitemapParser {
  private readonly sax = new SaxesParser({ xmlns: false });
  private readonly done: SitemapEntry[] = [];
  private kindSeen: SitemapKind | null = null;
  private depth = 0;
  /** The entry being read (inside `<url>` or `<sitemap>`), and the field whose text is being read. */
  private entry: { loc: string; lastmod?: string; changefreq?: string } | null = null;
  private field: 'loc' | 'lastmod' | 'changefreq' | null = null;
  private text = '';
  private entries = 0;
  private failure: SitemapParseError | null = null;

  /** `maxEntries`: more entries than this in one file stops it (sitemaps.org: 50,000). */
  constructor(private readonly maxEntries: number) {
    this.sax.on('error', (e) => {
      this.failure ??= new SitemapParseError('malformed', `malformed XML: ${e.message.split('\n')[0]}`);
    });
    this.sax.on('opentag', (tag) => this.open(localName(tag.name)));
    this.sax.on('closetag', (tag) => this.close(localName(tag.name)));
    this.sax.on('text', (t) => this.addText(t));
    this.sax.on('cdata', (t) => this.addText(t));
  }

  /** The root's kind once the root element was read. */
  get kind(): SitemapKind | null {
    return this.kindSeen;
  }

  /** Reads one chunk; throws the first SitemapParseError (entries completed before it stay in `take`). */
  write(chunk: string): void {
    this.check();
    this.sax.write(chunk);
    this.check();
  }

  /** The end of the file: an unclosed element or a missing root is malformed. */
  end(): void {
    this.check();
    this.sax.close();
    this.check();
    if (this.kindSeen === null) throw new SitemapParseError('not_a_sitemap', 'the file has no root element');
  }

  /** The entries completed since the last take. */
  take(): SitemapEntry[] {
    return this.done.splice(0, this.done.length);
  }

  private check(): void {
    if (this.failure) throw this.failure;
  }

  private fail(e: SitemapParseError): void {
    this.failure ??= e;
  }

  private open(name: string): void {
    if (this.failure) return;
    this.depth++;
    if (this.depth === 1) {
      if (name === 'urlset' || name === 'sitemapindex') this.kindSeen = name;
      else
        this.fail(
          new SitemapParseError(
            'not_a_sitemap',
            `the root element is <${name.slice(0, 40)}>, not <urlset> or <sitemapindex>`,
          ),
        );
      return;
    }
    const entryName = this.kindSeen === 'urlset' ? 'url' : 'sitemap';
    if (this.depth === 2 && name === entryName) {
      this.entry = { loc: '' };
      return;
    }
    if (this.depth === 3 && this.entry && (name === 'loc' || name === 'lastmod' || name === 'changefreq')) {
      this.field = name;
      this.text = '';
    }
  }

  private close(name: string): void {
    if (this.failure) return;
    if (this.depth === 3 && this.field !== null && this.entry && name === this.field) {
      this.entry[this.field] = this.text.trim();
      this.field = null;
    } else if (this.depth === 2 && this.entry) {
      const e = this.entry;
      this.entry = null;
      if (e.loc !== '') {
        this.entries++;
        if (this.entries > this.maxEntries) {
          this.fail(
            new SitemapParseError('too_many_urls', `the file lists more than ${this.maxEntries} entries`),
          );
          return;
        }
        this.done.push(e);
      }
    }
    this.depth--;
  }

  private addText(t: string): void {
    if (this.field === null || this.text.length >= MAX_TEXT_CHARS) return;
    this.text +=
      t.length + this.text.length > MAX_TEXT_CHARS ? t.slice(0, MAX_TEXT_CHARS - this.text.length) : t;
  }
}
