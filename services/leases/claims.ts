// Claims and results (SPEC §3), on every worker, with no mutex: the ready set hands out candidates,
// the lease table decides exclusivity, the row decides whether the work is still due.
import { HttpError } from '../../util/http/errors.js';
import { nameHash } from '../../util/leases/token.js';
import type { ReportAnswer, ReportStart } from '../../util/leases/table.js';
import type { ReadyEntry } from '../../util/handoff/readySet.js';
import { classifyUrl, type Outcome } from '../../util/schedule/rules.js';
import { describeType, requireObject } from '../../util/http/input.js';
import { config } from '../runtime/config.js';
import { log, table, transaction, type HarperUser } from '../runtime/harper.js';
import { nodeStatusNow, servingView } from '../keeper/servingView.js';
import { count } from '../metrics/values.js';
import { storePages } from '../pages/store.js';
import { applyResults, readRow } from '../schedule/store.js';
import type { QueueScope } from './fleetScope.js';
import { leaseTable, pokeKeeper, readySet } from '../runtime/sharedStructures.js';
import type { NodeStatus } from '../status/control.js';

// A claim takes up to this many entries per job wanted: leased or stale entries cost no place.
const OVER_TAKE = 4;
// A queue's "last claim" mark is written at most this often per worker (read by the stall sweep).
const CLAIM_MARK_EVERY_MS = 5000;

export interface Job {
  id: string;
  url: string;
  queue: string;
  isFromSitemap: boolean;
  expiresAt: number;
  /** Opaque: the grant instant and 64 random bits (util/leases/token.ts). */
  leaseToken: string;
}

export interface ClaimResult {
  jobs: Job[];
  status: NodeStatus;
}

const lastMark = new Map<string, number>();
/** A full lease window is warned about at most this often per worker, not once per refused key. */
const FULL_WARN_EVERY_MS = 10_000;
let lastFullWarnAt = -Infinity;

function markClaimed(queues: Set<string>, now: number): void {
  const due: string[] = [];
  for (const q of queues) {
    if (now - (lastMark.get(q) ?? 0) < CLAIM_MARK_EVERY_MS) continue;
    lastMark.set(q, now);
    due.push(q);
  }
  if (due.length === 0) return;
  void transaction(async (txn) => {
    const marks = table('render_queue', 'QueueClaimMark');
    for (const q of due) {
      // Never move a mark back: another worker may have written a later claim since this one.
      const prev = Number((await marks.get(q, txn))?.lastClaimAt);
      if (!(prev >= now)) await marks.put(q, { id: q, lastClaimAt: now }, txn);
    }
  }).catch((e: unknown) => log.warn('could not write claim marks', e));
}

export function parseClaimLimit(body: unknown, fields: readonly string[] = ['limit', 'queues']): number {
  if (body === undefined || body === null) return Math.min(20, config().queue.maxClaimLimit);
  const obj = requireObject(body, fields);
  if (obj.limit === undefined) return Math.min(20, config().queue.maxClaimLimit);
  if (typeof obj.limit !== 'number' || !Number.isInteger(obj.limit) || obj.limit < 1)
    throw new HttpError(
      400,
      'invalid_limit',
      `limit must be an integer of at least 1, not ${JSON.stringify(obj.limit)}`,
    );
  return Math.min(obj.limit, config().queue.maxClaimLimit);
}

/** Who is claiming or reporting: leases are bound to their grantee (API.md). */
export interface Caller {
  user: number;
  superUser: boolean;
}

export function callerOf(user: HarperUser | undefined): Caller {
  return { user: nameHash(user?.username ?? ''), superUser: user?.role?.permission?.super_user === true };
}

/** What one claim did with the entries it looked at (counted into the metrics at the end). */
interface ClaimTally {
  jobs: Job[];
  queues: Set<string>;
  stale: number;
  wedged: number;
  refusedFull: number;
}

/**
 * Tries to grant one ready entry: skips it when leased, when its row is gone or no longer due
 * (`claim_stale`), when the key is held (`claim_wedged`) or the lease window is full. True when granted.
 */
function grantEntry(entry: ReadyEntry, caller: Caller, now: number, t: ClaimTally): boolean {
  const cfg = config();
  const leases = leaseTable();
  if (leases.isLeased(entry.key, now)) return false;
  const row = readRow(entry.key);
  if (!row || row.nextRenderTime > now) {
    t.stale++;
    return false;
  }
  const { route, cadenceMs } = classifyUrl(entry.key, row.effectiveInterval, cfg);
  const g = leases.grant(entry.key, now, {
    leaseMs: cfg.queue.jobLeaseTime,
    dueMs: row.nextRenderTime,
    cadenceMs,
    fastRetries: cfg.render.failureRetry.fastRetries,
    user: caller.user,
    queue: nameHash(route),
  });
  if (!g.ok) {
    if (g.reason === 'held') t.wedged++;
    if (g.reason === 'full') {
      t.refusedFull++;
      if (now - lastFullWarnAt >= FULL_WARN_EVERY_MS) {
        lastFullWarnAt = now;
        log.warn(
          `lease window full for a key; not granting it (queue.maxLeases ${cfg.queue.maxLeases} is too small for the leases out)`,
        );
      }
    }
    return false;
  }
  t.queues.add(route);
  t.jobs.push({
    id: entry.key,
    url: entry.key,
    queue: route,
    isFromSitemap: row.fromSitemap,
    expiresAt: g.expiresAt,
    leaseToken: g.token,
  });
  return true;
}

