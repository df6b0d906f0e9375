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

/** A retired row as the retired list keeps it (GET /prerender_admin/retired). */
export interface RetiredEntry {
  url: string;
  reason: RetireReason;
  queue: string;
  lastStatusCode: number | null;
  retiredAt: number;
}

export interface ScheduleStore {
  /** The row as committed now (callers only read inside `locked`, after its snapshot refresh). */
  read(key: string): ScheduleRow | undefined;
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
  url: string;
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
          const current = this.store.read(key);
          const next = decide(key, current);
          if (next === undefined) continue;
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

  /** Files verified targets; entries for one URL within a batch apply in order (last wins). */
  async fileTargets(targets: readonly TargetInput[], now: number): Promise<number> {
    const cfg = this.config();
    const byUrl = new Map<string, TargetInput[]>();
    for (const t of targets) {
      const list = byUrl.get(t.url);
      if (list) list.push(t);
      else byUrl.set(t.url, [t]);
    }
    await this.update([...byUrl.keys()], (url, current) => {
      let row = current;
      for (const t of byUrl.get(url)!) row = upsertTarget(row, t, now, cfg);
      return row;
    });
    return targets.length;
  }

  /** Deletes rows; counts only rows that existed. */
  async deleteTargets(urls: readonly string[]): Promise<number> {
    let deleted = 0;
    await this.update([...new Set(urls)], (_url, current) => {
      if (current === undefined) return undefined;
      deleted++;
      return null;
    });
    return deleted;
  }

  /** Files unverified rows only where no row exists; an existing row is never changed by this path. */
  async discoverUrls(urls: readonly string[], now: number): Promise<number> {
    const cfg = this.config();
    let filed = 0;
    await this.update([...new Set(urls)], (url, current) => {
      if (current !== undefined) return undefined;
      filed++;
      return discoveredRow(url, now, cfg);
    });
    return filed;
  }

  /**
   * Files the URLs a sitemap lists (util/schedule/sitemapRules.ts listedRow); a URL listed twice in one
   * batch counts once, its first entry winning. Rows that would not change are not written.
   */
  async fileFromSitemap(
    items: readonly SitemapItem[],
    sitemapId: string,
    now: number,
  ): Promise<SitemapFiled> {
    const cfg = this.config();
    const counts: SitemapFiled = noOutcomes();
    const byUrl = new Map<string, SitemapItem>();
    for (const it of items) if (!byUrl.has(it.url)) byUrl.set(it.url, it);
    await this.update([...byUrl.keys()], (url, current) => {
      const r = listedRow(current, byUrl.get(url)!, sitemapId, now, cfg);
      counts[r.outcome]++;
      return r.row;
    });
    return counts;
  }

  /** Unlinks rows that left `sitemapId` (sitemapRules.ts unlinkedRow); counts only rows it owned. */
  async unlinkFromSitemap(urls: readonly string[], sitemapId: string): Promise<number> {
    let unlinked = 0;
    await this.update([...new Set(urls)], (_url, current) => {
      if (current === undefined) return undefined;
      const next = unlinkedRow(current, sitemapId);
      if (next !== undefined) unlinked++;
      return next;
    });
    return unlinked;
  }

  /** Deletes the rows `sitemapId` owns among `urls` (a sitemap with deleteRemoved); counts them. */
  async deleteSitemapRows(urls: readonly string[], sitemapId: string): Promise<string[]> {
    const deleted: string[] = [];
    await this.update([...new Set(urls)], (url, current) => {
      if (current === undefined || (current.sitemapId ?? null) !== sitemapId) return undefined;
      deleted.push(url);
      return null;
    });
    return deleted;
  }

  /** Due now and urgent; undefined when there is no row. */
  async revalidate(url: string, now: number): Promise<ScheduleRow | undefined> {
    let out: ScheduleRow | undefined;
    await this.update([url], (_url, current) => {
      if (current === undefined) return undefined;
      out = revalidatedRow(current, now);
      return out;
    });
    return out;
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
    const byUrl = new Map<string, number[]>();
    results.forEach((r, i) => {
      const list = byUrl.get(r.url);
      if (list) list.push(i);
      else byUrl.set(r.url, [i]);
    });
    const destinations = new Map<string, ScheduleRow>();
    await this.update([...byUrl.keys()], (url, current) => {
      let row: ScheduleRow | null | undefined = current;
      let retire: RetiredEntry | null = null;
      for (const i of byUrl.get(url)!) {
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
      const now = Math.max(...results.map((r) => r.completedAt));
      await this.update([...destinations.keys()], (url, current) =>
        current === undefined ? redirectDestination(destinations.get(url)!, url, now) : undefined,
      );
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
