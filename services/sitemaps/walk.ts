// One walk of one sitemap (docs/sitemaps.md "The walk"): the files breadth first from the registered URL
// (util/sitemaps/walkPlan.ts Frontier), each streamed through the parser as it arrives, its URLs filed in
// batches through the schedule's owner (the walk yields between batches), then what left the sitemap
// unlinked or deleted. A file that breaks stops the walk there: what was read before it stays filed,
// nothing after it is, and a failed walk removes nothing and leaves the committed walk as it was.
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { SitemapItem } from '../../util/schedule/sitemapRules.js';
import type { SitemapFiled } from '../../util/schedule/writes.js';
import { BodyLimitError } from '../../util/sitemaps/body.js';
import { changefreqCadence, locProblem, onAllowedHost, parseLastmod } from '../../util/sitemaps/entries.js';
import { SitemapParseError, SitemapParser, type SitemapEntry } from '../../util/sitemaps/parse.js';
import { isRobotsUrl, robotsSitemaps } from '../../util/sitemaps/robots.js';
import { packUrls, unpackUrls } from '../../util/sitemaps/urlList.js';
import { UrlSet } from '../../util/sitemaps/urlSet.js';
import {
  emptyFigures,
  finishFigures,
  Frontier,
  noteProblem,
  noteRejected,
  removalRefusal,
  type QueuedFile,
  type WalkFigures,
  type WalkProblem,
} from '../../util/sitemaps/walkPlan.js';
import { urlProblem } from '../../util/schedule/targetChecks.js';
import { bodyFailure, type Fetched, type Validators } from './fetcher.js';
import type { FileEntry, SitemapRecord } from './store.js';

/** URLs per schedule write: one write chunk of the owner (util/schedule/writes.ts), one lock round. */
const FILE_BATCH = 1000;
/** A robots.txt is read up to this many bytes (Google reads 500 KiB of it). */
const MAX_ROBOTS_BYTES = 512 * 1024;

export interface WalkDeps {
  config: () => QueueKeeperConfig;
  now: () => number;
  fetch: (url: string, rootHost: string, validators: Validators | undefined) => Promise<Fetched>;
  /** The schedule owner's sitemap writes (services/schedule/store.ts). */
  fileFromSitemap: (items: readonly SitemapItem[], sitemapId: string, now: number) => Promise<SitemapFiled>;
  unlinkFromSitemap: (urls: readonly string[], sitemapId: string) => Promise<number>;
  deleteSitemapRows: (urls: readonly string[], sitemapId: string) => Promise<string[]>;
  deletePages: (urls: string[]) => Promise<number>;
  /** A URL with a live retired entry is not filed again. */
  isRetired: (url: string) => boolean;
  readFileEntry: (sitemapId: string, walkId: string, url: string) => FileEntry | undefined;
  putFileEntry: (sitemapId: string, walkId: string, url: string, entry: FileEntry) => Promise<void>;
  fileEntriesOf: (sitemapId: string, walkId: string) => Iterable<{ url: string; entry: FileEntry }>;
  /** Renews the walk's lease and shows its progress; false when the walk is no longer this one's. */
  beat: (progress: WalkFigures) => Promise<boolean>;
  /** Whether the walk still holds its lease (a point read): a forgotten sitemap files no more batches. */
  holds: () => boolean;
  /** One turn of the event loop between batches. */
  yieldLoop: () => Promise<void>;
  /** Counts into the metrics: URLs by what the walk did, files by how they were read or refused. */
  count: (metric: 'sitemap_urls' | 'sitemap_fetches', result: string, n: number) => void;
}

export interface WalkEnd {
  figures: WalkFigures;
  /** Set when the walk ended idle: what it read becomes the sitemap's committed walk. */
  committed: { walkId: string; urlCount: number } | null;
}

/** The walk lost its lease (the sitemap was deleted, or another holder took it over). */
class WalkLost extends Error {}

/** How often a walk renews its lease while it files (ms). */
const BEAT_EVERY_MS = 2000;

export class SitemapWalk {
  private readonly figures: WalkFigures;
  private readonly seen = new UrlSet();
  private readonly rootHost: string;
  private readonly frontier: Frontier;
  private lastBeat: number;
  /** The batch being committed (flush), and the first commit that failed. */
  private writing: Promise<void> | null = null;
  private writeFailure: unknown = null;

