// Where a result is applied: the checks of a result, then the lease table
// admits the first copy, the schedule row is rewritten, the page stored, and the lease released once.
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { HttpError, echo } from '../../util/http/errors.js';
import type { LeaseTable, ReportAnswer, ReportStart } from '../../util/leases/table.js';
import type { Outcome, RenderError } from '../../util/schedule/rules.js';
import type { ResultApplied, ResultWrite } from '../../util/schedule/writes.js';
import { describeType, requireObject } from '../../util/http/input.js';
import { utf8Text } from '../../util/text.js';
import { PRERENDER_RESULTS, type MetricName } from '../../util/metrics/catalogue.js';
import { decodePage } from '../../util/prerender/page.js';
import { carriesToken, checkFleetResult, splitFrame, type FleetResult } from '../../util/prerender/result.js';
import type { PageWrite } from '../pages/store.js';
import type { Caller } from './claims.js';

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
];

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
}

/** What a prerender fleet's result came to: the `x-result-status` of its 204 (docs/prerender-fleet.md). */
export type FleetResultStatus = (typeof PRERENDER_RESULTS)[number];

function tooLarge(maxBodyBytes: number): HttpError {
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

function checkFramedParts(
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
  };
}

export type ResultAnswer =
  | { id: string; accepted: true; nextRenderTime: number; duplicate?: true }
  | {
      id: string;
      accepted: false;
      code: 'superseded' | 'unknown_job' | 'invalid';
      error: string;
      status: number;
      duplicate?: true;
    };

const SUPERSEDED = {
  accepted: false,
  code: 'superseded',
  error: 'the lease token is not the latest grant for this job, or not yours',
  status: 409,
} as const;
const UNKNOWN_JOB = {
  accepted: false,
  code: 'unknown_job',
  error: 'no row for this job (deleted?)',
  status: 404,
} as const;
/** A retry that arrives while the first copy of the same result is still being applied waits this long. */
export const PENDING_WAIT_MS = 10_000;
const PENDING_POLL_MS = 5;

function answerOf(id: string, a: ReportAnswer, duplicate: boolean): ResultAnswer {
  const dup = duplicate ? { duplicate: true as const } : {};
  return a.accepted
    ? { id, accepted: true, nextRenderTime: a.nextRenderTime, ...dup }
    : { id, ...UNKNOWN_JOB, ...dup };
}

export interface ResultDeps {
  leases: () => Pick<LeaseTable, 'beginReport' | 'finishReport' | 'abortReport' | 'grantOf'>;
  /** The schedule owner's result write: reschedules rows, leaves a deleted row deleted. */
  applyResults: (results: readonly ResultWrite[]) => Promise<ResultApplied[]>;
  storePages: (pages: PageWrite[]) => Promise<void>;
  config: () => QueueKeeperConfig;
  /** The clock of the wait for a first copy still being applied. */
  now: () => number;
  sleep: (ms: number) => Promise<void>;
  count: (name: MetricName, n: number, labels?: Record<string, string>) => void;
  log: { warn: (...args: unknown[]) => void };
}

/** The lastError name a page that could not be stored leaves on its row. */
const PAGE_ERROR_NAMES = { too_large: 'PageTooLarge', undecodable: 'PageUndecodable' } as const;

/** A page a fleet sent that could not be stored is logged at most this often per worker. */
export const PAGE_WARN_EVERY_MS = 10_000;

/**
 * Runs the application of a prerender fleet's result so that a fault of ours answers 503 (which the fleet
 * retries), never a 500 (which makes it drop the render for good); a refusal (HttpError) stands.
 */
export async function retryableOnFault<T>(
  id: string,
  work: () => Promise<T>,
  log: { error: (...args: unknown[]) => void },
): Promise<T> {
  try {
    return await work();
  } catch (e) {
    if (e instanceof HttpError) throw e;
    log.error(`a prerender fleet's result for ${echo(id)} failed; answered 503`, e);
    throw new HttpError(503, 'busy', 'the result could not be applied now; retry shortly');
  }
}

export class ResultService {
  private lastPageWarnAt = -Infinity;

  constructor(private readonly deps: ResultDeps) {}

  /** checkResult under the configured render.maxBodyBytes. */
  check(input: unknown): CheckedResult {
    return checkResult(input, this.deps.config().render.maxBodyBytes);
  }

  /**
   * A raw-bytes result: the token protocol's when its metadata carries `leaseToken` (checked under the
   * configured render.maxBodyBytes), else a prerender fleet's (docs/prerender-fleet.md).
   */
  checkFramed(
    raw: Buffer,
    metadataSize: string | null | undefined,
  ): { kind: 'token'; result: CheckedResult } | { kind: 'fleet'; result: FleetResult } {
    const frame = splitFrame(raw, metadataSize);
    if (carriesToken(frame.meta))
      return { kind: 'token', result: checkFramedParts(frame, this.deps.config().render.maxBodyBytes) };
    return { kind: 'fleet', result: checkFleetResult(frame.meta, frame.page) };
  }

  /**
   * Applies a prerender fleet's result, which carries no lease token (docs/prerender-fleet.md). It finds
   * its lease as the key's latest grant when that grant went to this very user and `x-worker-id`, then
   * goes the token protocol's way: one report per lease, the same row write, page store and release.
   * A page that inflates past render.maxBodyBytes or is not UTF-8 is reported as a failure, so the row
   * takes a strike and backs off instead of being rendered again every lease.
   */
  async applyFleet(r: FleetResult, caller: Caller): Promise<FleetResultStatus> {
    const { deps } = this;
    if (r.ignored.length > 0) deps.count('prerender_ignored_fields', r.ignored.length);
    const status = await this.fleetStatus(r, caller);
    deps.count('prerender_results', 1, { result: status });
    return status;
  }

