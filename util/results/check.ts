// The checks a result passes before anything is written (docs/fleets.md, docs/prerender-fleet.md): the
// token protocol's JSON result, and its raw-bytes framing (metadata, then the page). Pure: a result that
// fails answers a 4xx naming the field, and nothing is written. services/results/service.ts applies what
// passes.
import { HttpError } from '../http/errors.js';
import { describeType, requireObject } from '../http/input.js';
import { isWellFormed, utf8Text } from '../text.js';
import type { PRERENDER_RESULTS } from '../metrics/catalogue.js';
import { splitFrame } from '../prerender/result.js';
import type { Outcome, RenderError } from '../schedule/rules.js';

const OUTCOMES: readonly Outcome[] = ['rendered', 'failed', 'redirected', 'non-indexable'];
const RESULT_FIELDS: readonly string[] = [
  'id',
  'leaseToken',
  'outcome',
  'statusCode',
  'renderTimeMs',
  'contentType',
  'body',
  'error',
  'redirectedTo',
  'reason',
  'isIndexable',
];

/** Why a render came to its outcome, as a fleet reports it with the result. */
export const RESULT_REASONS = [
  'noindex',
  'canonical-mismatch',
  'canonical-variant',
  'http-error',
  'redirect-loop',
  'redirect',
  'error',
] as const;
export type ResultReason = (typeof RESULT_REASONS)[number];

/** A redirect target is a URL a page could carry: the same byte limit as a target's URL. */
export const MAX_REDIRECT_BYTES = 1900;

export interface CheckedResult {
  id: string;
  leaseToken: string;
  outcome: Outcome;
  statusCode: number | null;
  contentType: string | null;
  body: string | null;
  /** The allow-listed response headers stored with the page (prerender fleets send them). */
  headers?: Record<string, string> | null;
  /** What went wrong, kept on the row as lastError when the outcome is a failure. */
  error?: RenderError | null;
  /** Where the page redirected to: an absolute http(s) URL. Kept for the render's verdict. */
  redirectedTo?: string | null;
  /** Why the render came to its outcome. Kept for the render's verdict. */
  reason?: ResultReason | null;
  /** Whether the rendered page may be indexed. Kept for the render's verdict. */
  isIndexable?: boolean | null;
}

/** What a prerender fleet's result came to: the `x-result-status` of its 204 (docs/prerender-fleet.md). */
export type FleetResultStatus = (typeof PRERENDER_RESULTS)[number];

export function tooLarge(maxBodyBytes: number): HttpError {
  return new HttpError(
    413,
    'payload_too_large',
    `body is larger than render.maxBodyBytes (${maxBodyBytes} bytes)`,
  );
}

/** The offset where the first ill-formed UTF-8 sequence starts (Unicode 15 table 3-7), for the error. */
function firstBadUtf8(b: Uint8Array): number {
  let i = 0;
  while (i < b.length) {
    const c = b[i]!;
    if (c < 0x80) {
      i++;
      continue;
    }
    let n: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 1;
    else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c === 0xe0) lo = 0xa0;
      if (c === 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c === 0xf0) lo = 0x90;
      if (c === 0xf4) hi = 0x8f;
    } else return i;
    for (let k = 1; k <= n; k++) {
      const d = b[i + k];
      if (d === undefined || d < (k === 1 ? lo : 0x80) || d > (k === 1 ? hi : 0xbf)) return i;
    }
    i += n + 1;
  }
  return -1;
}

/**
 * A token-protocol result in the raw-bytes framing (docs/fleets.md): `x-metadata-size: n`, then n bytes
 * of the result as JSON without `body`, then the page itself. Same checks and limits as the JSON form.
 */
export function checkFramedResult(
  raw: Buffer,
  metadataSize: string | null | undefined,
  maxBodyBytes: number,
): CheckedResult {
  return checkFramedParts(splitFrame(raw, metadataSize), maxBodyBytes);
}

export function checkFramedParts(
  { meta, page }: { meta: unknown; page: Buffer },
  maxBodyBytes: number,
): CheckedResult {
  if (typeof meta === 'object' && meta !== null && 'body' in meta)
    throw new HttpError(
      400,
      'invalid_body',
      'the metadata must not carry body: the page follows it as raw bytes',
    );
  if (page.length > maxBodyBytes) throw tooLarge(maxBodyBytes);
  const checked = checkResult(meta, maxBodyBytes);
  let body: string | null = null;
  if (page.length > 0 || checked.outcome === 'rendered') {
    // A page is stored as text: bytes that are not UTF-8 would silently become U+FFFD, so the page
    // would not be what the fleet rendered. Refused instead, naming where it goes wrong.
    body = utf8Text(page);
    if (body === null)
      throw new HttpError(
        400,
        'invalid_body',
        `the page is not valid UTF-8 (first bad byte at offset ${firstBadUtf8(page)}); send it re-encoded as UTF-8`,
      );
  }
  return { ...checked, body };
}

