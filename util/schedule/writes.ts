// Every way RenderSchedule changes, as read-decide-write steps that are atomic per key:
// each chunk of keys is locked, read on a fresh snapshot, decided by the rules of util/schedule/rules.ts,
// and committed before its locks are let go. Harper has no compare-and-set and re-applies a
// conflicting write instead of re-running the callback, so a read taken outside the lock would let
// a delete, a result or a feeder's write that lands in between be undone by this write. The store
// (locks, reads, the transaction) is injected; services/schedule/store.ts binds it to Harper.
import type { QueueKeeperConfig } from '../config/schema.js';
import {
  classifyUrl,
  discoveredRow,
  siblingRow,
  revalidatedRow,
  upsertTarget,
  type Outcome,
  type RenderError,
  type ScheduleRow,
  type TargetInput,
} from './rules.js';
import type { Reason, RetireReason } from './rowState.js';
import { redirectDestination, rowAfterVerdict, verdictOf } from './verdicts.js';
import { listedRow, noOutcomes, unlinkedRow, type SitemapItem, type SitemapOutcome } from './sitemapRules.js';
import { keysOfUrlAmong, rowKeys, splitRowKey, urlOfKey } from './rowKey.js';

/** A chunk's write: a row to put, or null to delete the key. */
export interface ScheduleWrite {
  key: string;
  row: ScheduleRow | null;
  /**
   * The row being replaced was failing (strikes > 0), so its failing-list entry goes or moves; undefined
   * when there was no row, and an entry left by a row written outside these steps may still be there.
   */
  wasFailing: boolean | undefined;
  /** The row retires: this entry goes to the retired list in the same transaction as the delete. */
  retired?: RetiredEntry;
}

/** A retired row as the retired list keeps it (GET /prerender_admin/retired), keyed like the row. */
export interface RetiredEntry {
  url: string;
  deviceType: string;
  reason: RetireReason;
  queue: string;
  lastStatusCode: number | null;
  retiredAt: number;
}

export interface ScheduleStore {
  /** The row as committed now (callers only read inside `locked`, after its snapshot refresh). */
  read(key: string): ScheduleRow | undefined;
  /**
   * The keys of every row of `url` as stored now, whatever their device (a device no longer configured
   * included): what a delete, a revalidate or an unlink acts on.
   */
  keysOfUrl(url: string): string[];
  /**
   * While the upgrade to device keys has not moved a URL's bare row, the row a device key without a row
   * of its own stands for (the bare row, under this key), so a write keeps its history; else undefined.
   */
  bareRow?(key: string): ScheduleRow | undefined;
  /**
   * Runs `fn` holding the lock of every key (distinct, in one global order so two chunks never wait
   * on each other), with reads refreshed after the locks were taken; `fn`'s commit completes before
   * the locks are released.
   */
  locked<T>(keys: readonly string[], fn: () => Promise<T>): Promise<T>;
  /** Commits the puts and deletes of one chunk in one transaction. */
  commit(writes: readonly ScheduleWrite[]): Promise<void>;
  /** Test seam: runs after a chunk's rows were read and before they are written. */
  afterRead?: (keys: readonly string[]) => Promise<void> | void;
}

export interface ResultWrite {
  /** The row's key (`<url>|<device>`): the job's id. */
  key: string;
  outcome: Outcome;
  statusCode: number | null;
  completedAt: number;
  /** What went wrong, for a failure (kept on the row as lastError). */
  error?: RenderError | null;
  /** Where a redirect landed, as the fleet reported it (absolute), or null. */
  redirectedTo?: string | null;
  /** A permanent redirect's destination to file: redirectedTo when it may be filed, else null. */
  fileDestination?: string | null;
  reason?: Reason | null;
  isIndexable?: boolean | null;
}

export type ResultApplied =
  | { found: false }
  | {
      found: true;
      /** The row as written; null when the result retired it. */
      row: ScheduleRow | null;
      keepLease: boolean;
      /** What becomes of the stored page (util/schedule/verdicts.ts). */
      page: 'store' | 'delete' | 'keep';
      retired: RetireReason | null;
    };

