// Every scheduling rule (docs/feeding.md) as pure functions over plain rows. The schedule owner
// (services/schedule/store.ts) reads a row, calls one of these, and writes the whole result back:
// a write replaces the row, so every function returns every scheduling field explicitly.
import type { QueueKeeperConfig, RouteConfig } from '../config/schema.js';
import { startOfMinute } from '../time.js';
import { simplePathname } from './urlPath.js';
import { urlOfKey } from './rowKey.js';
import { knownReason, storedState, type Reason, type RowState } from './rowState.js';

export interface ScheduleRow {
  /** The row's key, `<url>|<device>` (./rowKey.ts). */
  cacheKey: string;
  nextRenderTime: number;
  fromSitemap: boolean;
  effectiveInterval: number | null;
  verified: boolean;
  urgentAt: number | null;
  changedAt: number | null;
  strikes: number;
  lastOutcome: string | null;
  lastRenderedAt: number | null;
  lastStatusCode: number | null;
  /** The last failure's error, cut to MAX_ERROR_CHARS; null after a success or with no detail. */
  lastError: RenderError | null;
  /** When the current run of strikes began; null while the row is not failing. */
  failingSince: number | null;
  /** active, or parked by a verdict as not indexable (suppressed) or dead at its origin (gone). */
  state: RowState;
  /** Why a suppressed or gone row is, as the fleet reported it; null while active. */
  reason: Reason | null;
  /** Consecutive non-permanent redirects. */
  redirectStrikes: number;
  /** Consecutive suppressed or gone verdicts. */
  suppressionStrikes: number;
  /** The sitemap that owns the row (docs/sitemaps.md); absent or null when none does. */
  sitemapId?: string | null;
  /** The newest `<lastmod>` the owning sitemap gave for the row (epoch ms, as given). */
  sitemapLastmod?: number | null;
}

/** The verdict fields of a row that has had none: active, no strikes. */
export const ACTIVE = { state: 'active', reason: null, redirectStrikes: 0, suppressionStrikes: 0 } as const;

/** What a renderer said went wrong, as the row keeps it (docs/operating.md "Failing rows"). */
export interface RenderError {
  name: string | null;
  message: string | null;
}

/** A stored error's name and message are cut to this many characters each. */
export const MAX_ERROR_CHARS = 500;

/** The error as a row keeps it: strings cut to MAX_ERROR_CHARS, null when it says nothing. */
export function keptError(e: RenderError | null | undefined): RenderError | null {
  if (!e || (e.name === null && e.message === null)) return null;
  const cut = (v: string | null) =>
    v === null ? null : v.length > MAX_ERROR_CHARS ? v.slice(0, MAX_ERROR_CHARS) : v;
  return { name: cut(e.name), message: cut(e.message) };
}

export interface TargetInput {
  url: string;
  cadenceMs?: number;
  fromSitemap?: boolean;
  dueAt?: number;
  changed?: boolean;
}

export type Outcome = 'rendered' | 'failed' | 'redirected' | 'non-indexable';

/**
 * A 52-bit FNV-1a style hash of the URL. It only spreads new rows over their cadence, so it must be
 * deterministic (re-filing a URL lands on the same minute) and wide enough for cadences of months.
 */
function spreadHash(url: string): number {
  let h1 = 0x811c9dc5;
  let h2 = 0x01000193 ^ 0x5bd1e995;
  for (let i = 0; i < url.length; i++) {
    const c = url.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193);
    h2 = Math.imul(h2 ^ c, 0x5bd1e995);
  }
  return (h1 >>> 0) * 0x100000 + ((h2 >>> 0) & 0xfffff);
}

/** The pathname used for route matching; an unparsable URL matches no route. */
function pathnameOf(url: string): string | null {
  const simple = simplePathname(url);
  if (simple !== undefined) return simple;
  try {
    return new URL(url).pathname;
  } catch {
    return null;
  }
}