/**
 * Grants up to `limit` due jobs from the ready set (SPEC §3), from every queue or only from `scope`
 * (a fleet-bound user, or a body's `queues`). An unscoped claim takes entries off the shared cursor; a
 * scoped one reads the set without taking, so it never uses up entries of queues it does not serve.
 */
export function claim(
  limit: number,
  caller: Caller,
  scope: QueueScope,
  paused: () => boolean,
  now = Date.now(),
): ClaimResult {
  if (paused()) return { jobs: [], status: 'paused' };
  const view = servingView(now);
  if (!view.serving) return { jobs: [], status: 'unready' };
  const ready = readySet();
  const t: ClaimTally = { jobs: [], queues: new Set(), stale: 0, wedged: 0, refusedFull: 0 };
  let budget = limit * OVER_TAKE;
  let exhausted = false;
  let taken = 0;
  if (scope) {
    const hashes = new Set([...scope].map(nameHash));
    ready.scan(
      (q) => hashes.has(q),
      (entry) => {
        taken++;
        if (!grantEntry(entry, caller, now, t)) budget--;
        return t.jobs.length >= limit || budget <= 0;
      },
    );
    exhausted = t.jobs.length < limit && budget > 0;
  } else {
    while (t.jobs.length < limit && budget > 0) {
      // Take only what is still wanted: an entry taken is used up for this generation, so taking extra
      // and dropping it would strand it until the next publish — forever, if the keeper has stalled and
      // the node is draining its last set (SPEC §3). Skipped entries are made up by taking again.
      const batch = ready.take(Math.min(budget, limit - t.jobs.length));
      if (batch.length === 0) {
        exhausted = true;
        break;
      }
      budget -= batch.length;
      taken += batch.length;
      for (const entry of batch) {
        if (t.jobs.length >= limit) break;
        grantEntry(entry, caller, now, t);
      }
    }
  }
  // A set used up only by keys the lease table has no room for would be republished with the same keys
  // every 50 ms until a lease frees a slot; the normal publish interval is soon enough for those.
  // A scoped claim that saw none of its queues' entries pokes nothing: a republish of the same top rows
  // would not bring them (per-queue sections of the ready set are the fix for small queues).
  const worthPoking = scope === null || taken > 0;
  if (exhausted && worthPoking && view.due > 0 && !(t.refusedFull > 0 && t.refusedFull === taken))
    pokeKeeper(now);
  if (t.jobs.length) count('claim_granted', t.jobs.length);
  if (t.stale) count('claim_stale', t.stale);
  if (t.wedged) count('claim_wedged', t.wedged);
  if (t.queues.size) markClaimed(t.queues, now);
  const status: NodeStatus = t.jobs.length > 0 ? 'queued' : nodeStatusNow(paused(), now);
  return { jobs: t.jobs, status };
}