  private async fleetStatus(r: FleetResult, caller: Caller): Promise<FleetResultStatus> {
    const token = this.deps.leases().grantOf(r.id, caller);
    if (token === null) return 'superseded';
    let outcome: Outcome = r.outcome === 'error' ? 'failed' : r.outcome;
    let body: string | null = null;
    let refused: 'too_large' | 'undecodable' | null = null;
    let error: RenderError | null = r.error && { name: r.error.name, message: r.error.message };
    if (r.outcome === 'rendered') {
      const decoded =
        r.page.length === 0
          ? ({ ok: true, text: '' } as const)
          : await decodePage(r.page, r.encoding, this.deps.config().render.maxBodyBytes);
      if (decoded.ok) body = decoded.text;
      else {
        outcome = 'failed';
        refused = decoded.status;
        error = { name: PAGE_ERROR_NAMES[decoded.status], message: decoded.detail };
        this.warnPage(r.id, decoded.detail);
      }
    }
    const [a] = await this.apply(
      [
        {
          id: r.id,
          leaseToken: token,
          outcome,
          statusCode: r.statusCode,
          contentType: r.headers?.['content-type'] ?? null,
          body,
          headers: r.headers,
          error,
        },
      ],
      caller,
    );
    if (a!.duplicate) return 'duplicate';
    if (!a!.accepted) return a!.code === 'unknown_job' ? 'unknown_job' : 'superseded';
    return refused ?? 'applied';
  }

  private warnPage(id: string, detail: string): void {
    const now = this.deps.now();
    if (now - this.lastPageWarnAt < PAGE_WARN_EVERY_MS) return;
    this.lastPageWarnAt = now;
    this.deps.log.warn(
      `a fleet's page for ${echo(id)} was not stored (${detail}); the row takes a failure strike (render.maxBodyBytes, docs/prerender-fleet.md)`,
    );
  }

  /**
   * Applies checked results. Each lease is reported once: the lease
   * table admits the first copy of a result (token current, caller its grantee) and answers every later
   * copy with the first answer and `duplicate: true`, so a retried failure never counts a second strike.
   * Then the schedule write (atomic per key), the pages, and the one release point.
   */
  async apply(results: CheckedResult[], caller: Caller, now = this.deps.now()): Promise<ResultAnswer[]> {
    const leases = this.deps.leases();
    const answers: Array<ResultAnswer | null> = results.map(() => null);
    const starts: ReportStart[] = results.map((r) => leases.beginReport(r.id, r.leaseToken, caller));
    const firsts: number[] = [];
    starts.forEach((s, i) => {
      const id = results[i]!.id;
      if (s.kind === 'superseded') answers[i] = { id, ...SUPERSEDED };
      else if (s.kind === 'duplicate') answers[i] = answerOf(id, s.answer, true);
      else if (s.kind === 'first') firsts.push(i);
    });
    if (firsts.length > 0) await this.applyFirsts(results, firsts, answers, now);
    // Copies whose first is still running (a retry racing its original, or the same result twice in
    // one batch, whose first just finished above) get the first's answer once it is recorded.
    const deadline = this.deps.now() + PENDING_WAIT_MS;
    for (let i = 0; i < results.length; i++) {
      if (answers[i] !== null) continue;
      const r = results[i]!;
      for (;;) {
        const s = leases.beginReport(r.id, r.leaseToken, caller);
        if (s.kind === 'duplicate') answers[i] = answerOf(r.id, s.answer, true);
        else if (s.kind === 'superseded') answers[i] = { id: r.id, ...SUPERSEDED };
        else if (s.kind === 'first') {
          // The first copy gave up (its write failed): this copy is now the one that applies.
          await this.applyFirsts(results, [i], answers, now);
        } else if (this.deps.now() < deadline) {
          await this.deps.sleep(PENDING_POLL_MS);
          continue;
        } else {
          throw new HttpError(503, 'busy', 'the same result is still being applied; retry shortly');
        }
        break;
      }
    }
    return answers.map((a) => a!);
  }

  private async applyFirsts(
    results: CheckedResult[],
    firsts: number[],
    answers: Array<ResultAnswer | null>,
    now: number,
  ): Promise<void> {
    const leases = this.deps.leases();
    const list = firsts.map((i) => results[i]!);
    try {
      const applied = await this.deps.applyResults(
        list.map((r) => ({
          url: r.id,
          outcome: r.outcome,
          statusCode: r.statusCode,
          completedAt: now,
          error: r.outcome === 'failed' ? (r.error ?? null) : null,
        })),
      );
      // Pages after the row: a page write that fails gives the report up, and its retry re-applies a
      // success, which only moves the next render by the retry's delay.
      await this.deps.storePages(
        list
          .filter((r, k) => applied[k]!.found && r.outcome === 'rendered' && r.body !== null)
          .map((p) => ({
            url: p.id,
            statusCode: p.statusCode,
            contentType: p.contentType,
            headers: p.headers ?? null,
            body: p.body!,
            renderedAt: now,
          })),
      );
      list.forEach((r, k) => {
        const done = applied[k]!;
        const answer: ReportAnswer = done.found
          ? { accepted: true, nextRenderTime: done.row.nextRenderTime }
          : { accepted: false, code: 'unknown_job' };
        // The one release point: the fast-retry lane keeps the lease until it expires (it paces the retry).
        leases.finishReport(r.id, r.leaseToken, answer, done.found && done.keepLease, now);
        answers[firsts[k]!] = answerOf(r.id, answer, false);
      });
    } catch (e) {
      for (const r of list) leases.abortReport(r.id, r.leaseToken);
      throw e;
    }
  }
}
