// When sitemaps are walked again (docs/sitemaps.md "Refresh"): `sitemaps.refresh`, a cron expression read
// in `sitemaps.timezone`, as the wait until its next instant. Pure over the clock it is given; croner only
// computes instants here, it never arms a timer (the duty scheduler does).
import { Cron } from 'croner';

function cronOf(expr: string, timezone: string): Cron {
  return new Cron(expr, { timezone, paused: true });
}

/** Why a cron expression is refused, or null (croner's own parser decides). */
export function cronProblem(expr: string): string | null {
  try {
    cronOf(expr, 'UTC').stop();
    return null;
  } catch (e) {
    return `is not a cron expression (${String((e as Error).message).slice(0, 120)})`;
  }
}

/** Why a time zone is refused, or null when Intl knows it. */
export function timezoneProblem(tz: string): string | null {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return null;
  } catch {
    return 'is not an IANA time zone (e.g. UTC, Europe/Berlin)';
  }
}

/** The next refresh instant strictly after `now` (epoch ms), or null when the expression has none. */
export function nextRefreshAt(expr: string, timezone: string, now: number): number | null {
  const c = cronOf(expr, timezone);
  const next = c.nextRun(new Date(now));
  c.stop();
  return next === null ? null : next.getTime();
}

/** The wait from `now` until the next refresh (ms), or null when there is none. */
export function refreshWait(expr: string, timezone: string, now: number): number | null {
  const at = nextRefreshAt(expr, timezone, now);
  return at === null ? null : Math.max(0, at - now);
}
