// Cron expressions and time zones as configuration values (the `cron` and `timezone` kinds of
// util/config/keys.ts): croner's own parser and Intl decide what is valid, so a value the config accepts
// is one the sitemap refresh (util/sitemaps/refreshPlan.ts) can always schedule by.
import { Cron } from 'croner';

/** A paused Cron over `expr` in `timezone`: it computes instants only, never arms a timer. */
export function cronOf(expr: string, timezone: string): Cron {
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