/** A decision that retires the row: deleted, with its retired-list entry. */
interface Retire {
  retire: RetiredEntry;
}

/** What a URL-wide change did: the URLs it touched and the rows (keys) it changed. */
export interface UrlsChanged {
  urls: number;
  keys: string[];
}

/** What one sitemap batch did, by outcome (util/schedule/sitemapRules.ts). */
export type SitemapFiled = Record<SitemapOutcome, number>;

/** A 10,000-target batch commits in chunks this large; each chunk holds its keys' locks until it commits. */
const WRITE_CHUNK = 1000;

export class ScheduleWrites {
  constructor(
    private readonly store: ScheduleStore,
    private readonly config: () => QueueKeeperConfig,
    private readonly chunkSize = WRITE_CHUNK,
  ) {}

  /** The configured devices: filing writes a row for each of them. */
  private devices(): readonly string[] {
    return this.config().render.deviceTypes;
  }

  /** Every stored row of each URL, plus the configured devices' keys (rows a feeder may be filing now). */
  private keysOfUrls(urls: Iterable<string>): string[] {
    const keys = new Set<string>();
    for (const url of new Set(urls))
      for (const k of keysOfUrlAmong(url, this.devices(), this.store.keysOfUrl(url))) keys.add(k);
    return [...keys];
  }

  /** The configured devices' keys of each URL, in the URLs' order. */
  private deviceKeys(urls: Iterable<string>): string[] {
    const devices = this.devices();
    const keys: string[] = [];
    for (const url of urls) for (const k of rowKeys(url, devices)) keys.push(k);
    return keys;
  }

  /**
   * Locks, reads and decides `keys` chunk by chunk. `decide` sees each key's committed row (or what an
   * earlier entry of the same call made of it) and returns the row to write, null to delete, or
   * undefined to leave the key alone.
   */
  private async update(
    keys: readonly string[],
    decide: (key: string, current: ScheduleRow | undefined) => ScheduleRow | null | undefined | Retire,
  ): Promise<void> {
    for (let i = 0; i < keys.length; i += this.chunkSize) {
      const chunk = keys.slice(i, i + this.chunkSize);
      await this.store.locked(chunk, async () => {
        const writes: ScheduleWrite[] = [];
        for (const key of chunk) {
          const current = this.store.read(key) ?? this.store.bareRow?.(key);
          const decided = decide(key, current);
          if (decided === undefined) continue;
          // Rules build rows from the URL; the row is stored under its device's key.
          const next =
            decided !== null && !('retire' in decided) && decided.cacheKey !== key
              ? { ...decided, cacheKey: key }
              : decided;
          const wasFailing = current === undefined ? undefined : current.strikes > 0;
          if (next !== null && 'retire' in next)
            writes.push({ key, row: null, wasFailing, retired: next.retire });
          else writes.push({ key, row: next, wasFailing });
        }
        await this.store.afterRead?.(chunk);
        if (writes.length > 0) await this.store.commit(writes);
      });
    }
  }

  /**
   * Files verified targets, a row per configured device; entries for one URL within a batch apply in
   * order (last wins). Every device's row of a new URL comes due in the same minute (spread by the URL).
   */
  async fileTargets(targets: readonly TargetInput[], now: number): Promise<number> {
    const cfg = this.config();
    const byUrl = new Map<string, TargetInput[]>();
    for (const t of targets) {
      const list = byUrl.get(t.url);
      if (list) list.push(t);
      else byUrl.set(t.url, [t]);
    }
    await this.update(this.deviceKeys(byUrl.keys()), (key, current) => {
      let row = current;
      for (const t of byUrl.get(urlOfKey(key))!) row = upsertTarget(row, t, now, cfg);
      return row;
    });
    return targets.length;
  }

  /** Deletes every row of each URL, whatever its device; counts the URLs that had one, and names the keys. */
  async deleteTargets(urls: readonly string[]): Promise<UrlsChanged> {
    const keys: string[] = [];
    await this.update(this.keysOfUrls(urls), (key, current) => {
      if (current === undefined) return undefined;
      keys.push(key);
      return null;
    });
    return { urls: new Set(keys.map(urlOfKey)).size, keys };
  }