  constructor(
    private readonly sitemap: SitemapRecord,
    private readonly walkId: string,
    private readonly deps: WalkDeps,
  ) {
    const now = deps.now();
    this.figures = emptyFigures(walkId, now);
    this.lastBeat = now;
    this.rootHost = new URL(sitemap.url).host.toLowerCase();
    const cfg = deps.config().sitemaps;
    this.frontier = new Frontier(sitemap.url, { maxDepth: cfg.maxDepth, maxFiles: cfg.maxFilesPerRoot });
  }

  /** Walks every file, then removes what left; never throws (a lost lease ends the walk as failed). */
  async run(): Promise<WalkEnd> {
    let failure: string | null = null;
    try {
      for (
        let file = this.frontier.next();
        file !== undefined && failure === null;
        file = this.frontier.next()
      ) {
        failure = await this.readFile(file);
        await this.beat(false);
      }
      if (failure === null) failure = await this.removeLeavers();
    } catch (e) {
      failure =
        e instanceof WalkLost
          ? 'the walk stopped: the sitemap was deleted or another walk took it over'
          : `the walk broke: ${(e as Error).message}`;
    }
    const end = finishFigures(this.figures, this.deps.now(), failure);
    return {
      figures: end,
      committed: failure === null ? { walkId: this.walkId, urlCount: this.seen.size } : null,
    };
  }

  private get sitemapId(): string {
    return this.sitemap.id;
  }

  private async beat(force: boolean): Promise<void> {
    const now = this.deps.now();
    if (!force && now - this.lastBeat < BEAT_EVERY_MS) return;
    this.lastBeat = now;
    this.figures.durationMs = now - this.figures.startedAt;
    if (!(await this.deps.beat({ ...this.figures }))) throw new WalkLost();
  }

  private fail(problem: WalkProblem, url: string, reason: string): string {
    noteProblem(this.figures, problem, url, reason);
    this.deps.count('sitemap_fetches', problem, 1);
    return `${problem}: ${reason} (${url.slice(0, 300)})`;
  }

  /** Reads one file; answers null, or why the walk stops here. */
  private async readFile(file: QueuedFile): Promise<string | null> {
    const committed = this.sitemap.committedWalk;
    const prev =
      committed === null ? undefined : this.deps.readFileEntry(this.sitemapId, committed, file.url);
    const res = await this.deps.fetch(
      file.url,
      this.rootHost,
      prev ? { etag: prev.etag, lastModified: prev.lastModified } : undefined,
    );
    if (res.kind === 'failed') {
      this.figures.filesFailed++;
      return this.fail(res.problem, file.url, res.reason);
    }
    if (res.kind === 'notModified') {
      this.figures.filesNotModified++;
      this.deps.count('sitemap_fetches', 'not_modified', 1);
      return this.reuse(file, prev!);
    }
    this.figures.filesFetched++;
    this.deps.count('sitemap_fetches', 'fetched', 1);
    try {
      if (file.depth === 0 && isRobotsUrl(new URL(file.url))) return await this.readRobots(file, res);
      return await this.readSitemap(file, res);
    } finally {
      this.figures.bytes += res.body.received();
      res.done();
    }
  }

  /** A 304: the file reads as its last walk read it (its children, or its URLs as seen). */
  private async reuse(file: QueuedFile, prev: FileEntry): Promise<string | null> {
    if (prev.kind === 'urlset') {
      const urls = prev.urls === null ? [] : await unpackUrls(prev.urls);
      let fresh = 0;
      for (const u of urls) if (this.seen.add(u)) fresh++;
      this.figures.urlsSeen += fresh;
      this.figures.unchanged += fresh;
      this.deps.count('sitemap_urls', 'unchanged', fresh);
    } else {
      const stop = this.offerChildren(file, prev.children);
      if (stop !== null) return stop;
    }
    await this.deps.putFileEntry(this.sitemapId, this.walkId, file.url, prev);
    return null;
  }

