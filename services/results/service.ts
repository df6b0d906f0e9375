// Where a result is applied (docs/architecture.md, "A result"): checked by util/results/check.ts, then
// the lease table admits the first copy, the schedule's owner rewrites the row
// (services/schedule/store.ts applyResults), the page is stored, and the lease is released once.
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { leaseLimits } from '../../util/config/leaseLimits.js';
import { HttpError } from '../runtime/httpError.js';
import { echo } from '../../util/text.js';
import { isProblem, type Checked } from '../../util/problem.js';
import { urlProblem } from '../../util/schedule/targetChecks.js';
import type { LeaseTable, ReportAnswer, ReportStart } from '../../util/leases/table.js';
import { queueOf, type Outcome, type RenderError } from '../../util/schedule/rules.js';
import { urlOfKey } from '../../util/schedule/rowKey.js';
import type { ResultApplied, ResultWrite } from '../../util/schedule/writes.js';
import type { MetricName } from '../../util/metrics/catalogue.js';
import { decodePage } from '../../util/prerender/page.js';
import { carriesToken, checkFleetResult, splitFrame, type FleetResult } from '../../util/prerender/result.js';
import {
  checkFramedParts,
  checkResult,
  type CheckedResult,
  type FleetResultStatus,
} from '../../util/results/check.js';
import type { PageWrite } from '../pages/store.js';
import type { Caller } from '../leases/caller.js';

export type ResultAnswer =
  | { id: string; accepted: true; nextRenderTime: number | null; duplicate?: true }
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
  leases: () => Pick<LeaseTable, 'beginReport' | 'finishReport' | 'abortReport' | 'grantOf' | 'extend'>;
  /** The schedule owner's result write: reschedules rows, leaves a deleted row deleted. */
  applyResults: (results: readonly ResultWrite[]) => Promise<ResultApplied[]>;
  storePages: (pages: PageWrite[]) => Promise<void>;
  /** Deletes the stored pages of rows (by key) a verdict parked or retired. */
  deletePages: (keys: string[]) => Promise<number>;
  /** Counts a retirement by its reason (queue_keeper_retired_total). */
  countRetired?: (reason: string) => void;
  config: () => QueueKeeperConfig;
  /** The clock of the wait for a first copy still being applied. */
  now: () => number;
  sleep: (ms: number) => Promise<void>;
  count: (name: MetricName, n: number, labels?: Record<string, string>) => void;
  /** One result applied to its row, by queue and outcome, with the reported render time (ms). */
  countResult: (queue: string, outcome: Outcome, renderMs: number | null) => void;
  log: { warn: (...args: unknown[]) => void };
}

/** What an extension came to: the lease's new end, or a 409's code. */
export type ExtendAnswer =
  { ok: true; expiresAt: number } | { ok: false; code: 'superseded' | 'lease_ended'; error: string };

const EXTEND_REFUSALS = {
  superseded: {
    ok: false,
    code: 'superseded',
    error: 'the lease is not the latest grant for this job, or not yours',
  },
  ended: {
    ok: false,
    code: 'lease_ended',
    error: 'the lease has ended or its result has come; it cannot be extended',
  },
} as const;

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

/**
 * A permanent redirect's destination when it may be filed (docs/feeding.md): an acceptable target URL on
 * the source's own host or one of `allowHosts`; null otherwise.
 */
export function fileableDestination(
  source: string,
  to: string | null,
  allowHosts: readonly string[],
): string | null {
  if (to === null || urlProblem(to) !== null) return null;
  try {
    const host = new URL(to).host;
    return host === new URL(source).host || allowHosts.includes(host) ? to : null;
  } catch {
    return null;
  }
}

export class ResultService {
  private lastPageWarnAt = -Infinity;

  constructor(private readonly deps: ResultDeps) {}

  /** checkResult under the configured render.maxBodyBytes: the checked result, or its Problem. */
  check(input: unknown): Checked<CheckedResult> {
    return checkResult(input, this.deps.config().render.maxBodyBytes);
  }

