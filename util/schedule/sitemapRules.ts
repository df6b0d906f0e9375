// The schedule rules of a sitemap walk (docs/sitemaps.md), pure over plain rows like ./rules.ts: what a
// URL listed by a sitemap does to its row, and what leaving the sitemap does. The schedule owner
// (services/schedule/store.ts) reads each row under its lock, calls these, and writes what they answer.
import type { QueueKeeperConfig } from '../config/schema.js';
import { startOfMinute } from '../time.js';
import { classifyUrl, newRow, spreadDue, type ScheduleRow } from './rules.js';

/** One URL as a sitemap lists it. */
export interface SitemapItem {
  url: string;
  /** The sitemap's cadenceMs, else its changefreq's (already floored); undefined: the row's own or the default. */
  cadenceMs?: number;
  /** The `<lastmod>` as given (epoch ms), possibly in the future. */
  lastmod?: number;
}

/** What filing one listed URL did (the walk's figures and the URL counter count each). */
export const SITEMAP_OUTCOMES = [
  'filed',
  'linked',
  'updated',
  'changed',
  'unchanged',
  'otherSitemap',
] as const;
export type SitemapOutcome = (typeof SITEMAP_OUTCOMES)[number];

/** Every outcome at zero: the counts a batch or a walk starts from. */
export function noOutcomes(): Record<SitemapOutcome, number> {
  return Object.fromEntries(SITEMAP_OUTCOMES.map((o) => [o, 0])) as Record<SitemapOutcome, number>;
}

/**
 * Whether a `lastmod` marks the row changed: it is newer than the last one this row saw (once per new
 * lastmod) and, read as at most `now`, later than the row's last successful render. A row never rendered
 * has nothing stale to replace.
 */
function lastmodMarks(row: ScheduleRow, lastmod: number | undefined, now: number): boolean {
  if (lastmod === undefined || row.lastRenderedAt === null) return false;
  if (row.sitemapLastmod != null && lastmod <= row.sitemapLastmod) return false;
  return Math.min(lastmod, now) > row.lastRenderedAt;
}

/**
 * The row after `sitemapId` listed `item`, and what happened. A URL belongs to the first sitemap that
 * listed it: another sitemap's row is left alone. A row without a sitemap (a feeder's, or one unlinked)
 * is linked, taking the sitemap's cadence when the sitemap names one. `row` undefined: nothing to write.
 */
export function listedRow(
  existing: ScheduleRow | undefined,
  item: SitemapItem,
  sitemapId: string,
  now: number,
  config: QueueKeeperConfig,
): { row: ScheduleRow | undefined; outcome: SitemapOutcome } {
  if (existing === undefined) {
    const effectiveInterval = item.cadenceMs ?? null;
    const cadenceMs = classifyUrl(item.url, effectiveInterval, config).cadenceMs;
    const fields = { fromSitemap: true, effectiveInterval, verified: true };
    return {
      outcome: 'filed',
      row: {
        ...newRow(item.url, spreadDue(item.url, now, cadenceMs), fields),
        sitemapId,
        sitemapLastmod: item.lastmod ?? null,
      },
    };
  }
  const owner = existing.sitemapId ?? null;
  if (owner !== null && owner !== sitemapId) return { row: undefined, outcome: 'otherSitemap' };
  const linking = owner === null || !existing.fromSitemap;
  const effectiveInterval = item.cadenceMs ?? existing.effectiveInterval;
  const marks = lastmodMarks(existing, item.lastmod, now);
  const sitemapLastmod =
    item.lastmod !== undefined && (existing.sitemapLastmod == null || item.lastmod > existing.sitemapLastmod)
      ? item.lastmod
      : (existing.sitemapLastmod ?? null);
  const row: ScheduleRow = {
    ...existing,
    fromSitemap: true,
    verified: true,
    effectiveInterval,
    sitemapId,
    sitemapLastmod,
  };
  if (marks) {
    row.nextRenderTime = Math.min(existing.nextRenderTime, startOfMinute(now));
    row.changedAt = existing.changedAt ?? now;
  }
  const outcome: SitemapOutcome = linking
    ? 'linked'
    : marks
      ? 'changed'
      : effectiveInterval !== existing.effectiveInterval
        ? 'updated'
        : 'unchanged';
  const same =
    !linking &&
    !marks &&
    effectiveInterval === existing.effectiveInterval &&
    existing.verified &&
    sitemapLastmod === (existing.sitemapLastmod ?? null);
  return { row: same ? undefined : row, outcome };
}

/**
 * A row after it left `sitemapId`: unlinked (no longer from a sitemap, its own cadence kept), or left
 * alone (undefined) when another sitemap owns it or it is not from this one.
 */
export function unlinkedRow(existing: ScheduleRow, sitemapId: string): ScheduleRow | undefined {
  if ((existing.sitemapId ?? null) !== sitemapId) return undefined;
  return { ...existing, fromSitemap: false, sitemapId: null, sitemapLastmod: null };
}
