// Claims and results (SPEC §3), on every worker, with no mutex: the ready set hands out candidates,
// the lease table decides exclusivity, the row decides whether the work is still due.
import { HttpError } from '../util/httpError.js';
import { classifyUrl, type Outcome } from '../util/scheduleRules.js';
import { describeType, requireObject } from '../util/validateInput.js';
import { config } from './config.js';
import { log, table, transaction } from './harper.js';
import { nodeStatusNow, servingView } from './keeper.js';
import { count } from './metrics.js';
import { storePages } from './pages.js';
import { applyResults, readRow } from './schedule.js';
import { leaseTable, pokeKeeper, readySet } from './shared.js';
import { isPaused, type NodeStatus } from './status.js';

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
  leaseToken: number;
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

/** Local requeued signals: expired leases counted as misses, by queue (the notify dispatcher reads them). */
const requeuedListeners: Array<(queue: string, key: string) => void> = [];
export function onRequeued(fn: (queue: string, key: string) => void): void {
  requeuedListeners.push(fn);
}

export function parseClaimLimit(body: unknown): number {
  if (body === undefined || body === null) return Math.min(20, config().queue.maxClaimLimit);
  const obj = requireObject(body, ['limit']);
  if (obj.limit === undefined) return Math.min(20, config().queue.maxClaimLimit);
  if (typeof obj.limit !== 'number' || !Number.isInteger(obj.limit) || obj.limit < 1)
    throw new HttpError(
      400,
      'invalid_limit',
      `limit must be an integer of at least 1, not ${JSON.stringify(obj.limit)}`,
    );
  return Math.min(obj.limit, config().queue.maxClaimLimit);
}

export function claim(limit: number, now = Date.now()): ClaimResult {
  if (isPaused()) return { jobs: [], status: 'paused' };
  const view = servingView(now);
  if (!view.serving) return { jobs: [], status: 'unready' };
  const cfg = config();
  const leases = leaseTable();
  const ready = readySet();
  const jobs: Job[] = [];
  const queues = new Set<string>();
  let stale = 0;
  let wedged = 0;
  let budget = limit * OVER_TAKE;
  let exhausted = false;
  let taken = 0;
  let refusedFull = 0;
  while (jobs.length < limit && budget > 0) {
    // Take only what is still wanted: an entry taken is used up for this generation, so taking extra
    // and dropping it would strand it until the next publish — forever, if the keeper has stalled and
    // the node is draining its last set (SPEC §3). Skipped entries are made up by taking again.
    const batch = ready.take(Math.min(budget, limit - jobs.length));
    if (batch.length === 0) {
      exhausted = true;
      break;
    }
    budget -= batch.length;
    taken += batch.length;
    for (const entry of batch) {
      if (jobs.length >= limit) break;
      if (leases.isLeased(entry.key, now)) continue;
      const row = readRow(entry.key);
      if (!row || row.nextRenderTime > now) {
        stale++;
        continue;
      }
      const { route, cadenceMs } = classifyUrl(entry.key, row.effectiveInterval, cfg);
      const g = leases.grant(entry.key, now, {
        leaseMs: cfg.queue.jobLeaseTime,
        dueMs: row.nextRenderTime,
        cadenceMs,
        fastRetries: cfg.render.failureRetry.fastRetries,
      });
      if (!g.ok) {
        if (g.reason === 'held') wedged++;
        if (g.reason === 'full') {
          refusedFull++;
          if (now - lastFullWarnAt >= FULL_WARN_EVERY_MS) {
            lastFullWarnAt = now;
            log.warn(
              `lease window full for a key; not granting it (queue.maxLeases ${cfg.queue.maxLeases} is too small for the leases out)`,
            );
          }
        }
        continue;
      }
      if (g.requeued) for (const l of requeuedListeners) l(route, entry.key);
      queues.add(route);
      jobs.push({
        id: entry.key,
        url: entry.key,
        queue: route,
        isFromSitemap: row.fromSitemap,
        expiresAt: g.expiresAt,
        leaseToken: g.token,
      });
    }
  }
  // A set used up only by keys the lease table has no room for would be republished with the same keys
  // every 50 ms until a lease frees a slot; the normal publish interval is soon enough for those.
  if (exhausted && view.due > 0 && !(refusedFull > 0 && refusedFull === taken)) pokeKeeper(now);
  if (jobs.length) count('claim_granted', jobs.length);
  if (stale) count('claim_stale', stale);
  if (wedged) count('claim_wedged', wedged);
  if (queues.size) markClaimed(queues, now);
  const status: NodeStatus = jobs.length > 0 ? 'queued' : nodeStatusNow(now);
  return { jobs, status };
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
  leaseToken: number;
  outcome: Outcome;
  statusCode: number | null;
  contentType: string | null;
  body: string | null;
}

/** Validates one result; throws HttpError (400, or 413 for a body over render.maxBodyBytes). */
export function checkResult(input: unknown): CheckedResult {
  const o = requireObject(input, RESULT_FIELDS, 'result');
  if (typeof o.id !== 'string' || o.id.length === 0)
    throw new HttpError(400, 'invalid_body', 'id must be the job id string');
  if (typeof o.leaseToken !== 'number' || !Number.isFinite(o.leaseToken))
    throw new HttpError(
      400,
      'invalid_body',
      `leaseToken must be a number, not ${describeType(o.leaseToken)}`,
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
    (typeof o.renderTimeMs !== 'number' || o.renderTimeMs < 0)
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
  | { id: string; accepted: true; nextRenderTime: number }
  | {
      id: string;
      accepted: false;
      code: 'superseded' | 'unknown_job' | 'invalid';
      error: string;
      status: number;
    };

/**
 * Applies checked results: token check first (a stale token writes and releases nothing), then the
 * schedule write, the page, and the one release point.
 */
export async function applyCheckedResults(
  results: CheckedResult[],
  now = Date.now(),
): Promise<ResultAnswer[]> {
  const leases = leaseTable();
  const answers: Array<ResultAnswer | null> = results.map((r) =>
    leases.check(r.id, r.leaseToken) === 'current'
      ? null
      : {
          id: r.id,
          accepted: false,
          code: 'superseded',
          error: 'the lease token is not the latest grant for this job',
          status: 409,
        },
  );
  const current = results.filter((_r, i) => answers[i] === null);
  const applied = await applyResults(
    current.map((r) => ({ url: r.id, outcome: r.outcome, statusCode: r.statusCode, completedAt: now })),
  );
  const pages = current.filter((r, i) => applied[i]!.found && r.outcome === 'rendered' && r.body !== null);
  await storePages(
    pages.map((p) => ({
      url: p.id,
      statusCode: p.statusCode,
      contentType: p.contentType,
      body: p.body!,
      renderedAt: now,
    })),
  );
  let j = 0;
  return answers.map((a, i) => {
    if (a) return a;
    const r = results[i]!;
    const done = applied[j++]!;
    if (!done.found) {
      leases.release(r.id, r.leaseToken, now);
      return {
        id: r.id,
        accepted: false,
        code: 'unknown_job',
        error: 'no row for this job (deleted?)',
        status: 404,
      };
    }
    // The one release point: the fast-retry lane keeps the lease until it expires (it paces the retry).
    if (!done.keepLease) leases.release(r.id, r.leaseToken, now);
    return { id: r.id, accepted: true, nextRenderTime: done.row.nextRenderTime };
  });
}
