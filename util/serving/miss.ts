// What a miss answers (docs/serving.md "Miss"), and whether a request may render now. Pure decisions;
// services/serving/service.ts carries them out.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { OnMiss } from '../config/shape.js';

export type MissAnswer = 'origin' | 'notFound' | 'expiredPage';

/** `serving.onMiss` applied: `stale` serves an expired page when there is one, else 404. */
export function missAnswer(policy: OnMiss, hasExpiredPage: boolean): MissAnswer {
  if (policy === 'origin') return 'origin';
  if (policy === 'stale' && hasExpiredPage) return 'expiredPage';
  return 'notFound';
}

/**
 * Whether `sent` is the render-now token, in time that does not depend on where they differ: both are
 * hashed first, so even their lengths are compared in constant time. An empty token matches nothing.
 */
export function tokenMatches(sent: string | null | undefined, token: string): boolean {
  if (token === '' || sent === null || sent === undefined || sent === '') return false;
  const a = createHash('sha256').update(sent).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b);
}

export type RenderNowVerdict =
  /** Not asked (no header), off, or the wrong token: the miss policy answers, nothing is rendered. */
  | 'no'
  /** Asked for a URL without a servable row: render-now never files a URL. */
  | 'noRow'
  | 'render';

export function renderNowVerdict(opts: {
  enabled: boolean;
  token: string;
  sent: string | null | undefined;
  hasRow: boolean;
}): RenderNowVerdict {
  if (!opts.enabled || !tokenMatches(opts.sent, opts.token)) return 'no';
  return opts.hasRow ? 'render' : 'noRow';
}
