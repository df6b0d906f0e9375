// The feeding and admin endpoints' bodies: a target list, a URL list, one URL. Each body's shape is the
// document's (docs/openapi.yaml); what a shape cannot say follows as named checks (a URL's bytes and
// parse, a due time against now, a cadence within the configured bounds). An envelope problem is a
// Problem and nothing is written; a per-item problem becomes an `{index, error}` rejection and the rest
// lands.
import { CONFIG_KEYS } from '../config/schema.js';
import { Problem, type Checked } from '../problem.js';
import { requestShape, type RequestShape } from '../requests/shape.js';
import { isWellFormed } from '../text.js';
import type { TargetInput } from './rules.js';

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

/** The document's request shapes these checks start from; a new documented field is accepted by them. */
export const TARGET_SHAPES = {
  /** POST /render_queue/targets: the envelope (each target is checked on its own). */
  targets: requestShape('fileTargets', 'body'),
  target: requestShape('fileTargets$targets', 'target'),
  /** DELETE /render_queue/targets: the envelope, and each URL on its own. */
  urls: { list: requestShape('deleteTargets', 'body'), item: requestShape('deleteTargets$urls', 'url') },
  /** POST /render_queue/discover. */
  discover: { list: requestShape('discoverUrls', 'body'), item: requestShape('discoverUrls$urls', 'url') },
  /** POST /prerender_admin/explain. */
  url: requestShape('explain', 'body', { url: 'invalid_url' }),
  /** POST /prerender_admin/revalidate. */
  revalidate: requestShape('revalidate', 'body', { url: 'invalid_url' }),
};

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

/**
 * The reason a cadence the schema vouched for (an integer) is refused, or null: its bounds are the
 * configured default cadence's, read from that key, so the two never disagree (the document's `minimum`
 * says the same number, and a test holds it to the key).
 */
export function cadenceProblem(ms: number): string | null {
  if (ms < MIN_CADENCE_MS || ms > MAX_CADENCE_MS)
    return `cadenceMs must be between ${MIN_CADENCE_MS} and ${MAX_CADENCE_MS}`;
  return null;
}

/** A target as the schema vouched for it. */
interface TargetFields {
  url: string;
  cadenceMs?: number | null;
  fromSitemap?: boolean | null;
  dueAt?: number | null;
  changed?: boolean | null;
}

function checkTarget(t: unknown, now: number, shape: RequestShape): string | TargetInput {
  const problem = shape.check(t);
  if (problem) return problem.message;
  const o = t as TargetFields;
  const up = urlProblem(o.url);
  if (up) return up;
  const out: TargetInput = { url: o.url };
  if (o.cadenceMs !== undefined && o.cadenceMs !== null) {
    const cp = cadenceProblem(o.cadenceMs);
    if (cp) return cp;
    out.cadenceMs = o.cadenceMs;
  }
  if (o.fromSitemap !== undefined && o.fromSitemap !== null) out.fromSitemap = o.fromSitemap;
  if (o.dueAt !== undefined && o.dueAt !== null) {
    if (o.dueAt < MIN_DUE_AT || o.dueAt > now + MAX_DUE_AHEAD_MS)
      return `dueAt must be an epoch time in ms from 2000-01-01 (${MIN_DUE_AT}) to ten years from now`;
    out.dueAt = o.dueAt;
  }
  if (o.changed !== undefined && o.changed !== null) out.changed = o.changed;
  return out;
}

export interface CheckedTargets {
  accepted: Array<{ index: number; target: TargetInput }>;
  rejected: Rejection[];
}

/** `now` bounds `dueAt` (at most ten years ahead). */
export function checkTargetsBody(
  body: unknown,
  now: number,
  shapes: Pick<typeof TARGET_SHAPES, 'targets' | 'target'> = TARGET_SHAPES,
): Checked<CheckedTargets> {
  if (Array.isArray((body as { targets?: unknown } | null)?.targets)) {
    const n = (body as { targets: unknown[] }).targets.length;
    // Counted before the shape, which says the same: a larger batch is its own code (413).
    if (n > MAX_TARGETS_PER_CALL)
      return new Problem('too_many_targets', `at most ${MAX_TARGETS_PER_CALL} targets per call, got ${n}`);
  }
  const problem = shapes.targets.check(body);
  if (problem) return problem;
  const accepted: CheckedTargets['accepted'] = [];
  const rejected: Rejection[] = [];
  // Within one batch the last entry for a URL wins, as if they were filed one after another.
  (body as { targets: unknown[] }).targets.forEach((t, index) => {
    const r = checkTarget(t, now, shapes.target);
    if (typeof r === 'string') rejected.push({ index, error: r });
    else accepted.push({ index, target: r });
  });
  return { accepted, rejected };
}

/** A URL list's shapes: the envelope, and the item each URL is checked against on its own. */
export interface UrlListShapes {
  list: RequestShape;
  item: RequestShape;
}

export function checkUrlList(
  body: unknown,
  max = MAX_TARGETS_PER_CALL,
  shapes: UrlListShapes = TARGET_SHAPES.urls,
): Checked<{ urls: Array<{ index: number; url: string }>; rejected: Rejection[] }> {
  const list = (body as { urls?: unknown } | null)?.urls;
  if (Array.isArray(list) && list.length > max)
    return new Problem('too_many_urls', `at most ${max} urls per call, got ${list.length}`);
  const problem = shapes.list.check(body);
  if (problem) return problem;
  const urls: Array<{ index: number; url: string }> = [];
  const rejected: Rejection[] = [];
  (list as unknown[]).forEach((u: unknown, index) => {
    const p = shapes.item.check(u)?.message ?? urlProblem(u);
    if (p) rejected.push({ index, error: p });
    else urls.push({ index, url: u as string });
  });
  return { urls, rejected };
}

export function checkSingleUrl(body: unknown, shape: RequestShape = TARGET_SHAPES.url): Checked<string> {
  const problem = shape.check(body);
  if (problem) return problem;
  const url = (body as { url: string }).url;
  const p = urlProblem(url);
  return p ? new Problem('invalid_url', p) : url;
}
