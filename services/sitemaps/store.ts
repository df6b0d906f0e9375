// The sitemaps' own tables (docs/sitemaps.md), and the only module that reads or writes them
// (test/unit/tableOwners): RenderSitemap, one row per registered sitemap with its walk lease and figures,
// and RenderSitemapFile, what each walk read of each file. A change that reads before it writes holds the
// row's lmdb lock (services/runtime/storeLock.ts): Harper has no compare-and-set.
import type { WalkFigures, SitemapState } from '../../util/sitemaps/walkPlan.js';
import { HttpError } from '../runtime/httpError.js';
import { table, transaction, type HarperTable } from '../runtime/harper.js';
import { withStoreLock } from '../runtime/storeLock.js';

const sitemaps = (): HarperTable => table('render_queue', 'RenderSitemap');
const files = (): HarperTable => table('render_queue', 'RenderSitemapFile');

/** A sitemap change waits this long for another change of the same sitemap (each holds it for one commit). */
const LOCK_WAIT_MS = 10_000;
/** Registrations take one lock, so a user's count and the new row are decided together. */
const REGISTER_LOCK = 'sitemaps:register';

export interface SitemapRecord {
  id: string;
  url: string;
  owner: string;
  cadenceMs: number | null;
  deleteRemoved: boolean;
  state: SitemapState;
  createdAt: number;
  /** The walk running or last run, its holder (node, process, thread) and the holder's last beat. */
  walkId: string | null;
  walkHolder: string | null;
  walkBeatAt: number | null;
  allowLargeRemoval: boolean;
  /** The last walk that ended idle: its file entries are what the next walk compares with. */
  committedWalk: string | null;
  /** URLs the committed walk read. */
  urlCount: number;
  lastWalk: WalkFigures | null;
  progress: WalkFigures | null;
}

function toRecord(v: unknown): SitemapRecord | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const r = v as Record<string, unknown>;
  if (typeof r.id !== 'string' || typeof r.url !== 'string') return undefined;
  const str = (x: unknown) => (typeof x === 'string' ? x : null);
  const num = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : null);
  const state = r.state === 'walking' || r.state === 'failed' ? r.state : 'idle';
  return {
    id: r.id,
    url: r.url,
    owner: str(r.owner) ?? '',
    cadenceMs: num(r.cadenceMs),
    deleteRemoved: r.deleteRemoved === true,
    state,
    createdAt: num(r.createdAt) ?? 0,
    walkId: str(r.walkId),
    walkHolder: str(r.walkHolder),
    walkBeatAt: num(r.walkBeatAt),
    allowLargeRemoval: r.allowLargeRemoval === true,
    committedWalk: str(r.committedWalk),
    urlCount: num(r.urlCount) ?? 0,
    lastWalk: (r.lastWalk as WalkFigures | undefined) ?? null,
    progress: (r.progress as WalkFigures | undefined) ?? null,
  };
}

/** The sitemap as committed now (a local point read), or undefined. */
export function readSitemap(id: string): SitemapRecord | undefined {
  return toRecord(sitemaps().primaryStore.get(id));
}

/** Every sitemap, in id order, from `after` (exclusive) on. */
export function* sitemapsFrom(after?: string): Generator<SitemapRecord> {
  const range = sitemaps().primaryStore.getRange(
    after === undefined ? {} : { start: after, exclusiveStart: true },
  );
  for (const { value } of range) {
    const r = toRecord(value);
    if (r) yield r;
  }
}

async function locked<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const r = await withStoreLock(sitemaps().primaryStore, 'sitemaps', key, LOCK_WAIT_MS, fn);
  if (!r.locked)
    throw new HttpError(503, 'busy', 'another change of this sitemap is still running; retry shortly');
  return r.value;
}

async function write(rec: SitemapRecord): Promise<void> {
  await transaction(async (txn) => {
    await sitemaps().put(rec.id, { ...rec }, txn);
  });
}

export type Registered =
  { created: true; record: SitemapRecord } | { created: false; record: SitemapRecord } | { tooMany: true };

/**
 * Registers `fresh` unless its id (a hash of the URL) is taken, in which case the existing one answers;
 * refuses when its owner already has `maxPerUser`.
 */
export async function registerSitemap(fresh: SitemapRecord, maxPerUser: number): Promise<Registered> {
  return locked(REGISTER_LOCK, async () => {
    const existing = readSitemap(fresh.id);
    if (existing) return { created: false, record: existing };
    let mine = 0;
    for (const s of sitemapsFrom()) if (s.owner === fresh.owner) mine++;
    if (mine >= maxPerUser) return { tooMany: true };
    await write(fresh);
    return { created: true, record: fresh };
  });
}

/**
 * Takes the sitemap's walk for `holder` unless another holder beat within `leaseMs`: two walks of one
 * sitemap never run at once. Answers the record as taken, or null (gone, or walking elsewhere).
 */
