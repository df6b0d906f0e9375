// Render verdicts (docs/feeding.md, "What a result does to its row"): what a fleet's report says about the
// page, decided once for both fleet protocols after fencing. A redirect retires its row or strikes it, a
// noindex page is suppressed, a dead page is gone, an error the origin may recover from is a failure
// strike, and an indexable render is a success. Pure: util/schedule/rules.ts turns the verdict into the
// row to write, services/results/service.ts stores or deletes the page.
import type { QueueKeeperConfig } from '../config/schema.js';
import { startOfMinute } from '../time.js';
import { urlOfKey } from './rowKey.js';
import {
  afterFailure,
  afterSuccess,
  classifyUrl,
  newRow,
  type Outcome,
  type RenderError,
  type ScheduleRow,
} from './rules.js';
import type { Reason, RetireReason } from './rowState.js';

/** A result as the verdict reads it. */
export interface VerdictInput {
  outcome: Outcome;
  statusCode: number | null;
  /** Where a redirect landed (absolute), when the fleet says. */
  redirectedTo: string | null;
  reason: Reason | null;
  /** False when the fleet found the landed page not indexable; null when it does not say. */
  isIndexable: boolean | null;
}

export type Verdict =
  | { kind: 'success' }
  | { kind: 'failure' }
  /** A permanent redirect to another URL: the row retires, the destination may be filed. */
  | { kind: 'moved'; to: string | null }
  /** Any other redirect: a strike; enough of them in a row retire the row. */
  | { kind: 'redirect-strike' }
  | { kind: 'suppressed'; reason: Reason }
  | { kind: 'gone' };

/**
 * Statuses the origin may recover from (auth, timeouts, rate limits, server errors): always a failure
 * strike, never a suppression or a retirement, whatever the fleet's outcome says.
 */
export function recoverable(status: number | null): boolean {
  return (
    status === 401 ||
    status === 403 ||
    status === 408 ||
    status === 429 ||
    (status !== null && status >= 500 && status <= 599)
  );
}

/** A permanent redirect: the source is moved for good. */
const permanent = (status: number | null): boolean => status === 301 || status === 308;
/** A dead page: not found, or gone on purpose. */
const dead = (status: number | null): boolean => status === 404 || status === 410;

/**
 * The verdict on one result. `sameUrl` says whether a redirect's destination is the row's own URL (after
 * normalising, which the caller does): a redirect to itself is a plain render.
 */
export function verdictOf(r: VerdictInput, sameUrl: (to: string) => boolean): Verdict {
  if (recoverable(r.statusCode) || r.outcome === 'failed') return { kind: 'failure' };
  if (r.outcome === 'redirected') {
    if (r.redirectedTo !== null && sameUrl(r.redirectedTo)) return { kind: 'success' };
    if (permanent(r.statusCode)) return { kind: 'moved', to: r.redirectedTo };
    return { kind: 'redirect-strike' };
  }
  if (dead(r.statusCode)) return { kind: 'gone' };
  if (r.outcome === 'non-indexable' || r.isIndexable === false)
    return { kind: 'suppressed', reason: r.reason ?? 'noindex' };
  return { kind: 'success' };
}

/** What a verdict does: the row to write (null: the row retires), the lease, the page, the destination. */
export interface VerdictWrite {
  /** The row to write; null when it retires (deleted, with a retired entry). */
  row: ScheduleRow | null;
  /** The fast-retry lane keeps the lease until it expires (a failure only). */
  keepLease: boolean;
  /** What becomes of the stored page: a success stores the new one; a parked or retired row loses it. */
  page: 'store' | 'delete' | 'keep';
  retired: RetireReason | null;
}

export interface VerdictResult {
  completedAt: number;
  outcome: Outcome;
  statusCode: number | null;
  error: RenderError | null;
}

/** A row parked by a verdict (suppressed or gone) or struck by a redirect comes due again this way. */
function parked(
  existing: ScheduleRow,
  r: VerdictResult,
  dueAt: number,
  fields: Pick<ScheduleRow, 'state' | 'reason' | 'redirectStrikes' | 'suppressionStrikes'>,
): ScheduleRow {
  return {
    ...existing,
    ...fields,
    nextRenderTime: dueAt,
    urgentAt: null,
    changedAt: null,
    // A verdict is a render that reached the origin: the run of failures ends.
    strikes: 0,
    lastError: null,
    failingSince: null,
    lastOutcome: r.outcome,
    lastRenderedAt: r.completedAt,
    lastStatusCode: r.statusCode,
  };
}

/**
 * The row a verdict leaves (docs/feeding.md, "What a result does to its row"). Suppressed and gone rows
 * come due again at their recheck interval and retire at their strike limit; they share one strike
 * counter, as a page may turn from one to the other. A redirect strike comes due a cadence out.
 */
export function rowAfterVerdict(
  existing: ScheduleRow,
  v: Verdict,
  r: VerdictResult,
  config: QueueKeeperConfig,
): VerdictWrite {
  const cfg = config.render;
  const at = startOfMinute(r.completedAt);
  switch (v.kind) {
    case 'success':
      return {
        row: afterSuccess(existing, r.completedAt, 'rendered', r.statusCode, config),
        keepLease: false,
        page: 'store',
        retired: null,
      };
    case 'failure': {
      const f = afterFailure(existing, r.completedAt, r.statusCode, config, r.error);
      return { row: f.row, keepLease: f.keepLease, page: 'keep', retired: null };
    }
    case 'moved':
      return { row: null, keepLease: false, page: 'delete', retired: 'redirect' };
    case 'redirect-strike': {
      const redirectStrikes = existing.redirectStrikes + 1;
      if (redirectStrikes >= cfg.redirects.maxStrikes)
        return { row: null, keepLease: false, page: 'delete', retired: 'redirect-strikes' };
      const cadence = classifyUrl(urlOfKey(existing.cacheKey), existing.effectiveInterval, config).cadenceMs;
      return {
        row: parked(existing, r, at + cadence, {
          state: existing.state,
          reason: existing.reason,
          redirectStrikes,
          suppressionStrikes: existing.suppressionStrikes,
        }),
        keepLease: false,
        page: 'keep',
        retired: null,
      };
    }
    case 'suppressed':
    case 'gone': {
      const gone = v.kind === 'gone';
      const limits = gone ? cfg.gone : cfg.suppression;
      const suppressionStrikes = existing.suppressionStrikes + 1;
      if (suppressionStrikes >= limits.maxStrikes)
        return { row: null, keepLease: false, page: 'delete', retired: gone ? 'gone' : 'suppressed' };
      return {
        row: parked(existing, r, at + limits.recheckInterval, {
          state: gone ? 'gone' : 'suppressed',
          reason: gone ? 'http-error' : v.reason,
          redirectStrikes: 0,
          suppressionStrikes,
        }),
        keepLease: false,
        page: 'delete',
        retired: null,
      };
    }
  }
}

/** The row a permanent redirect files for its destination: due now, the source's cadence and sitemap flag. */
export function redirectDestination(source: ScheduleRow, url: string, now: number): ScheduleRow {
  return newRow(url, startOfMinute(now), {
    fromSitemap: source.fromSitemap,
    effectiveInterval: source.effectiveInterval,
    verified: source.verified,
  });
}