const OUTCOMES: readonly Outcome[] = ['rendered', 'failed', 'redirected', 'non-indexable'];
const RESULT_FIELDS = [
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
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A result in the raw-bytes framing (API.md job_result): `x-metadata-size: n`, then n bytes of the
 * result as JSON without `body`, then the page itself. Same checks and limits as the JSON form.
 */
export function checkFramedResult(raw: Buffer, metadataSize: string | null | undefined): CheckedResult {
  const n =
    metadataSize !== null && metadataSize !== undefined && /^\d{1,9}$/.test(metadataSize)
      ? Number(metadataSize)
      : NaN;
  if (!Number.isSafeInteger(n) || n < 2 || n > raw.length)
    throw new HttpError(
      400,
      'invalid_body',
      `x-metadata-size must be the byte length of the JSON metadata at the start of the body (2 to ${raw.length})`,
    );
  let meta: unknown;
  try {
    meta = JSON.parse(strictUtf8.decode(raw.subarray(0, n)));
  } catch {
    throw new HttpError(400, 'invalid_json', 'the metadata part is not valid UTF-8 JSON');
  }
  if (typeof meta === 'object' && meta !== null && 'body' in meta)
    throw new HttpError(
      400,
      'invalid_body',
      'the metadata must not carry body: the page follows it as raw bytes',
    );
  const page = raw.subarray(n);
  const max = config().render.maxBodyBytes;
  if (page.length > max)
    throw new HttpError(413, 'payload_too_large', `body is larger than render.maxBodyBytes (${max} bytes)`);
  const checked = checkResult(meta);
  return {
    ...checked,
    body: page.length > 0 || checked.outcome === 'rendered' ? page.toString('utf8') : null,
  };
}

/** Validates one result; throws HttpError (400, or 413 for a body over render.maxBodyBytes). */
export function checkResult(input: unknown): CheckedResult {
  const o = requireObject(input, RESULT_FIELDS, 'result');
  if (typeof o.id !== 'string' || o.id.length === 0)
    throw new HttpError(400, 'invalid_body', 'id must be the job id string');
  // Any string is well-formed here; one that is not a token we issued is simply not the latest grant.
  if (typeof o.leaseToken !== 'string' || o.leaseToken.length === 0 || o.leaseToken.length > 64)
    throw new HttpError(
      400,
      'invalid_body',
      `leaseToken must be the token string the claim returned, not ${describeType(o.leaseToken)}`,
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
  }
  const body = typeof o.body === 'string' ? o.body : null;
  const max = config().render.maxBodyBytes;
  if (body !== null && Buffer.byteLength(body, 'utf8') > max)
    throw new HttpError(413, 'payload_too_large', `body is larger than render.maxBodyBytes (${max} bytes)`);
  return {
    id: o.id,
    leaseToken: o.leaseToken,
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
const PENDING_WAIT_MS = 10_000;
const PENDING_POLL_MS = 5;

function answerOf(id: string, a: ReportAnswer, duplicate: boolean): ResultAnswer {
  const dup = duplicate ? { duplicate: true as const } : {};
  return a.accepted
    ? { id, accepted: true, nextRenderTime: a.nextRenderTime, ...dup }
    : { id, ...UNKNOWN_JOB, ...dup };
}

/**
 * Applies checked results (SPEC §3, API.md idempotent results). Each lease is reported once: the lease
 * table admits the first copy of a result (token current, caller its grantee) and answers every later
 * copy with the first answer and `duplicate: true`, so a retried failure never counts a second strike.
 * Then the schedule write (atomic per key), the pages, and the one release point.
 */
export async function applyCheckedResults(
  results: CheckedResult[],
  caller: Caller,
  now = Date.now(),
): Promise<ResultAnswer[]> {
  const leases = leaseTable();
  const answers: Array<ResultAnswer | null> = results.map(() => null);
  const starts: ReportStart[] = results.map((r) => leases.beginReport(r.id, r.leaseToken, caller));
  const firsts: number[] = [];
  starts.forEach((s, i) => {
    const id = results[i]!.id;
    if (s.kind === 'superseded') answers[i] = { id, ...SUPERSEDED };
    else if (s.kind === 'duplicate') answers[i] = answerOf(id, s.answer, true);
    else if (s.kind === 'first') firsts.push(i);
  });
  if (firsts.length > 0) await applyFirsts(results, firsts, answers, now);
  // Copies whose first is still running (a retry racing its original, or the same result twice in
  // one batch, whose first just finished above) get the first's answer once it is recorded.
  const deadline = Date.now() + PENDING_WAIT_MS;
  for (let i = 0; i < results.length; i++) {
    if (answers[i] !== null) continue;
    const r = results[i]!;
    for (;;) {
      const s = leases.beginReport(r.id, r.leaseToken, caller);
      if (s.kind === 'duplicate') answers[i] = answerOf(r.id, s.answer, true);
      else if (s.kind === 'superseded') answers[i] = { id: r.id, ...SUPERSEDED };
      else if (s.kind === 'first') {
        // The first copy gave up (its write failed): this copy is now the one that applies.
        await applyFirsts(results, [i], answers, now);
      } else if (Date.now() < deadline) {
        await new Promise((res) => setTimeout(res, PENDING_POLL_MS));
        continue;
      } else {
        throw new HttpError(503, 'busy', 'the same result is still being applied; retry shortly');
      }
      break;
    }
  }
  return answers.map((a) => a!);
}

async function applyFirsts(
  results: CheckedResult[],
  firsts: number[],
  answers: Array<ResultAnswer | null>,
  now: number,
): Promise<void> {
  const leases = leaseTable();
  const list = firsts.map((i) => results[i]!);
  try {
    const applied = await applyResults(
      list.map((r) => ({ url: r.id, outcome: r.outcome, statusCode: r.statusCode, completedAt: now })),
    );
    // Pages after the row: a page write that fails gives the report up, and its retry re-applies a
    // success, which only moves the next render by the retry's delay.
    await storePages(
      list
        .filter((r, k) => applied[k]!.found && r.outcome === 'rendered' && r.body !== null)
        .map((p) => ({
          url: p.id,
          statusCode: p.statusCode,
          contentType: p.contentType,
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
