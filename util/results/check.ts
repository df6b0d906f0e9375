// The checks a result passes before anything is written (docs/fleets.md, docs/prerender-fleet.md): the
// token protocol's JSON result, and its raw-bytes framing (metadata, then the page). Pure: the result's
// shape is the document's (docs/openapi.yaml, TokenResult), then the named checks the shape cannot say;
// a result that fails is a Problem naming the field, and nothing is written. services/results/service.ts
// applies what passes.
import { Problem, isProblem, type Checked } from '../problem.js';
import { isWellFormed, utf8Text } from '../text.js';
import type { PRERENDER_RESULTS } from '../metrics/catalogue.js';
import { splitFrame } from '../prerender/result.js';
import { requestShape, type RequestShape } from '../requests/shape.js';
import type { Outcome, RenderError } from '../schedule/rules.js';

/** Why a render came to its outcome, as a fleet reports it with the result (TokenResult's `reason`). */
export type ResultReason =
  | 'noindex'
  | 'canonical-mismatch'
  | 'canonical-variant'
  | 'http-error'
  | 'redirect-loop'
  | 'redirect'
  | 'error';

/** A redirect target is a URL a page could carry: the same byte limit as a target's URL. */
export const MAX_REDIRECT_BYTES = 1900;

/** A token-protocol result as docs/openapi.yaml describes it (TokenResult). */
export const TOKEN_RESULT: RequestShape = requestShape('reportResult', 'result');

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
  /** The render time the fleet reported (ms), counted in queue_keeper_render_seconds. */
  renderTimeMs?: number | null;
}

/** What a prerender fleet's result came to: the `x-result-status` of its 204 (docs/prerender-fleet.md). */
export type FleetResultStatus = (typeof PRERENDER_RESULTS)[number];

export function tooLarge(maxBodyBytes: number): Problem {
  return new Problem('payload_too_large', `body is larger than render.maxBodyBytes (${maxBodyBytes} bytes)`);
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
): Checked<CheckedResult> {
  const frame = splitFrame(raw, metadataSize);
  return isProblem(frame) ? frame : checkFramedParts(frame, maxBodyBytes);
}

export function checkFramedParts(
  { meta, page }: { meta: unknown; page: Buffer },
  maxBodyBytes: number,
  shape: RequestShape = TOKEN_RESULT,
): Checked<CheckedResult> {
  if (typeof meta === 'object' && meta !== null && 'body' in meta)
    return new Problem('invalid_body', 'the metadata must not carry body: the page follows it as raw bytes');
  if (page.length > maxBodyBytes) return tooLarge(maxBodyBytes);
  const checked = checkResult(meta, maxBodyBytes, shape);
  if (isProblem(checked)) return checked;
  let body: string | null = null;
  if (page.length > 0 || checked.outcome === 'rendered') {
    // A page is stored as text: bytes that are not UTF-8 would silently become U+FFFD, so the page
    // would not be what the fleet rendered. Refused instead, naming where it goes wrong.
    body = utf8Text(page);
    if (body === null)
      return new Problem(
        'invalid_body',
        `the page is not valid UTF-8 (first bad byte at offset ${firstBadUtf8(page)}); send it re-encoded as UTF-8`,
      );
  }
  return { ...checked, body };
}

/** The shape of TokenResult, read as the schema has already vouched for it. */
interface ResultFields {
  id: string;
  leaseToken: string | number;
  outcome: Outcome;
  statusCode?: number | null;
  contentType?: string | null;
  body?: string | null;
  error?: { name?: string | null; message?: string | null } | null;
  redirectedTo?: string | null;
  reason?: ResultReason | null;
  isIndexable?: boolean | null;
  renderTimeMs?: number | null;
}

/**
 * Checks one result: its documented shape, then what the shape cannot say (a page over `maxBodyBytes`
 * is `payload_too_large`; `error` only with `failed`; `redirectedTo` within its bytes and parsing as an
 * http(s) URL). Fields the document adds are accepted and left out of the checked result.
 */
export function checkResult(
  input: unknown,
  maxBodyBytes: number,
  shape: RequestShape = TOKEN_RESULT,
): Checked<CheckedResult> {
  const problem = shape.check(input);
  if (problem) return problem;
  const o = input as ResultFields;
  if (o.error !== undefined && o.error !== null && o.outcome !== 'failed')
    return new Problem('invalid_body', 'error is only allowed with outcome "failed"');
  const redirectedTo = o.redirectedTo ?? null;
  if (redirectedTo !== null && !isHttpUrl(redirectedTo))
    return new Problem(
      'invalid_body',
      `redirectedTo must be an absolute http(s) URL of at most ${MAX_REDIRECT_BYTES} bytes`,
    );
  const body = o.body ?? null;
  if (body !== null && Buffer.byteLength(body, 'utf8') > maxBodyBytes) return tooLarge(maxBodyBytes);
  const e = o.error ?? null;
  return {
    error: e ? { name: e.name ?? null, message: e.message ?? null } : null,
    id: o.id,
    // The token is opaque: a number (the contract's examples show one) is not a token we issued (ours
    // are strings), so it is simply not the latest grant: 409 superseded, not a 400.
    leaseToken: String(o.leaseToken),
    outcome: o.outcome,
    statusCode: o.statusCode ?? null,
    contentType: o.contentType ?? null,
    body,
    redirectedTo,
    reason: o.reason ?? null,
    isIndexable: o.isIndexable ?? null,
    renderTimeMs: o.renderTimeMs ?? null,
  };
}

/** Well-formed, within its bytes, and an absolute http(s) URL once parsed. */
function isHttpUrl(v: string): boolean {
  if (!isWellFormed(v) || Buffer.byteLength(v, 'utf8') > MAX_REDIRECT_BYTES) return false;
  try {
    const u = new URL(v);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}
