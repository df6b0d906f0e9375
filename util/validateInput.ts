// Request-body checks for the feeding and admin endpoints. Envelope problems throw an HttpError
// (nothing is written); per-item problems become `{index, error}` rejections and the rest lands.
import { HttpError, badRequest } from './httpError.js';
import type { TargetInput } from './scheduleRules.js';

export const MAX_URL_BYTES = 1900;
export const MAX_TARGETS_PER_CALL = 10_000;
const MIN_CADENCE_MS = 60_000;
const MAX_CADENCE_MS = 365 * 86_400_000;
// Due times beyond year 2100 are refused as typos rather than parked forever.
const MAX_DUE_AT = 4_102_444_800_000;

export interface Rejection {
  index: number;
  error: string;
}

export function describeType(v: unknown): string {
  if (v === null) return 'null';
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
    if (!allowed.includes(k)) throw badRequest('unknown_field', `unknown field "${k}" in the ${what}`);
  }
  return obj;
}

/** The reason a URL is refused, or null when it is an acceptable cacheKey. */
export function urlProblem(url: unknown): string | null {
  if (typeof url !== 'string') return 'url must be a string';
  if (url.length === 0) return 'url must not be empty';
  if (Buffer.byteLength(url, 'utf8') > MAX_URL_BYTES) return `url must be at most ${MAX_URL_BYTES} bytes`;
  if (/[\s\u0000-\u001f\u007f]/.test(url)) return 'url must not contain whitespace or control characters';
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

function targetProblem(t: unknown): string | TargetInput {
  if (typeof t !== 'object' || t === null || Array.isArray(t))
    return `target must be an object, not ${describeType(t)}`;
  const o = t as Record<string, unknown>;
  for (const k of Object.keys(o))
    if (!(TARGET_FIELDS as readonly string[]).includes(k)) return `unknown field "${k}"`;
  const up = urlProblem(o.url);
  if (up) return up;
  const out: TargetInput = { url: o.url as string };
  if (o.cadenceMs !== undefined && o.cadenceMs !== null) {
    if (typeof o.cadenceMs !== 'number' || !Number.isInteger(o.cadenceMs))
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
    if (typeof o.dueAt !== 'number' || !Number.isFinite(o.dueAt) || o.dueAt < 0 || o.dueAt > MAX_DUE_AT)
      return 'dueAt must be an epoch time in ms';
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

export function checkTargetsBody(body: unknown): CheckedTargets {
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
    const r = targetProblem(t);
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