const stringOrNull = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/** Validates one result; throws HttpError (400, or 413 for a body over `maxBodyBytes`). */
export function checkResult(input: unknown, maxBodyBytes: number): CheckedResult {
  const o = requireObject(input, RESULT_FIELDS, 'result');
  if (typeof o.id !== 'string' || o.id.length === 0)
    throw new HttpError(400, 'invalid_body', 'id must be the job id string');
  // The token is opaque: any string is well-formed here, and so is a number (the contract's
  // examples show one). One that is not a token we issued (ours are strings) is simply not the latest
  // grant: 409 superseded, not a 400.
  const token =
    typeof o.leaseToken === 'number' && Number.isFinite(o.leaseToken) ? String(o.leaseToken) : o.leaseToken;
  if (typeof token !== 'string' || token.length === 0 || token.length > 64)
    throw new HttpError(
      400,
      'invalid_body',
      `leaseToken must be the token the claim returned, not ${describeType(o.leaseToken)}`,
    );
  if (typeof o.outcome !== 'string' || !(OUTCOMES as readonly string[]).includes(o.outcome))
    throw new HttpError(400, 'invalid_body', `outcome must be one of ${OUTCOMES.join(', ')}`);
  if (
    o.statusCode !== undefined &&
    o.statusCode !== null &&
    (typeof o.statusCode !== 'number' ||
      !Number.isInteger(o.statusCode) ||
      o.statusCode < 0 ||
      o.statusCode > 999)
  )
    throw new HttpError(400, 'invalid_body', 'statusCode must be an integer HTTP status');
  if (
    o.renderTimeMs !== undefined &&
    o.renderTimeMs !== null &&
    (typeof o.renderTimeMs !== 'number' || !Number.isFinite(o.renderTimeMs) || o.renderTimeMs < 0)
  )
    throw new HttpError(400, 'invalid_body', 'renderTimeMs must be a non-negative number');
  if (o.contentType !== undefined && o.contentType !== null && typeof o.contentType !== 'string')
    throw new HttpError(400, 'invalid_body', 'contentType must be a string');
  if (o.body !== undefined && o.body !== null && typeof o.body !== 'string')
    throw new HttpError(400, 'invalid_body', 'body must be a string');
  if (o.error !== undefined && o.error !== null) {
    if (o.outcome !== 'failed')
      throw new HttpError(400, 'invalid_body', 'error is only allowed with outcome "failed"');
    const e = o.error as Record<string, unknown>;
    if (
      typeof e !== 'object' ||
      Array.isArray(e) ||
      Object.keys(e).some((k) => k !== 'name' && k !== 'message')
    )
      throw new HttpError(400, 'invalid_body', 'error must be {name, message}');
    for (const k of ['name', 'message'] as const) {
      if (e[k] !== undefined && e[k] !== null && typeof e[k] !== 'string')
        throw new HttpError(400, 'invalid_body', `error.${k} must be a string, not ${describeType(e[k])}`);
    }
  }
  const redirectedTo = o.redirectedTo ?? null;
  if (redirectedTo !== null && !isHttpUrl(redirectedTo))
    throw new HttpError(
      400,
      'invalid_body',
      `redirectedTo must be an absolute http(s) URL of at most ${MAX_REDIRECT_BYTES} bytes`,
    );
  const reason = o.reason ?? null;
  if (reason !== null && !(RESULT_REASONS as readonly unknown[]).includes(reason))
    throw new HttpError(400, 'invalid_body', `reason must be one of ${RESULT_REASONS.join(', ')}`);
  const isIndexable = o.isIndexable ?? null;
  if (isIndexable !== null && typeof isIndexable !== 'boolean')
    throw new HttpError(
      400,
      'invalid_body',
      `isIndexable must be true or false, not ${describeType(isIndexable)}`,
    );
  const body = typeof o.body === 'string' ? o.body : null;
  if (body !== null && Buffer.byteLength(body, 'utf8') > maxBodyBytes) throw tooLarge(maxBodyBytes);
  const e = o.error as { name?: unknown; message?: unknown } | null | undefined;
  return {
    error: e ? { name: stringOrNull(e.name), message: stringOrNull(e.message) } : null,
    id: o.id,
    leaseToken: token,
    outcome: o.outcome as Outcome,
    statusCode: typeof o.statusCode === 'number' ? o.statusCode : null,
    contentType: typeof o.contentType === 'string' ? o.contentType : null,
    body,
    redirectedTo: redirectedTo as string | null,
    reason: reason as ResultReason | null,
    isIndexable: isIndexable as boolean | null,
  };
}

function isHttpUrl(v: unknown): boolean {
  if (typeof v !== 'string' || !isWellFormed(v) || Buffer.byteLength(v, 'utf8') > MAX_REDIRECT_BYTES)
    return false;
  try {
    const u = new URL(v);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}
