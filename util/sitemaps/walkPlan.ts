// The walk's plan (docs/sitemaps.md): which file comes next (breadth first, each file once), which are
// refused (depth, files per root, a file seen before), the figures a walk reports, and whether a walk
// may remove what left the sitemap. Pure: the walk (services/sitemaps/walk.ts) fetches and files.
import { noOutcomes } from '../schedule/sitemapRules.js';

/** A refusal or failure, as counted in a walk's figures and in the fetch metric. */
export type WalkProblem =
  | 'file_too_large'
  | 'too_many_urls'
  | 'root_url_limit'
  | 'root_file_limit'
  | 'depth'
  | 'cycle'
  | 'off_host'
  | 'address_refused'
  | 'http_refused'
  | 'too_many_redirects'
  | 'timeout'
  | 'http_status'
  | 'network'
  | 'malformed'
  | 'not_a_sitemap'
  | 'removal_share';

export type SitemapState = 'walking' | 'idle' | 'failed';

export interface WalkFigures {
  walkId: string;
  startedAt: number;
  finishedAt: number | null;
  durationMs: number;
  state: SitemapState;
  /** Why the walk failed; null while walking or when it ended idle. */
  reason: string | null;
  filesFetched: number;
  filesNotModified: number;
  filesFailed: number;
  /** The first few problems, each with the file it happened to. */
  errors: Array<{ url: string; reason: string }>;
  /** Every refusal and failure by kind. */
  refusals: Partial<Record<WalkProblem, number>>;
  urlsSeen: number;
  /** New rows. */
  filed: number;
  /** Rows a feeder filed before (or another walk unlinked) that this sitemap now owns. */
  linked: number;
  /** Rows of this sitemap whose cadence changed. */
  updated: number;
  /** Rows a newer `lastmod` made due now. */
  changed: number;
  unchanged: number;
  /** URLs another sitemap listed first: left as they are. */
  otherSitemap: number;
  /** URLs this walk had already seen in another file of the same root. */
  duplicates: number;
  /** URLs with a live retired entry: not filed. */
  retired: number;
  rejected: number;
  rejectedSample: Array<{ url: string; reason: string }>;
  removed: number;
  bytes: number;
}

/** How many problems and rejected URLs a walk keeps word for word (the rest are counted only). */
export const SAMPLE_SIZE = 10;
/** A sampled URL is cut to this many characters. */
const SAMPLE_URL_CHARS = 300;

export function emptyFigures(walkId: string, startedAt: number): WalkFigures {
  return {
    walkId,
    startedAt,
    finishedAt: null,
    durationMs: 0,
    state: 'walking',
    reason: null,
    filesFetched: 0,
    filesNotModified: 0,
    filesFailed: 0,
    errors: [],
    refusals: {},
    urlsSeen: 0,
    ...noOutcomes(),
    duplicates: 0,
    retired: 0,
    rejected: 0,
    rejectedSample: [],
    removed: 0,
    bytes: 0,
  };
}

const cut = (url: string) => (url.length > SAMPLE_URL_CHARS ? url.slice(0, SAMPLE_URL_CHARS) + '…' : url);

/** Counts a refusal or failure of `url` and keeps it in `errors` while there is room. */
export function noteProblem(f: WalkFigures, problem: WalkProblem, url: string, reason: string): void {
  f.refusals[problem] = (f.refusals[problem] ?? 0) + 1;
  if (f.errors.length < SAMPLE_SIZE) f.errors.push({ url: cut(url), reason: `${problem}: ${reason}` });
}

export function noteRejected(f: WalkFigures, url: string, reason: string): void {
  f.rejected++;
  if (f.rejectedSample.length < SAMPLE_SIZE) f.rejectedSample.push({ url: cut(url), reason });
}

/** The walk ends: its state, reason, end and duration. */
export function finishFigures(f: WalkFigures, at: number, reason: string | null): WalkFigures {
  return {
    ...f,
    finishedAt: at,
    durationMs: at - f.startedAt,
    state: reason === null ? 'idle' : 'failed',
    reason,
  };
}

export interface FrontierLimits {
  /** sitemaps.maxDepth: a file listed through more index levels than this is refused. */
  maxDepth: number;
  /** sitemaps.maxFilesPerRoot: files fetched per walk, the root included. */
  maxFiles: number;
}

export interface QueuedFile {
  url: string;
  depth: number;
}

/**
 * The files a walk still has to read, breadth first, each URL once. `offer` answers null when the file
 * was queued, or why it was not: `cycle` (seen before: an index that lists itself or an ancestor),
 * `depth`, or `root_file_limit` (which stops the walk: the sitemap is larger than it may be).
 */
export class Frontier {
  private readonly queue: QueuedFile[] = [];
  private head = 0;
  private readonly seen = new Set<string>();

  constructor(
    root: string,
    private readonly limits: FrontierLimits,
  ) {
    this.seen.add(root);
    this.queue.push({ url: root, depth: 0 });
  }

  offer(url: string, depth: number): null | 'cycle' | 'depth' | 'root_file_limit' {
    if (this.seen.has(url)) return 'cycle';
    if (depth > this.limits.maxDepth) return 'depth';
    if (this.seen.size >= this.limits.maxFiles) return 'root_file_limit';
    this.seen.add(url);
    this.queue.push({ url, depth });
    return null;
  }

  next(): QueuedFile | undefined {
    if (this.head >= this.queue.length) return undefined;
    const f = this.queue[this.head]!;
    this.head++;
    return f;
  }
}

/**
 * Whether a walk may remove `leaving` of the `owned` URLs it held before: more than `maxShare` of them
 * is more often a broken sitemap than a pruned one, so the walk fails and removes nothing unless the
 * refresh was asked with allowLargeRemoval. Answers null when it may, or the reason it may not.
 */
export function removalRefusal(
  leaving: number,
  owned: number,
  maxShare: number,
  allowLargeRemoval: boolean,
): string | null {
  if (leaving === 0 || allowLargeRemoval) return null;
  const share = owned === 0 ? 1 : leaving / owned;
  if (share <= maxShare) return null;
  return (
    `${leaving} of ${owned} URLs left the sitemap (${(share * 100).toFixed(1)} %, more than ` +
    `sitemaps.maxRemovalShare ${maxShare}); nothing was removed: refresh with allowLargeRemoval to remove them`
  );
}