  /**
   * A raw-bytes result: the token protocol's when its metadata carries `leaseToken` (checked under the
   * configured render.maxBodyBytes), else a prerender fleet's (docs/prerender-fleet.md).
   */
  checkFramed(
    raw: Buffer,
    metadataSize: string | null | undefined,
  ): Checked<{ kind: 'token'; result: CheckedResult } | { kind: 'fleet'; result: FleetResult }> {
    const frame = splitFrame(raw, metadataSize);
    if (isProblem(frame)) return frame;
    const result = carriesToken(frame.meta)
      ? checkFramedParts(frame, this.deps.config().render.maxBodyBytes)
      : checkFleetResult(frame.meta, frame.page);
    if (isProblem(result)) return result;
    return carriesToken(frame.meta)
      ? { kind: 'token', result: result as CheckedResult }
      : { kind: 'fleet', result: result as FleetResult };
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
          redirectedTo: r.redirectedTo,
          reason: r.reason,
          isIndexable: r.isIndexable,
          renderTimeMs: r.renderTime,
        },
      ],
      caller,
    );
    if (a!.duplicate) return 'duplicate';
    if (!a!.accepted) return a!.code === 'unknown_job' ? 'unknown_job' : 'superseded';
    return refused ?? 'applied';
  }

  /**
   * Extends the lease of job `id` by `byMs` from now, clamped to queue.maxLeaseExtension and never past
   * the grant plus queue.maxLeaseTime, under its result's fencing: with a token, the token protocol's
   * (latest grant, its grantee or a super_user); without one, the prerender protocol's (the key's latest
   * grant went to this user and this `x-worker-id`, as applyFleet finds it).
   */
  extend(id: string, leaseToken: string | undefined, byMs: number, caller: Caller): ExtendAnswer {
    const leases = this.deps.leases();
    const token = leaseToken ?? leases.grantOf(id, caller);
    if (token === null) return EXTEND_REFUSALS.superseded;
    const limits = leaseLimits(this.deps.config().queue);
    // A token found by grantOf is this caller's own grant, whatever its super_user flag says.
    const reporter = leaseToken === undefined ? { user: caller.user, superUser: true } : caller;
    const r = leases.extend(
      id,
      token,
      reporter,
      { byMs: Math.min(byMs, limits.maxExtensionMs), maxLeaseMs: limits.maxLeaseMs },
      this.deps.now(),
    );
    return r.ok ? r : EXTEND_REFUSALS[r.reason];
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
      const allowHosts = this.deps.config().render.redirects.allowHosts;
      const applied = await this.deps.applyResults(
        list.map((r) => ({
          key: r.id,
          outcome: r.outcome,
          statusCode: r.statusCode,
          completedAt: now,
          error: r.outcome === 'failed' ? (r.error ?? null) : null,
          redirectedTo: r.redirectedTo ?? null,
          fileDestination: fileableDestination(urlOfKey(r.id), r.redirectedTo ?? null, allowHosts),
          reason: r.reason ?? null,
          isIndexable: r.isIndexable ?? null,
        })),
      );
      // Pages after the row: a page write that fails gives the report up, and its retry re-applies a
      // success, which only moves the next render by the retry's delay. A row a verdict parked or retired
      // loses its page: crawlers must not be served it.
      const gone = list.filter((_r, k) => {
        const a = applied[k]!;
        return a.found && a.page === 'delete';
      });
      if (gone.length > 0) await this.deps.deletePages(gone.map((r) => r.id));
      list.forEach((_r, k) => {
        const a = applied[k]!;
        if (a.found && a.retired !== null) this.deps.countRetired?.(a.retired);
      });
      await this.deps.storePages(
        list
          .filter((r, k) => {
            const a = applied[k]!;
            return a.found && a.page === 'store' && r.body !== null;
          })
          .map((p) => ({
            key: p.id,
            statusCode: p.statusCode,
            contentType: p.contentType,
            headers: p.headers ?? null,
            body: p.body!,
            renderedAt: now,
          })),
      );
      const routes = this.deps.config().render.routes;
      list.forEach((r, k) => {
        const done = applied[k]!;
        if (done.found)
          this.deps.countResult(queueOf(urlOfKey(r.id), routes), r.outcome, r.renderTimeMs ?? null);
        const answer: ReportAnswer = done.found
          ? { accepted: true, nextRenderTime: done.row?.nextRenderTime ?? null }
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
