// A prerender fleet's result (docs/prerender-fleet.md): the raw-bytes framing, its metadata as the fleet
// writes it, and the outcome that decides what happens to the row. Pure: the page bytes are decoded by
// util/prerender/page.ts, the lease and the row by services/results/service.ts. A malformed result is a
// Problem naming the field (services/http/ answers it 400).
import { Problem, type Checked } from '../problem.js';
import { requestShape, type RequestShape } from '../requests/shape.js';
import { echo, utf8Text } from '../text.js';
import { knownReason, type Reason } from '../schedule/rowState.js';

export type FleetOutcome = 'rendered' | 'redirected' | 'non-indexable' | 'error';
export type PageEncoding = 'gzip' | 'br' | 'identity';

/**
 * The response headers a stored page keeps: what a crawler-facing server needs to answer as the origin
 * did (validators, robots directives, links, caching, the type). Everything else the fleet sends is
 * dropped.
 */
export const STORED_HEADERS: readonly string[] = [
  'etag',
  'last-modified',
  'link',
  'x-robots-tag',
  'retry-after',
  'cache-control',
  'content-type',
  'vary',
];

/**
 * A stored header is replayed to crawlers by whatever serves the page, and rides in every replicated page
 * record: a value longer than this, or one no HTTP field can carry (CR, LF, NUL, a character above
 * U+00FF), is dropped rather than stored.
 */
export const MAX_STORED_HEADER_CHARS = 8192;
const UNSENDABLE = /[\r\n\0]|[^\u0000-\u00ff]/;

function storableValue(v: string): boolean {
  return v.length <= MAX_STORED_HEADER_CHARS && !UNSENDABLE.test(v);
}

export interface FleetError {
  name: string | null;
  message: string | null;
  phase: string | null;
}

export interface FleetResult {
  id: string;
  /** The fleet's outcome, or the one derived for an older fleet that sends none. */
  outcome: FleetOutcome;
  statusCode: number | null;
  /** How long the render took (ms), by the fleet's clock; null when not sent. */
  renderTime: number | null;
  /** The allow-listed response headers, lower-cased, or null when there are none. */
  headers: Record<string, string> | null;
  encoding: PageEncoding;
  /** The page as sent, still encoded; empty when there is no content. */
  page: Buffer;
  error: FleetError | null;
  /** Where a redirect landed, as the fleet reports it. */
  redirectedTo: string | null;
  /** Why the page is not indexable; a reason this version does not know reads as none. */
  reason: Reason | null;
  isIndexable: boolean | null;
  /** Metadata fields this version does not know (ignored, counted). */
  ignored: string[];
}

/**
 * Splits a raw-bytes result: `x-metadata-size: n`, n bytes of UTF-8 JSON metadata, then the page. Both
 * result dialects share this framing; a malformed frame is a Problem naming the header or the part.
 */
export function splitFrame(
  raw: Buffer,
  metadataSize: string | null | undefined,
): Checked<{ meta: unknown; page: Buffer }> {
  const n =
    metadataSize !== null && metadataSize !== undefined && /^\d{1,9}$/.test(metadataSize)
      ? Number(metadataSize)
      : NaN;
  if (!Number.isSafeInteger(n) || n < 2 || n > raw.length)
    return new Problem(
      'invalid_body',
      `x-metadata-size must be the byte length of the JSON metadata at the start of the body (2 to ${raw.length})`,
    );
  let meta: unknown;
  try {
    meta = JSON.parse(utf8Text(raw.subarray(0, n)) ?? '');
  } catch {
    return new Problem('invalid_json', 'the metadata part is not valid UTF-8 JSON');
  }
  // Whether the metadata is an object is its dialect's shape to say (checkFleetResult, checkFramedParts).
  return { meta, page: raw.subarray(n) };
}

