// When sitemaps are walked again (docs/sitemaps.md "Refresh"): `sitemaps.refresh`, a cron expression read
// in `sitemaps.timezone`, as the wait until its next instant. Pure over the clock it is given; croner only
// computes instants here, it never arms a timer (the duty scheduler does).
import { cronOf } from '../config/cron.js';

export { cronProblem, timezoneProblem } from '../config/cron.js';

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