  /** Queues the child files an index or robots.txt lists; answers why the walk stops, or null. */
  private offerChildren(file: QueuedFile, children: readonly string[]): string | null {
    const allowHosts = this.deps.config().sitemaps.allowHosts;
    for (const child of children) {
      if (urlProblem(child) !== null) {
        noteProblem(this.figures, 'not_a_sitemap', child, 'the listed file is not an http(s) URL');
        continue;
      }
      if (!onAllowedHost(child, this.rootHost, allowHosts)) {
        noteProblem(this.figures, 'off_host', child, "the listed file is not on the sitemap's host");
        this.deps.count('sitemap_fetches', 'off_host', 1);
        continue;
      }
      const refused = this.frontier.offer(child, file.depth + 1);
      if (refused === 'root_file_limit')
        return this.fail(
          refused,
          child,
          `more than ${this.deps.config().sitemaps.maxFilesPerRoot} files (sitemaps.maxFilesPerRoot)`,
        );
      if (refused === 'cycle') {
        noteProblem(
          this.figures,
          'cycle',
          child,
          'the file was listed before (an index that lists itself or an ancestor)',
        );
        this.deps.count('sitemap_fetches', 'cycle', 1);
      } else if (refused === 'depth') {
        noteProblem(
          this.figures,
          'depth',
          child,
          `deeper than ${this.deps.config().sitemaps.maxDepth} index levels (sitemaps.maxDepth)`,
        );
        this.deps.count('sitemap_fetches', 'depth', 1);
      }
    }
    return null;
  }

  private async readRobots(
    file: QueuedFile,
    res: Extract<Fetched, { kind: 'body' }>,
  ): Promise<string | null> {
    let text = '';
    try {
      for await (const chunk of res.body.chunks) {
        text += chunk;
        if (text.length > MAX_ROBOTS_BYTES) break;
      }
    } catch (e) {
      return this.bodyBroke(file, e);
    }
    const children = robotsSitemaps(text.slice(0, MAX_ROBOTS_BYTES));
    const stop = this.offerChildren(file, children);
    if (stop !== null) return stop;
    await this.deps.putFileEntry(this.sitemapId, this.walkId, file.url, {
      kind: 'robots',
      ...res.validators,
      children,
      urls: null,
      urlCount: 0,
    });
    return null;
  }

  private bodyBroke(file: QueuedFile, e: unknown): string {
    this.figures.filesFailed++;
    if (e instanceof BodyLimitError) return this.fail('file_too_large', file.url, e.message);
    if (e instanceof SitemapParseError)
      return this.fail(e.code === 'too_many_urls' ? 'too_many_urls' : e.code, file.url, e.message);
    if (e instanceof WalkLost) throw e;
    const f = bodyFailure(e, false);
    return this.fail(f.problem, file.url, f.reason);
  }

  /** Streams a urlset or an index: entries are handled as they complete, URLs filed batch by batch. */
  private async readSitemap(
    file: QueuedFile,
    res: Extract<Fetched, { kind: 'body' }>,
  ): Promise<string | null> {
    const cfg = this.deps.config().sitemaps;
    const parser = new SitemapParser(cfg.maxUrlsPerFile);
    const listed: string[] = [];
    const children: string[] = [];
    const batch: SitemapItem[] = [];
    let stop: string | null = null;
    const handle = async (entries: SitemapEntry[]) => {
      for (const e of entries) {
        if (parser.kind === 'sitemapindex') {
          children.push(e.loc);
          continue;
        }
        stop = this.takeUrl(e, listed, batch);
        if (stop !== null) return;
        if (batch.length >= FILE_BATCH) await this.flush(batch);
      }
    };
    try {
      for await (const chunk of res.body.chunks) {
        parser.write(chunk);
        await handle(parser.take());
        if (stop !== null) break;
      }
      if (stop === null) {
        parser.end();
        await handle(parser.take());
      }
    } catch (e) {
      // What completed before the break is filed; nothing after it.
      await handle(parser.take()).catch(() => undefined);
      await this.flush(batch, true);
      return this.bodyBroke(file, e);
    }
    await this.flush(batch, true);
    if (stop !== null) return stop;
    if (parser.kind === 'sitemapindex') {
      const s = this.offerChildren(file, children);
      if (s !== null) return s;
    }
    await this.deps.putFileEntry(this.sitemapId, this.walkId, file.url, {
      kind: parser.kind ?? 'urlset',
      ...res.validators,
      children,
      urls: parser.kind === 'urlset' ? await packUrls(listed) : null,
      urlCount: listed.length,
    });
    return null;
  }