export async function claimWalk(
  id: string,
  holder: string,
  walkId: string,
  now: number,
  leaseMs: number,
  allowLargeRemoval: boolean,
  progress: WalkFigures,
): Promise<SitemapRecord | null> {
  return locked(id, async () => {
    const rec = readSitemap(id);
    if (!rec) return null;
    if (rec.walkHolder !== null && rec.walkBeatAt !== null && now - rec.walkBeatAt < leaseMs) return null;
    const next: SitemapRecord = {
      ...rec,
      state: 'walking',
      walkId,
      walkHolder: holder,
      walkBeatAt: now,
      allowLargeRemoval,
      progress,
    };
    await write(next);
    return next;
  });
}

/** The walk's beat: its lease renewed and its progress shown. False when the walk is no longer this holder's. */
export async function beatWalk(
  id: string,
  holder: string,
  now: number,
  progress: WalkFigures,
): Promise<boolean> {
  return locked(id, async () => {
    const rec = readSitemap(id);
    if (!rec || rec.walkHolder !== holder) return false;
    await write({ ...rec, walkBeatAt: now, progress });
    return true;
  });
}

/** The walk ended: its figures, its state, and (when it ended idle) what it read becomes the committed walk. */
export async function endWalk(
  id: string,
  holder: string,
  figures: WalkFigures,
  committed: { walkId: string; urlCount: number } | null,
): Promise<boolean> {
  return locked(id, async () => {
    const rec = readSitemap(id);
    if (!rec || rec.walkHolder !== holder) return false;
    await write({
      ...rec,
      state: figures.state,
      walkHolder: null,
      walkBeatAt: null,
      allowLargeRemoval: false,
      progress: null,
      lastWalk: figures,
      ...(committed ? { committedWalk: committed.walkId, urlCount: committed.urlCount } : {}),
    });
    return true;
  });
}

/** Removes the sitemap's row (a walk still running sees it gone at its next beat and stops). */
export async function forgetSitemap(id: string): Promise<SitemapRecord | undefined> {
  return locked(id, async () => {
    const rec = readSitemap(id);
    if (!rec) return undefined;
    await transaction(async (txn) => {
      await sitemaps().delete(id, txn);
    });
    return rec;
  });
}

// ---------------------------------------------------------------- file entries

export interface FileEntry {
  kind: 'robots' | 'sitemapindex' | 'urlset';
  etag: string | null;
  lastModified: string | null;
  /** An index's or robots.txt's child files. */
  children: string[];
  /** A urlset's URLs: newline-joined, gzipped, base64 (util/sitemaps/urlList.ts). */
  urls: string | null;
  urlCount: number;
}

const fileKey = (sitemapId: string, walkId: string, url: string) => JSON.stringify([sitemapId, walkId, url]);
/** Every key of (sitemapId, walkId…) starts with this; JSON keys of ASCII sort below U+FFFF. */
const prefixOf = (...parts: string[]) => JSON.stringify(parts).slice(0, -1) + ',';

function toEntry(v: unknown): FileEntry | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const r = v as Record<string, unknown>;
  const kind = r.kind === 'robots' || r.kind === 'sitemapindex' || r.kind === 'urlset' ? r.kind : null;
  if (kind === null) return undefined;
  return {
    kind,
    etag: typeof r.etag === 'string' ? r.etag : null,
    lastModified: typeof r.lastModified === 'string' ? r.lastModified : null,
    children: Array.isArray(r.children) ? r.children.filter((c): c is string => typeof c === 'string') : [],
    urls: typeof r.urls === 'string' ? r.urls : null,
    urlCount: typeof r.urlCount === 'number' ? r.urlCount : 0,
  };
}

export function readFileEntry(sitemapId: string, walkId: string, url: string): FileEntry | undefined {
  return toEntry(files().primaryStore.get(fileKey(sitemapId, walkId, url)));
}

export async function putFileEntry(
  sitemapId: string,
  walkId: string,
  url: string,
  entry: FileEntry,
): Promise<void> {
  const id = fileKey(sitemapId, walkId, url);
  await transaction(async (txn) => {
    await files().put(id, { id, ...entry }, txn);
  });
}

/** The entries one walk wrote, with their file URLs. */
export function* fileEntriesOf(
  sitemapId: string,
  walkId: string,
): Generator<{ url: string; entry: FileEntry }> {
  const prefix = prefixOf(sitemapId, walkId);
  for (const { key, value } of files().primaryStore.getRange({ start: prefix, end: prefix + '\uffff' })) {
    if (typeof key !== 'string') continue;
    const entry = toEntry(value);
    if (!entry) continue;
    const parts = JSON.parse(key) as [string, string, string];
    yield { url: parts[2], entry };
  }
}

/** Deletes the sitemap's file entries of every walk not in `keep` (empty: all of them); answers how many. */
export async function dropFileEntries(sitemapId: string, keep: readonly string[]): Promise<number> {
  const prefix = prefixOf(sitemapId);
  const kept = keep.map((w) => prefixOf(sitemapId, w));
  const doomed: string[] = [];
  for (const key of files().primaryStore.getKeys({ start: prefix, end: prefix + '\uffff' })) {
    if (typeof key === 'string' && !kept.some((k) => key.startsWith(k))) doomed.push(key);
  }
  for (let i = 0; i < doomed.length; i += 100) {
    const chunk = doomed.slice(i, i + 100);
    await transaction(async (txn) => {
      for (const k of chunk) await files().delete(k, txn);
    });
  }
  return doomed.length;
}