/** Does this metadata belong to the token protocol (it carries a lease token)? */
export function carriesToken(meta: unknown): boolean {
  return typeof meta === 'object' && meta !== null && 'leaseToken' in meta;
}

/**
 * A prerender fleet's metadata as docs/openapi.yaml describes it (FleetResultMetadata). It is open: a
 * field the document does not name is a newer fleet's, ignored and counted.
 */
export const FLEET_METADATA: RequestShape = requestShape(
  'reportResult$metadata$FleetResultMetadata',
  'metadata',
);

/**
 * The stored headers and the page's encoding: what the schema cannot say. `content-encoding` must name
 * an encoding we decode; only the allow-listed headers with a storable value are kept.
 */
function readHeaders(
  v: Record<string, string> | null | undefined,
): Checked<{ stored: Record<string, string> | null; encoding: PageEncoding }> {
  if (v === undefined || v === null) return { stored: null, encoding: 'identity' };
  const stored: Record<string, string> = {};
  let encoding: PageEncoding = 'identity';
  for (const [name, value] of Object.entries(v)) {
    const lower = name.toLowerCase();
    if (lower === 'content-encoding') {
      const e = value.trim().toLowerCase();
      if (e === 'gzip' || e === 'br' || e === 'identity' || e === '') encoding = e === '' ? 'identity' : e;
      else
        return new Problem(
          'invalid_body',
          `headers["content-encoding"] must be gzip, br or absent, not ${echo(value)}`,
        );
    } else if (STORED_HEADERS.includes(lower) && storableValue(value)) stored[lower] = value;
  }
  return { stored: Object.keys(stored).length > 0 ? stored : null, encoding };
}

/** FleetResultMetadata's fields as the schema vouched for them. */
interface FleetFields {
  id: string;
  statusCode?: number | null;
  headers?: Record<string, string> | null;
  renderTime?: number | null;
  redirectedTo?: string | null;
  isIndexable?: boolean | null;
  outcome?: FleetOutcome | null;
  reason?: string | null;
  error?: { name?: string | null; message?: string | null; phase?: string | null } | null;
}

/**
 * What an older fleet that sends no `outcome` means, by the fleet's own order: content is a render, then
 * a redirect target, then a page that asked not to be indexed; anything else is an error.
 */
export function impliedOutcome(
  hasContent: boolean,
  redirectedTo: string | null,
  isIndexable: boolean | null,
): FleetOutcome {
  if (hasContent) return 'rendered';
  if (redirectedTo !== null && redirectedTo !== '') return 'redirected';
  if (isIndexable === false) return 'non-indexable';
  return 'error';
}

/**
 * Checks a fleet's metadata (no lease token) and its page: the documented shape, then the page's
 * encoding; a fleet bug is a Problem naming the field. Fields the document does not name are ignored
 * and listed (`ignored`).
 */
export function checkFleetResult(
  meta: unknown,
  page: Buffer,
  shape: RequestShape = FLEET_METADATA,
): Checked<FleetResult> {
  const problem = shape.check(meta);
  if (problem) return problem;
  const o = meta as FleetFields;
  const headers = readHeaders(o.headers);
  if (headers instanceof Problem) return headers;
  const e = o.error ?? null;
  const redirectedTo = o.redirectedTo ?? null;
  const outcome = o.outcome ?? impliedOutcome(page.length > 0, redirectedTo, o.isIndexable ?? null);
  return {
    id: o.id,
    outcome,
    statusCode: o.statusCode ?? null,
    renderTime: o.renderTime ?? null,
    headers: headers.stored,
    encoding: headers.encoding,
    page,
    error: e ? { name: e.name ?? null, message: e.message ?? null, phase: e.phase ?? null } : null,
    redirectedTo: redirectedTo === '' ? null : redirectedTo,
    reason: knownReason(o.reason),
    isIndexable: o.isIndexable ?? null,
    ignored: Object.keys(o).filter((k) => !FLEET_METADATA.fields.has(k)),
  };
}