  /**
   * Files unverified rows only where none exists, a row per configured device `mayFile` allows (a device
   * whose row a verdict retired is refused by the caller); an existing row is never changed by this
   * path. Counts the URLs that got a row.
   */
  async discoverUrls(
    urls: readonly string[],
    now: number,
    mayFile: (key: string) => boolean = () => true,
  ): Promise<number> {
    const cfg = this.config();
    const filed = new Set<string>();
    await this.update(this.deviceKeys(new Set(urls)).filter(mayFile), (key, current) => {
      if (current !== undefined) return undefined;
      const url = urlOfKey(key);
      filed.add(url);
      return discoveredRow(url, now, cfg);
    });
    return filed.size;
  }

  /**
   * Files the URLs a sitemap lists (util/schedule/sitemapRules.ts listedRow), a row per configured device;
   * a URL listed twice in one batch counts once, its first entry winning. A URL counts by what its first
   * device's row did. Rows that would not change are not written.
   */
  async fileFromSitemap(
    items: readonly SitemapItem[],
    sitemapId: string,
    now: number,
    mayFile: (key: string) => boolean = () => true,
  ): Promise<SitemapFiled> {
    const cfg = this.config();
    const counts: SitemapFiled = noOutcomes();
    const counted = new Set<string>();
    const byUrl = new Map<string, SitemapItem>();
    for (const it of items) if (!byUrl.has(it.url)) byUrl.set(it.url, it);
    await this.update(this.deviceKeys(byUrl.keys()).filter(mayFile), (key, current) => {
      const url = urlOfKey(key);
      const r = listedRow(current, byUrl.get(url)!, sitemapId, now, cfg);
      if (!counted.has(url)) {
        counted.add(url);
        counts[r.outcome]++;
      }
      return r.row;
    });
    return counts;
  }

  /** Unlinks the rows that left `sitemapId` (sitemapRules.ts unlinkedRow); counts the URLs it owned. */
  async unlinkFromSitemap(urls: readonly string[], sitemapId: string): Promise<number> {
    const unlinked = new Set<string>();
    await this.update(this.keysOfUrls(urls), (key, current) => {
      if (current === undefined) return undefined;
      const next = unlinkedRow(current, sitemapId);
      if (next !== undefined) unlinked.add(urlOfKey(key));
      return next;
    });
    return unlinked.size;
  }

  /**
   * Deletes the rows `sitemapId` owns among `urls` (a sitemap with deleteRemoved), every device's; answers
   * the keys deleted (their pages go next).
   */
  async deleteSitemapRows(urls: readonly string[], sitemapId: string): Promise<string[]> {
    const deleted: string[] = [];
    await this.update(this.keysOfUrls(urls), (key, current) => {
      if (current === undefined || (current.sitemapId ?? null) !== sitemapId) return undefined;
      deleted.push(key);
      return null;
    });
    return deleted;
  }

  /** Every row of `url` due now and urgent, whatever its device; none when it has no row. */
  async revalidate(url: string, now: number): Promise<ScheduleRow[]> {
    return this.revalidateKeys(this.keysOfUrls([url]), now);
  }

  /**
   * Rewrites rows as they are: the keeper takes the write as its cue to ask the lease table afresh about a
   * row it set aside as leased until the lease's end (the rows view's release frees a lease early).
   * Counts the rows there were.
   */
  async touchKeys(keys: readonly string[]): Promise<number> {
    let touched = 0;
    await this.update(keys, (_key, current) => {
      if (current === undefined) return undefined;
      touched++;
      return current;
    });
    return touched;
  }

  /** Rows by key due now and urgent (serving's render-now asks one device's row); absent keys are skipped. */
  async revalidateKeys(keys: readonly string[], now: number): Promise<ScheduleRow[]> {
    const out: ScheduleRow[] = [];
    await this.update(keys, (_key, current) => {
      if (current === undefined) return undefined;
      const next = revalidatedRow(current, now);
      out.push(next);
      return next;
    });
    return out;
  }