function matchRoute(url: string, routes: readonly RouteConfig[]): RouteConfig | null {
  if (routes.length === 0) return null;
  const path = pathnameOf(url);
  if (path === null) return null;
  for (const r of routes) {
    if (r.match === 'exact' ? path === r.path : path.startsWith(r.path)) return r;
  }
  return null;
}

/** A row's queue: its route's name, `unrouted` when none matches. */
export function queueOf(url: string, routes: readonly RouteConfig[]): string {
  return matchRoute(url, routes)?.name ?? 'unrouted';
}

/**
 * A row's queue and cadence from one route match. Cadence: the matching route's renderInterval, else
 * the row's own, else render.defaultInterval.
 */
export function classifyUrl(
  url: string,
  rowInterval: number | null | undefined,
  config: QueueKeeperConfig,
): { route: string; cadenceMs: number } {
  const route = matchRoute(url, config.render.routes);
  const cadenceMs =
    route?.renderInterval ??
    (typeof rowInterval === 'number' && rowInterval > 0 ? rowInterval : config.render.defaultInterval);
  return { route: route?.name ?? 'unrouted', cadenceMs };
}

/** New rows spread deterministically over one cadence so a bulk filing does not all come due at once. */
export function spreadDue(url: string, now: number, cadenceMs: number): number {
  return startOfMinute(now + (spreadHash(url) % Math.max(1, cadenceMs)));
}

function isDueNow(row: ScheduleRow, now: number): boolean {
  return row.nextRenderTime <= now;
}

/** Filing through /render_queue/targets (verified). */
export function upsertTarget(
  existing: ScheduleRow | undefined,
  t: TargetInput,
  now: number,
  config: QueueKeeperConfig,
): ScheduleRow {
  const effectiveInterval = t.cadenceMs ?? existing?.effectiveInterval ?? null;
  const fromSitemap = t.fromSitemap ?? existing?.fromSitemap ?? false;
  let nextRenderTime: number;
  let urgentAt = existing?.urgentAt ?? null;
  let changedAt = existing?.changedAt ?? null;
  if (!existing) {
    nextRenderTime =
      t.dueAt !== undefined
        ? startOfMinute(t.dueAt)
        : spreadDue(t.url, now, classifyUrl(t.url, effectiveInterval, config).cadenceMs);
    if (t.dueAt !== undefined && t.dueAt <= now) urgentAt = now;
  } else if (t.dueAt !== undefined && t.dueAt <= now) {
    // Never demote: filing due-now keeps an earlier due time and the marks already there.
    nextRenderTime = Math.min(existing.nextRenderTime, startOfMinute(t.dueAt));
    urgentAt = existing.urgentAt ?? now;
  } else if (t.dueAt !== undefined) {
    const markedDueNow =
      isDueNow(existing, now) && (existing.urgentAt !== null || existing.changedAt !== null);
    // A future due time is the feeder's explicit intent, except that it never pushes back a row someone
    // asked for now (urgent or changed and already due).
    nextRenderTime = markedDueNow ? existing.nextRenderTime : startOfMinute(t.dueAt);
    if (!markedDueNow) urgentAt = null;
  } else {
    nextRenderTime = existing.nextRenderTime;
  }
  if (t.changed) {
    nextRenderTime = Math.min(nextRenderTime, startOfMinute(now));
    changedAt = changedAt ?? now;
  }
  return {
    cacheKey: t.url,
    nextRenderTime,
    fromSitemap,
    effectiveInterval,
    verified: true,
    urgentAt,
    changedAt,
    strikes: existing?.strikes ?? 0,
    lastOutcome: existing?.lastOutcome ?? null,
    lastRenderedAt: existing?.lastRenderedAt ?? null,
    lastStatusCode: existing?.lastStatusCode ?? null,
    lastError: existing?.lastError ?? null,
    failingSince: existing?.failingSince ?? null,
    state: existing?.state ?? 'active',
    reason: existing?.reason ?? null,
    redirectStrikes: existing?.redirectStrikes ?? 0,
    suppressionStrikes: existing?.suppressionStrikes ?? 0,
    ...sitemapFields(existing),
  };
}

