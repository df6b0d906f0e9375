// The claim-order score (docs/feeding.md, "Which due row goes first"). The keeper, the explain endpoint and
// the tests all call this one function, so a held row's published score and the score a reader recomputes can
// never drift apart.

/** A row's mark. Urgent wins over changed when both are set: the two head starts are never summed. */
export type Mark = 'urgent' | 'changed' | 'none';

export interface ScoreOptions {
  /** Multiplier on a sitemap row's lateness (`queue.ready.sitemapBoost`). */
  sitemapBoost: number;
  /** Added to an urgent row's score, in cadences, before the sitemap scaling below. */
  urgentHeadStart: number;
  /** Added to a changed row's score, in cadences, before the sitemap scaling below. */
  changedHeadStart: number;
}

export interface ScoreTarget {
  dueMs: number;
  cadenceMs: number;
  fromSitemap: boolean;
  mark: Mark;
}

export function markOf(urgentAt: number | null | undefined, changedAt: number | null | undefined): Mark {
  if (urgentAt !== null && urgentAt !== undefined) return 'urgent';
  if (changedAt !== null && changedAt !== undefined) return 'changed';
  return 'none';
}

/**
 * Lateness, not age: a row parked for a 7-day recheck enters at 0 and climbs like any other.
 * A marked row's head start is scaled by max(1, sitemapBoost) so that an urgent discovered row still
 * outranks an unmarked sitemap row of the same lateness; a boost below 1 never shrinks the head start.
 */
export function score(target: ScoreTarget, now: number, options: ScoreOptions): number {
  return scoreAt(target.dueMs, target.cadenceMs, target.fromSitemap, target.mark, now, options);
}

/** `score` with its target spread out, for the keeper's per-bucket loop (no object per bucket). */
export function scoreAt(
  dueMs: number,
  cadenceMs: number,
  fromSitemap: boolean,
  mark: Mark,
  now: number,
  options: ScoreOptions,
): number {
  if (!Number.isFinite(dueMs) || !Number.isFinite(now)) return 0;
  const lateness = Math.max(0, now - dueMs);
  // A NaN cadence fails `> 0` too: a broken cadence degrades to raw lateness instead of poisoning the heap.
  let value = cadenceMs > 0 ? lateness / cadenceMs : lateness;
  if (fromSitemap) value *= options.sitemapBoost;
  if (mark !== 'none') {
    const headStart = mark === 'urgent' ? options.urgentHeadStart : options.changedHeadStart;
    value += headStart * Math.max(1, options.sitemapBoost);
  }
  return value;
}