  /**
   * Files the rows of a device added to render.deviceTypes (services/devices/duties.ts): each `key` gets
   * a row made from `source`, a row of the same URL for another device, only where it has none. Counts
   * the rows filed.
   */
  async fileDeviceRows(pairs: ReadonlyArray<{ key: string; source: ScheduleRow }>): Promise<number> {
    const sources = new Map(pairs.map((p) => [p.key, p.source]));
    let filed = 0;
    await this.update([...sources.keys()], (key, current) => {
      if (current !== undefined) return undefined;
      filed++;
      return siblingRow(sources.get(key)!);
    });
    return filed;
  }

  /** Deletes rows by key (a device's, at DELETE /prerender_admin/devices/{name}); counts those that existed. */
  async deleteKeys(keys: readonly string[]): Promise<number> {
    let deleted = 0;
    await this.update([...new Set(keys)], (_key, current) => {
      if (current === undefined) return undefined;
      deleted++;
      return null;
    });
    return deleted;
  }

  /**
   * Reschedules rows after results, each by its verdict (util/schedule/verdicts.ts): a success, a failure
   * strike, a redirect strike, a suppressed or gone row, or a retirement. A row deleted meanwhile stays
   * deleted: a result never brings a row back. A permanent redirect's destination is filed afterwards,
   * only where no row exists.
   */
  async applyResults(results: readonly ResultWrite[]): Promise<ResultApplied[]> {
    const cfg = this.config();
    const out: ResultApplied[] = results.map(() => ({ found: false }));
    const byKey = new Map<string, number[]>();
    results.forEach((r, i) => {
      const list = byKey.get(r.key);
      if (list) list.push(i);
      else byKey.set(r.key, [i]);
    });
    const destinations = new Map<string, ScheduleRow>();
    await this.update([...byKey.keys()], (key, current) => {
      const parts = splitRowKey(key);
      const url = parts?.url ?? key;
      let row: ScheduleRow | null | undefined = current;
      let retire: RetiredEntry | null = null;
      for (const i of byKey.get(key)!) {
        const r = results[i]!;
        if (row === undefined || row === null) {
          out[i] = { found: false };
          continue;
        }
        const v = verdictOf(
          {
            outcome: r.outcome,
            statusCode: r.statusCode,
            redirectedTo: r.redirectedTo ?? null,
            reason: r.reason ?? null,
            isIndexable: r.isIndexable ?? null,
          },
          (to) => sameUrl(to, url),
        );
        const w = rowAfterVerdict(
          row,
          v,
          {
            completedAt: r.completedAt,
            outcome: r.outcome,
            statusCode: r.statusCode,
            error: r.error ?? null,
          },
          cfg,
        );
        if (w.retired !== null) {
          retire = {
            url,
            deviceType: parts?.device ?? '',
            reason: w.retired,
            queue: classifyUrl(url, row.effectiveInterval, cfg).route,
            lastStatusCode: r.statusCode,
            retiredAt: r.completedAt,
          };
          if (v.kind === 'moved' && r.fileDestination) destinations.set(r.fileDestination, row);
        }
        out[i] = { found: true, row: w.row, keepLease: w.keepLease, page: w.page, retired: w.retired };
        row = w.row;
      }
      if (row === current) return undefined;
      return row === null && retire !== null ? { retire } : row;
    });
    if (destinations.size > 0) {
      // The destination is filed for every configured device, each only where it has no row.
      const now = Math.max(...results.map((r) => r.completedAt));
      await this.update(this.deviceKeys(destinations.keys()), (key, current) => {
        const url = urlOfKey(key);
        return current === undefined ? redirectDestination(destinations.get(url)!, url, now) : undefined;
      });
    }
    return out;
  }
}

/** Whether a redirect's destination is the row's own URL (the same URL once parsed). */
function sameUrl(to: string, url: string): boolean {
  if (to === url) return true;
  try {
    return new URL(to).href === new URL(url).href;
  } catch {
    return false;
  }
}
