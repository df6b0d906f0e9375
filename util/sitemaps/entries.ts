// What a sitemap entry's fields mean for the schedule (docs/sitemaps.md): `changefreq` as a cadence,
// `lastmod` as an instant, and whether a `<loc>` may be filed from this sitemap. Pure.
import { urlProblem } from '../schedule/targetChecks.js';

const HOUR = 3_600_000;
const DAY = 86_400_000;

/** sitemaps.org's changefreq values as cadences; `always` cannot be met by a render queue, so it is hourly. */
const CHANGEFREQ_MS: Readonly<Record<string, number>> = {
  always: HOUR,
  hourly: HOUR,
  daily: DAY,
  weekly: 7 * DAY,
  monthly: 30 * DAY,
  yearly: 365 * DAY,
  never: 365 * DAY,
};

/**
 * The cadence `changefreq` asks for, floored at `minCadenceMs` (sitemaps.minCadence), or undefined for a
 * missing or unknown value (then the row's cadence falls to render.defaultInterval).
 */
export function changefreqCadence(changefreq: string | undefined, minCadenceMs: number): number | undefined {
  if (changefreq === undefined) return undefined;
  const ms = CHANGEFREQ_MS[changefreq.trim().toLowerCase()];
  return ms === undefined ? undefined : Math.max(ms, minCadenceMs);
}

// W3C Datetime as sitemaps.org allows it: YYYY, YYYY-MM, YYYY-MM-DD, or a date with time and zone.
const W3C_DATETIME =
  /^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}:\d{2})?)?)?)?$/;

/** A `<lastmod>` as epoch ms, or undefined when it is not a W3C datetime (then it is ignored). */
export function parseLastmod(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const m = W3C_DATETIME.exec(text.trim());
  if (m === null) return undefined;
  const [, y, mo = '01', d = '01', h, mi, s = '00', frac, zone] = m;
  // A time without a zone is read as UTC: the protocol requires one, and UTC is the least surprising guess.
  const iso = `${y}-${mo}-${d}T${h ?? '00'}:${mi ?? '00'}:${s}${frac ? '.' + frac.slice(0, 3) : ''}${zone ?? 'Z'}`;
  const ms = Date.parse(iso);
  return Number.isFinite(ms) ? ms : undefined;
}

/** `URL.host` (port included) of a URL, or null when it does not parse. */
export function hostOf(url: string): string | null {
  try {
    return new URL(url).host.toLowerCase();
  } catch {
    return null;
  }
}

/** Whether `url` is on the sitemap's host or on one of `allowHosts` (each `host` or `host:port`). */
export function onAllowedHost(url: string, rootHost: string, allowHosts: readonly string[]): boolean {
  const host = hostOf(url);
  if (host === null) return false;
  return host === rootHost || allowHosts.some((h) => h.toLowerCase() === host);
}

/** Why a `<loc>` is not filed, or null: the target check of POST /render_queue/targets, then the host. */
export function locProblem(loc: string, rootHost: string, allowHosts: readonly string[]): string | null {
  const p = urlProblem(loc);
  if (p !== null) return p;
  if (!onAllowedHost(loc, rootHost, allowHosts)) return "url is not on the sitemap's host";
  return null;
}
