// Whether a stored page is served, and as what: fresh until its row's next render time, stale for
// `serving.staleWhileRevalidate` after it, expired after that (docs/serving.md). Pure, clock passed in.

/** The fields of a schedule row serving reads. */
export interface ServingRow {
  nextRenderTime: number;
  urgentAt: number | null;
  /** `active` (or absent) rows are served; `suppressed` and `gone` rows never are. */
  state?: string | null;
}

export type Freshness = 'fresh' | 'stale' | 'expired';

/** A row whose page may be served at all: a suppressed or gone row is a miss whatever is stored. */
export function servable(row: ServingRow | undefined): row is ServingRow {
  if (row === undefined) return false;
  return row.state === undefined || row.state === null || row.state === 'active';
}

export function freshness(row: ServingRow, now: number, staleWindowMs: number): Freshness {
  if (now < row.nextRenderTime) return 'fresh';
  return now < row.nextRenderTime + staleWindowMs ? 'stale' : 'expired';
}

/**
 * Whether a stale hit should make the row urgent: once per window. A row already urgent (a crawler or
 * an operator asked before, and the render has not landed) needs no second write; the render clears
 * the mark and moves the next render time ahead, which ends the window.
 */
export function needsUrgentMark(row: ServingRow): boolean {
  return row.urgentAt === null;
}

/** The `age` header: whole seconds since the page was rendered, never negative. */
export function ageSeconds(renderedAt: number | null, now: number): number {
  if (renderedAt === null) return 0;
  return Math.max(0, Math.floor((now - renderedAt) / 1000));
}

/**
 * Whether a write of a row that render-now waits on says its render ended without a page: a result
 * reschedules the row past now (the render-now mark itself leaves it due, at or before now), and only a
 * `rendered` outcome stores a page, which its own write announces (the row is written first).
 */
export function renderEndedWithoutPage(
  row: { nextRenderTime: unknown; lastOutcome: unknown },
  now: number,
): boolean {
  return typeof row.nextRenderTime === 'number' && row.nextRenderTime > now && row.lastOutcome !== 'rendered';
}