/** A feeder's write keeps the row's sitemap link (only a walk links or unlinks). */
function sitemapFields(existing: ScheduleRow | undefined): Pick<ScheduleRow, 'sitemapId' | 'sitemapLastmod'> {
  if (existing?.sitemapId == null) return {};
  return { sitemapId: existing.sitemapId, sitemapLastmod: existing.sitemapLastmod ?? null };
}

/** A row never rendered: no marks, no history, active; the scheduling fields are the caller's. */
export function newRow(
  url: string,
  nextRenderTime: number,
  fields: Pick<ScheduleRow, 'fromSitemap' | 'effectiveInterval' | 'verified'>,
): ScheduleRow {
  return {
    cacheKey: url,
    nextRenderTime,
    ...fields,
    urgentAt: null,
    changedAt: null,
    strikes: 0,
    lastOutcome: null,
    lastRenderedAt: null,
    lastStatusCode: null,
    lastError: null,
    failingSince: null,
    ...ACTIVE,
  };
}

/**
 * A new device's row of a URL, made from the row of another device (docs/feeding.md "Devices"): the same
 * due minute, cadence, sitemap link and verified flag; no render history, active.
 */
export function siblingRow(source: ScheduleRow): ScheduleRow {
  const row = newRow(source.cacheKey, source.nextRenderTime, {
    fromSitemap: source.fromSitemap,
    effectiveInterval: source.effectiveInterval,
    verified: source.verified,
  });
  if (source.sitemapId != null) {
    row.sitemapId = source.sitemapId;
    row.sitemapLastmod = source.sitemapLastmod ?? null;
  }
  return row;
}

/** Filing through /render_queue/discover: only when absent, never verified. */
export function discoveredRow(url: string, now: number, config: QueueKeeperConfig): ScheduleRow {
  const due = spreadDue(url, now, classifyUrl(url, null, config).cadenceMs);
  return newRow(url, due, { fromSitemap: false, effectiveInterval: null, verified: false });
}

/** An operator's revalidate: due now and urgent, never demoting an earlier due time. */
export function revalidatedRow(existing: ScheduleRow, now: number): ScheduleRow {
  return {
    ...existing,
    nextRenderTime: Math.min(existing.nextRenderTime, startOfMinute(now)),
    urgentAt: existing.urgentAt ?? now,
  };
}

/**
 * After a successful (indexable) render: startOfMinute(completion) + cadence; strikes reset; marks
 * cleared; a suppressed or gone row is active again.
 */
export function afterSuccess(
  existing: ScheduleRow,
  completedAt: number,
  outcome: Outcome,
  statusCode: number | null,
  config: QueueKeeperConfig,
): ScheduleRow {
  const cadence = classifyUrl(urlOfKey(existing.cacheKey), existing.effectiveInterval, config).cadenceMs;
  return {
    ...existing,
    nextRenderTime: startOfMinute(completedAt) + cadence,
    urgentAt: null,
    changedAt: null,
    strikes: 0,
    lastOutcome: outcome,
    lastRenderedAt: completedAt,
    lastStatusCode: statusCode,
    lastError: null,
    failingSince: null,
    ...ACTIVE,
  };
}

/**
 * Delay after the n-th consecutive failure, or null for the fast-retry lane (the row is left where it
 * is and the lease, kept until it expires, paces the retry).
 * max(cadence, min(cadence × factor^k × penalty, maxBackoff)), k = strikes − fastRetries − 1; the
 * penalty applies to non-sitemap rows once k > 0 — a failing page never comes due more often than a
 * healthy one.
 */
export function failureDelay(
  strikes: number,
  cadenceMs: number,
  fromSitemap: boolean,
  retry: QueueKeeperConfig['render']['failureRetry'],
): number | null {
  if (strikes <= retry.fastRetries) return null;
  const k = strikes - retry.fastRetries - 1;
  const penalty = !fromSitemap && k > 0 ? retry.nonSitemapPenalty : 1;
  const raw = cadenceMs * Math.pow(retry.backoffFactor, k) * penalty;
  return Math.max(cadenceMs, Math.min(raw, retry.maxBackoff));
}

