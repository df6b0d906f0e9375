// Request-body checks for the feeding and admin endpoints. Envelope problems throw an HttpError
// (nothing is written); per-item problems become `{index, error}` rejections and the rest lands.
import { CONFIG_KEYS } from '../config/schema.js';
import { HttpError, badRequest, echo } from './errors.js';
import { isWellFormed } from '../text.js';
import type { TargetInput } from '../schedule/rules.js';

export const MAX_URL_BYTES = 1900;
const MAX_TARGETS_PER_CALL = 10_000;

// A row's own cadence obeys the same bounds as the configured default cadence: one number for both.
const CADENCE_KEY = CONFIG_KEYS.find((k) => k.path === 'render.defaultInterval')!;
export const MIN_CADENCE_MS = CADENCE_KEY.min!;
export const MAX_CADENCE_MS = CADENCE_KEY.max!;

// A due time is a moment a feeder means, not a sentinel: `dueAt: 0` would file a row due in 1970 whose
// lateness tops every score forever and reads as 20,000 days late. Anything before 2000 or more than
// ten years ahead is a typo or a unit mistake (seconds for ms) and is refused per item.
export const MIN_DUE_AT = Date.UTC(2000, 0, 1);
const MAX_DUE_AHEAD_MS = 3653 * 86_400_000;

export interface Rejection {
  index: number;
  error: string;
}

export function describeType(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'missing';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

/** Requires a plain object body whose fields are all known. */
export function requireObject(
  body: unknown,
  allowed: readonly string[],
  what = 'body',
): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw badRequest('invalid_body', `the ${what} must be a JSON object, not ${describeType(body)}`);
  const obj = body as Record<string, unknown>;
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) throw badRequest('unknown_field', `unknown field ${echo(k)} in the ${what}`);
  }
  return obj;
}

// C0, DEL and C1 controls and every Unicode space. None is a URL character, and a C1 control in a key
// reads as text in one tool and as a terminal escape in another.
const CONTROL_OR_SPACE = /[\s\u0000-\u001f\u007f-\u009f]/;
// `"` and `\` are not URL characters (RFC 3986), and they are the only accepted characters JSON
// escapes to two bytes: without them a URL's JSON form is its UTF-8 bytes plus two quotes, which is what
// lets a wake naming the longest URL fit its 4 KiB body (see util/notify/wakeBody.ts). `\` would also make
// two keys of one page: the WHATWG parser reads it as `/`.
const JSON_ESCAPED = /["\\]/;

/** The reason a URL is refused, or null when it is an acceptable cacheKey. */
export function urlProblem(url: unknown): string | null {
  if (typeof url !== 'string') return 'url must be a string';
  if (url.length === 0) return 'url must not be empty';
  if (!isWellFormed(url)) return 'url must be well-formed Unicode (it has a lone surrogate)';
  if (Buffer.byteLength(url, 'utf8') > MAX_URL_BYTES) return `url must be at most ${MAX_URL_BYTES} bytes`;
  if (CONTROL_OR_SPACE.test(url)) return 'url must not contain whitespace or control characters';
  if (JSON_ESCAPED.test(url)) return 'url must not contain " or \\ (percent-encode them)';
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'url must be an absolute http(s) URL';
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    return 'url must be an absolute http(s) URL';
  if (!parsed.hostname) return 'url must have a host';
  return null;
}

const TARGET_FIELDS = ['url', 'cadenceMs', 'fromSitemap', 'dueAt', 'changed'] as const;

function targetProblem(t: unknown, now: number): string | TargetInput {
  if (typeof t !== 'object' || t === null || Array.isArray(t))
    return `target must be an object, not ${describeType(t)}`;
  const o = t as Record<string, unknown>;
  for (const k of Object.keys(o))
    if (!(TARGET_FIELDS as readonly string[]).includes(k)) return `unknown field ${echo(k)}`;
  const up = urlProblem(o.url);
  if (up) return up;
  const out: TargetInput = { url: o.url as string };
  if (o.cadenceMs !== undefined && o.cadenceMs !== null) {
    if (typeof o.cadenceMs !== 'number' || !Number.isSafeInteger(o.cadenceMs))
      return 'cadenceMs must be an integer (ms)';
    if (o.cadenceMs < MIN_CADENCE_MS || o.cadenceMs > MAX_CADENCE_MS)
      return `cadenceMs must be between ${MIN_CADENCE_MS} and ${MAX_CADENCE_MS}`;
    out.cadenceMs = o.cadenceMs;
  }
  if (o.fromSitemap !== undefined && o.fromSitemap !== null) {
    if (typeof o.fromSitemap !== 'boolean') return 'fromSitemap must be a boolean';
    out.fromSitemap = o.fromSitemap;
  }
  if (o.dueAt !== undefined && o.dueAt !== null) {
    if (typeof o.dueAt !== 'number' || !Number.isFinite(o.dueAt))
      return 'dueAt must be a finite epoch time in ms';
    if (o.dueAt < MIN_DUE_AT || o.dueAt > now + MAX_DUE_AHEAD_MS)
      return `dueAt must be an epoch time in ms from 2000-01-01 (${MIN_DUE_AT}) to ten years from now`;
    out.dueAt = o.dueAt;
  }
  if (o.changed !== undefined && o.changed !== null) {
    if (typeof o.changed !== 'boolean') return 'changed must be a boolean';
    out.changed = o.changed;
  }
  return out;
}

export interface CheckedTargets {
  accepted: Array<{ index: number; target: TargetInput }>;
  rejected: Rejection[];
}

/** `now` bounds `dueAt` (at most ten years ahead). */
export function checkTargetsBody(body: unknown, now: number): CheckedTargets {
  const obj = requireObject(body, ['targets']);
  const list = obj.targets;
  if (!Array.isArray(list)) throw badRequest('invalid_body', 'targets must be an array');
  if (list.length > MAX_TARGETS_PER_CALL)
    throw new HttpError(
      413,
      'too_many_targets',
      `at most ${MAX_TARGETS_PER_CALL} targets per call, got ${list.length}`,
    );
  const accepted: CheckedTargets['accepted'] = [];
  const rejected: Rejection[] = [];
  // Within one batch the last entry for a URL wins, as if they were filed one after another.
  list.forEach((t, index) => {
    const r = targetProblem(t, now);
    if (typeof r === 'string') rejected.push({ index, error: r });
    else accepted.push({ index, target: r });
  });
  return { accepted, rejected };
}

export function checkUrlList(
  body: unknown,
  max = MAX_TARGETS_PER_CALL,
): { urls: Array<{ index: number; url: string }>; rejected: Rejection[] } {
  const obj = requireObject(body, ['urls']);
  if (!Array.isArray(obj.urls)) throw badRequest('invalid_body', 'urls must be an array of URLs');
  if (obj.urls.length > max)
    throw new HttpError(413, 'too_many_urls', `at most ${max} urls per call, got ${obj.urls.length}`);
  const urls: Array<{ index: number; url: string }> = [];
  const rejected: Rejection[] = [];
  obj.urls.forEach((u: unknown, index) => {
    const p = urlProblem(u);
    if (p) rejected.push({ index, error: p });
    else urls.push({ index, url: u as string });
  });
  return { urls, rejected };
}

export function checkSingleUrl(body: unknown): string {
  const obj = requireObject(body, ['url']);
  const p = urlProblem(obj.url);
  if (p) throw badRequest('invalid_url', p);
  return obj.url as string;
}
