// A prerender fleet's result (docs/prerender-fleet.md): the raw-bytes framing, its metadata as the fleet
// writes it, and the outcome that decides what happens to the row. Pure: the page bytes are decoded by
// util/prerender/page.ts, the lease and the row by services/results/service.ts. A malformed result is a
// Problem naming the field (services/http/ answers it 400).
import { Problem, type Checked } from '../problem.js';
import { describeType, echo, utf8Text } from '../text.js';

export type FleetOutcome = 'rendered' | 'redirected' | 'non-indexable' | 'error';
export type PageEncoding = 'gzip' | 'br' | 'identity';
const FLEET_OUTCOMES: readonly FleetOutcome[] = ['rendered', 'redirected', 'non-indexable', 'error'];

/** The fields a fleet's metadata may carry; any other is a newer fleet's, ignored and counted. */
const KNOWN_FIELDS: ReadonlySet<string> = new Set([
  'id',
  'url',
  'statusCode',
  'headers',
  'renderTime',
  'redirectedTo',
  'isIndexable',
  'outcome',
  'reason',
  'error',
]);

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
  if (typeof meta !== 'object' || meta === null || Array.isArray(meta))
    return new Problem('invalid_body', `the metadata must be a JSON object, not ${describeType(meta)}`);
  return { meta, page: raw.subarray(n) };
}

/** Does this metadata belong to the token protocol (it carries a lease token)? */
export function carriesToken(meta: unknown): boolean {
  return typeof meta === 'object' && meta !== null && 'leaseToken' in meta;
}

/** A field's problem, carried out of the nested field checks to checkFleetResult, which returns it. */
class Refused {
  constructor(readonly problem: Problem) {}
}
const refuse = (code: 'invalid_body', message: string) => new Refused(new Problem(code, message));

function optionalString(o: Record<string, unknown>, field: string): string | null {
  const v = o[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string')
    throw refuse('invalid_body', `${field} must be a string, not ${describeType(v)}`);
  return v;
}

function checkHeaders(v: unknown): { stored: Record<string, string> | null; encoding: PageEncoding } {
  if (v === undefined || v === null) return { stored: null, encoding: 'identity' };
  if (typeof v !== 'object' || Array.isArray(v))
    throw refuse('invalid_body', `headers must be an object of strings, not ${describeType(v)}`);
  const stored: Record<string, string> = {};
  let encoding: PageEncoding = 'identity';
  for (const [name, value] of Object.entries(v as Record<string, unknown>)) {
    if (typeof value !== 'string')
      throw refuse('invalid_body', `headers[${echo(name)}] must be a string, not ${describeType(value)}`);
    const lower = name.toLowerCase();
    if (lower === 'content-encoding') {
      const e = value.trim().toLowerCase();
      if (e === 'gzip' || e === 'br' || e === 'identity' || e === '') encoding = e === '' ? 'identity' : e;
      else
        throw refuse(
          'invalid_body',
          `headers["content-encoding"] must be gzip, br or absent, not ${echo(value)}`,
        );
    } else if (STORED_HEADERS.includes(lower) && storableValue(value)) stored[lower] = value;
  }
  return { stored: Object.keys(stored).length > 0 ? stored : null, encoding };
}

function checkError(v: unknown): FleetError | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v))
    throw refuse('invalid_body', `error must be {name, message, phase?}, not ${describeType(v)}`);
  const e = v as Record<string, unknown>;
  const field = (k: string) => {
    const f = e[k];
    if (f === undefined || f === null) return null;
    if (typeof f !== 'string')
      throw refuse('invalid_body', `error.${k} must be a string, not ${describeType(f)}`);
    return f;
  };
  return { name: field('name'), message: field('message'), phase: field('phase') };
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

/** Checks a fleet's metadata (no lease token) and its page; a fleet bug is a Problem naming the field. */
export function checkFleetResult(meta: unknown, page: Buffer): Checked<FleetResult> {
  try {
    return fleetResult(meta, page);
  } catch (e) {
    if (e instanceof Refused) return e.problem;
    throw e;
  }
}

function fleetResult(meta: unknown, page: Buffer): FleetResult {
  const o = meta as Record<string, unknown>;
  if (typeof o.id !== 'string' || o.id.length === 0)
    throw refuse('invalid_body', `id must be the job id string, not ${describeType(o.id)}`);
  optionalString(o, 'url');
  optionalString(o, 'reason');
  const redirectedTo = optionalString(o, 'redirectedTo');
  const sc = o.statusCode;
  if (
    sc !== undefined &&
    sc !== null &&
    (typeof sc !== 'number' || !Number.isInteger(sc) || sc < 0 || sc > 999)
  )
    throw refuse('invalid_body', 'statusCode must be an integer HTTP status');
  const rt = o.renderTime;
  if (rt !== undefined && rt !== null && (typeof rt !== 'number' || !Number.isFinite(rt) || rt < 0))
    throw refuse('invalid_body', 'renderTime must be a non-negative number of ms');
  const ix = o.isIndexable;
  if (ix !== undefined && ix !== null && typeof ix !== 'boolean')
    throw refuse('invalid_body', `isIndexable must be true or false, not ${describeType(ix)}`);
  const out = o.outcome;
  if (out !== undefined && out !== null && !(FLEET_OUTCOMES as readonly unknown[]).includes(out))
    throw refuse('invalid_body', `outcome must be one of ${FLEET_OUTCOMES.join(', ')}`);
  const { stored, encoding } = checkHeaders(o.headers);
  const error = checkError(o.error);
  const outcome =
    (out as FleetOutcome | null | undefined) ??
    impliedOutcome(page.length > 0, redirectedTo, typeof ix === 'boolean' ? ix : null);
  return {
    id: o.id,
    outcome,
    statusCode: typeof sc === 'number' ? sc : null,
    renderTime: typeof rt === 'number' ? rt : null,
    headers: stored,
    encoding,
    page,
    error,
    ignored: Object.keys(o).filter((k) => !KNOWN_FIELDS.has(k)),
  };
}