export interface FailureResult {
  row: ScheduleRow;
  /** true: fast lane, keep the lease until it expires; false: rescheduled, release the lease. */
  keepLease: boolean;
}

export function afterFailure(
  existing: ScheduleRow,
  failedAt: number,
  statusCode: number | null,
  config: QueueKeeperConfig,
  error: RenderError | null = null,
): FailureResult {
  const strikes = existing.strikes + 1;
  const cadence = classifyUrl(urlOfKey(existing.cacheKey), existing.effectiveInterval, config).cadenceMs;
  const delay = failureDelay(strikes, cadence, existing.fromSitemap, config.render.failureRetry);
  const base = {
    ...existing,
    strikes,
    lastOutcome: 'failed',
    lastStatusCode: statusCode,
    lastError: keptError(error),
    failingSince: existing.failingSince ?? failedAt,
  };
  if (delay === null) return { row: base, keepLease: true };
  // The urgent request has been served (it failed); a changed mark stays until a render succeeds.
  return {
    row: { ...base, nextRenderTime: startOfMinute(failedAt) + delay, urgentAt: null },
    keepLease: false,
  };
}

/** Normalises a stored record (frozen, possibly with missing fields) into a ScheduleRow. */
export function toScheduleRow(key: string, v: Record<string, unknown>): ScheduleRow | undefined {
  if (typeof v.nextRenderTime !== 'number') return undefined;
  const num = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : null);
  const row: ScheduleRow = {
    cacheKey: key,
    nextRenderTime: v.nextRenderTime,
    fromSitemap: v.fromSitemap === true,
    effectiveInterval: num(v.effectiveInterval),
    verified: v.verified !== false,
    urgentAt: num(v.urgentAt),
    changedAt: num(v.changedAt),
    strikes: num(v.strikes) ?? 0,
    lastOutcome: typeof v.lastOutcome === 'string' ? v.lastOutcome : null,
    lastRenderedAt: num(v.lastRenderedAt),
    lastStatusCode: num(v.lastStatusCode),
    lastError: storedError(v.lastError),
    failingSince: num(v.failingSince),
    state: storedState(v.state),
    reason: knownReason(v.reason),
    redirectStrikes: num(v.redirectStrikes) ?? 0,
    suppressionStrikes: num(v.suppressionStrikes) ?? 0,
  };
  // Only a sitemap's row carries these, so every other row keeps its stored shape.
  if (typeof v.sitemapId === 'string') {
    row.sitemapId = v.sitemapId;
    row.sitemapLastmod = num(v.sitemapLastmod);
  }
  return row;
}

function storedError(v: unknown): RenderError | null {
  if (typeof v !== 'object' || v === null) return null;
  const e = v as Record<string, unknown>;
  const str = (x: unknown) => (typeof x === 'string' ? x : null);
  return keptError({ name: str(e.name), message: str(e.message) });
}

export function sameSchedule(a: ScheduleRow, b: ScheduleRow): boolean {
  return (
    a.nextRenderTime === b.nextRenderTime &&
    a.fromSitemap === b.fromSitemap &&
    a.effectiveInterval === b.effectiveInterval &&
    a.verified === b.verified &&
    a.urgentAt === b.urgentAt &&
    a.changedAt === b.changedAt &&
    a.strikes === b.strikes &&
    a.lastOutcome === b.lastOutcome &&
    a.lastRenderedAt === b.lastRenderedAt &&
    a.lastStatusCode === b.lastStatusCode &&
    a.failingSince === b.failingSince &&
    a.lastError?.name === b.lastError?.name &&
    a.lastError?.message === b.lastError?.message &&
    a.state === b.state &&
    a.reason === b.reason &&
    a.redirectStrikes === b.redirectStrikes &&
    a.suppressionStrikes === b.suppressionStrikes &&
    (a.sitemapId ?? null) === (b.sitemapId ?? null) &&
    (a.sitemapLastmod ?? null) === (b.sitemapLastmod ?? null)
  );
}