  /** One `<url>`: rejected, a duplicate, retired, or queued for filing. Answers why the walk stops, or null. */
  private takeUrl(e: SitemapEntry, listed: string[], batch: SitemapItem[]): string | null {
    const cfg = this.deps.config().sitemaps;
    const problem = locProblem(e.loc, this.rootHost, cfg.allowHosts);
    if (problem !== null) {
      noteRejected(this.figures, e.loc, problem);
      this.deps.count('sitemap_urls', 'rejected', 1);
      return null;
    }
    if (!this.seen.add(e.loc)) {
      this.figures.duplicates++;
      return null;
    }
    this.figures.urlsSeen++;
    if (this.figures.urlsSeen > cfg.maxUrlsPerRoot)
      return this.fail(
        'root_url_limit',
        this.sitemap.url,
        `more than ${cfg.maxUrlsPerRoot} URLs (sitemaps.maxUrlsPerRoot)`,
      );
    listed.push(e.loc);
    if (this.deps.isRetired(e.loc)) {
      this.figures.retired++;
      this.deps.count('sitemap_urls', 'retired', 1);
      return null;
    }
    const cadenceMs = this.sitemap.cadenceMs ?? changefreqCadence(e.changefreq, cfg.minCadence);
    const lastmod = parseLastmod(e.lastmod);
    batch.push({
      url: e.loc,
      ...(cadenceMs !== undefined ? { cadenceMs } : {}),
      ...(lastmod !== undefined ? { lastmod } : {}),
    });
    return null;
  }

  /**
   * Starts committing `batch` and returns once the batch before it has committed: at most two batches
   * are in flight, so the next one is read and parsed while one commits (their keys never overlap: a URL
   * is in one batch of a walk). `settle` also waits for the last one.
   */
  private async flush(batch: SitemapItem[], settle = false): Promise<void> {
    if (batch.length > 0) {
      if (!this.deps.holds()) throw new WalkLost();
      const items = batch.splice(0, batch.length);
      const previous = this.writing;
      this.writing = this.deps.fileFromSitemap(items, this.sitemapId, this.deps.now()).then(
        (counts) => this.record(counts),
        (e: unknown) => {
          this.writeFailure ??= e;
        },
      );
      await previous;
      this.throwIfWriteFailed();
      await this.deps.yieldLoop();
      await this.beat(false);
    }
    if (settle) {
      const last = this.writing;
      this.writing = null;
      await last;
      this.throwIfWriteFailed();
    }
  }

  private throwIfWriteFailed(): void {
    if (this.writeFailure !== null) throw this.writeFailure;
  }

  private record(counts: SitemapFiled): void {
    for (const [outcome, n] of Object.entries(counts) as Array<[keyof SitemapFiled, number]>) {
      this.figures[outcome] += n;
      if (n > 0) this.deps.count('sitemap_urls', outcome === 'otherSitemap' ? 'other_sitemap' : outcome, n);
    }
  }

  /**
   * After a walk that read every file: the URLs the committed walk listed and this one did not left the
   * sitemap. Too many of them fails the walk (removalRefusal); otherwise they are unlinked, or deleted
   * with their pages when the sitemap says deleteRemoved.
   */
  private async removeLeavers(): Promise<string | null> {
    const committed = this.sitemap.committedWalk;
    if (committed === null) return null;
    const leaving: string[] = [];
    for (const { entry } of this.deps.fileEntriesOf(this.sitemapId, committed)) {
      if (entry.kind !== 'urlset' || entry.urls === null) continue;
      for (const u of await unpackUrls(entry.urls)) if (!this.seen.has(u)) leaving.push(u);
    }
    const cfg = this.deps.config().sitemaps;
    const refusal = removalRefusal(
      leaving.length,
      this.sitemap.urlCount,
      cfg.maxRemovalShare,
      this.sitemap.allowLargeRemoval,
    );
    if (refusal !== null) return this.fail('removal_share', this.sitemap.url, refusal);
    for (let i = 0; i < leaving.length; i += FILE_BATCH) {
      const chunk = leaving.slice(i, i + FILE_BATCH);
      let n: number;
      if (this.sitemap.deleteRemoved) {
        const gone = await this.deps.deleteSitemapRows(chunk, this.sitemapId);
        await this.deps.deletePages(gone);
        n = gone.length;
      } else n = await this.deps.unlinkFromSitemap(chunk, this.sitemapId);
      this.figures.removed += n;
      this.deps.count('sitemap_urls', 'removed', n);
      await this.deps.yieldLoop();
      await this.beat(false);
    }
    return null;
  }
}
