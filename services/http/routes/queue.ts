// Fleet and operator endpoints of the queue: claim, results, pause/resume, overview, queue-state.
import type { SitemapSummary } from '../../sitemaps/service.js';
import type { KeeperSignal } from '../../../util/sharedMemory/keeperSignal.js';
import type { ReadySet } from '../../../util/sharedMemory/readySet.js';
import type { StateDoc } from '../../../util/sharedMemory/stateDoc.js';
import type { DeviceDutyView } from '../../../util/schedule/deviceDuties.js';
import type { LeaseTable } from '../../../util/leases/table.js';
import type { RequestEndpoint } from '../../../util/metrics/catalogue.js';
import { isProblem } from '../../../util/problem.js';
import { requestShape } from '../../../util/requests/shape.js';
import { MAX_ECHO_CHARS, wellFormed } from '../../../util/text.js';
import { answerOf, orRefuse } from '../problems.js';
import { callerOf, type Caller } from '../../leases/caller.js';
import type { ClaimService } from '../../leases/claims.js';
import { retryableOnFault, type ResultService } from '../../results/service.js';
import type { CheckedResult } from '../../../util/results/check.js';
import type { QueueKeeperConfig } from '../../../util/config/schema.js';
import type { FleetScope } from '../../leases/fleetScope.js';
import { log, type HarperUser } from '../../runtime/harper.js';
import {
  type ApiRequest,
  type ApiResponse,
  reply,
  type RouteHandler,
  type Router,
  type RouteEntry,
} from '../router.js';
import type { NodeServing } from '../../keeper/servingView.js';
import { nodeName } from '../../cluster/nodeName.js';
import type { NodeControl } from '../../status/control.js';
import type { HealthFigures } from '../../metrics/healthFigures.js';
import type { MetricValues } from '../../metrics/values.js';
import { PROMETHEUS_CONTENT_TYPE } from '../../../util/metrics/prometheus.js';

/** Results per `job_results`, `next` or channel message. */
export const MAX_BATCH = 100;

/** A caller's id as it may be echoed: only a string, truncated; anything else is null. */
function echoId(id: unknown): string | null {
  // Cut to 200 UTF-16 units, which can split a surrogate pair: made well-formed so that strict JSON
  // parsers (which refuse a lone surrogate escape) can read the answer.
  return typeof id === 'string' ? wellFormed(id.slice(0, MAX_ECHO_CHARS)) : null;
}

/** The claim bodies as docs/openapi.yaml describes them; a bad `limit` or `queues` has its own code. */
const FLEET_CODES = { limit: 'invalid_limit', queues: 'invalid_queues' } as const;
const CLAIM_BODY = requestShape('claim', 'body', FLEET_CODES);
const NEXT_BODY = requestShape('reportAndClaim', 'body', FLEET_CODES);
const RESULTS_BODY = requestShape('reportResults', 'body');
const EXTEND_BODY = requestShape('extendLease', 'body');

/** A claim body once its shape is checked: an absent body claims the default from every queue. */
interface ClaimFields {
  limit?: number;
  queues?: string[] | null;
  results?: unknown[];
}

function claimFields(shape: typeof CLAIM_BODY, body: unknown): ClaimFields {
  const problem = shape.check(body ?? {});
  if (problem) throw answerOf(problem);
  return (body ?? {}) as ClaimFields;
}

function resultBodyLimit(render: QueueKeeperConfig['render']): number {
  // a page of render.maxBodyBytes plus 64 KiB for the envelope and its JSON escapes; a page that
  // escapes to more uses the raw-bytes framing. Checked before buffering (services/http/router.ts).
  return render.maxBodyBytes + (64 << 10);
}

export interface QueueRouteDeps {
  /** The sitemaps' states for queue-state (services/sitemaps/service.ts); a failed last walk is a warning. */
  sitemaps?: () => SitemapSummary;
  /** The configured devices and this node's device duties for queue-state (services/devices/duties.ts). */
  devices?: () => { configured: readonly string[]; duties: DeviceDutyView[] };
  /** The effective config's `render` section: the body limits of the result endpoints. */
  render: () => QueueKeeperConfig['render'];
  claims: ClaimService;
  results: ResultService;
  scope: FleetScope;
  /** The node's metrics: the scrape's text, and each fleet endpoint's duration. */
  metrics: Pick<MetricValues, 'text' | 'observe'>;
  control: Pick<NodeControl, 'isPaused'>;
  /** The serving view and the node's status (services/keeper/servingView.ts). */
  serving: Pick<NodeServing, 'view' | 'status'>;
  /** What queue-state, the overview and the metrics answer from (services/metrics/healthFigures.ts). */
  figures: Pick<HealthFigures, 'leaseFigures' | 'vouchedState' | 'liveFigures'>;
  /** The node's shared structures the overview shows (getters: sized at first use). */
  leases: () => Pick<LeaseTable, 'maxLeases'>;
  ready: () => Pick<ReadySet, 'snapshot'>;
  signal: () => Pick<KeeperSignal, 'read'>;
  state: () => Pick<StateDoc<OverviewDoc>, 'read'>;
}

/** What the overview shows of the state document (any shape it holds: each part is optional). */
interface OverviewDoc {
  trust?: { keeper?: unknown; exact?: boolean };
}

/**
 * Answers a batch of results in order (job_results, next and the channel): each stands alone, a bad entry is
 * answered `invalid` and never blocks the others; ids are echoed only as truncated strings.
 */
export async function reportBatch(results: ResultService, list: unknown[], caller: Caller) {
  const slots: Array<{ checked?: CheckedResult; invalid?: { id: string | null; error: string } }> = list.map(
    (r: unknown) => {
      const checked = results.check(r);
      if (!isProblem(checked)) return { checked };
      const id = typeof r === 'object' && r !== null ? (r as { id?: unknown }).id : undefined;
      return { invalid: { id: echoId(id), error: checked.message } };
    },
  );
  const valid = slots.filter((s) => s.checked).map((s) => s.checked!);
  const answers = await results.apply(valid, caller);
  let k = 0;
  return slots.map((s) => {
    if (s.invalid) return { id: s.invalid.id, accepted: false, code: 'invalid', error: s.invalid.error };
    const a = answers[k++]!;
    const id = echoId(a.id);
    const dup = a.duplicate ? { duplicate: true } : {};
    if (a.accepted) return { id, accepted: true, nextRenderTime: a.nextRenderTime, ...dup };
    return { id, accepted: false, code: a.code, error: a.error, ...dup };
  });
}

/** A token-protocol result's answer: 200 JSON, 409 superseded or 404 unknown_job (docs/fleets.md). */
async function answerTokenResult(
  results: ResultService,
  checked: CheckedResult,
  user: HarperUser | undefined,
  workerId: string | null | undefined,
  fleetScope: FleetScope,
) {
  await fleetScope.checkReporter(user?.username);
  const [a] = await results.apply([checked], callerOf(user, workerId));
  const dup = a!.duplicate ? { duplicate: true } : {};
  if (!a!.accepted) {
    const body =
      a!.code === 'superseded'
        ? { accepted: false, code: 'superseded', error: a!.error }
        : { error: a!.error, code: a!.code, ...dup };
    return reply(body, a!.status);
  }
  return reply({ accepted: true, nextRenderTime: a!.nextRenderTime, ...dup });
}

/** A fleet handler with its duration observed under `endpoint`, whether it answers or throws. */
function timed(
  endpoint: RequestEndpoint,
  handler: RouteHandler<QueueRouteDeps>,
): RouteHandler<QueueRouteDeps> {
  const labels = { endpoint };
  return async (deps, req) => {
    const t0 = performance.now();
    try {
      return await handler(deps, req);
    } finally {
      deps.metrics.observe('request_ms', performance.now() - t0, labels);
    }
  };
}

/** `POST /render_queue/claim`: a bare array of jobs under leases, and the node's status header. */
async function claim(deps: QueueRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const body = claimFields(CLAIM_BODY, req.body);
  const limit = deps.claims.limitOf(body.limit);
  const scope = await deps.scope.claimScope(req.user?.username, body.queues ?? undefined);
  const r = await deps.claims.claimOrWait(limit, callerOf(req.user, req.headers.get('x-worker-id')), scope);
  return reply(r.jobs, 200, { 'x-queue-status': r.status });
}

/** `POST /render_queue/job_result`: one result, JSON or framed; a prerender fleet's framed result gets a 204. */
async function jobResult(deps: QueueRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const { results, scope: fleetScope } = deps;
  const workerId = req.headers.get('x-worker-id');
  if (req.rawBody) {
    const framed = orRefuse(results.checkFramed(req.rawBody, req.headers.get('x-metadata-size')));
    if (framed.kind === 'fleet') {
      // A prerender fleet counts only a 204 as delivered and drops the render for good on anything
      // but 429/502/503/504 (docs/prerender-fleet.md): every well-formed result gets a 204 saying
      // what it came to, and a fault of ours is a 503 it retries, never a 500.
      const status = await retryableOnFault(
        framed.result.id,
        async () => {
          await fleetScope.checkReporter(req.user?.username);
          return results.applyFleet(framed.result, callerOf(req.user, workerId));
        },
        log,
      );
      return reply(undefined, 204, { 'x-result-status': status });
    }
    return answerTokenResult(results, framed.result, req.user, workerId, fleetScope);
  }
  return answerTokenResult(results, orRefuse(results.check(req.body)), req.user, workerId, fleetScope);
}

/** `POST /render_queue/job_results`: 1 to MAX_BATCH results, each answered on its own. */
async function jobResults(deps: QueueRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const problem = RESULTS_BODY.check(req.body);
  if (problem) throw answerOf(problem);
  const obj = req.body as { results: unknown[] };
  await deps.scope.checkReporter(req.user?.username);
  return reply({
    results: await reportBatch(deps.results, obj.results, callerOf(req.user, req.headers.get('x-worker-id'))),
  });
}

/** `POST /render_queue/extend`: a running render's lease set to end later (docs/fleets.md, "Longer leases"). */
async function extendLease(deps: QueueRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const problem = EXTEND_BODY.check(req.body);
  if (problem) throw answerOf(problem);
  const body = req.body as { id: string; leaseToken?: string; byMs: number };
  await deps.scope.checkReporter(req.user?.username);
  const r = deps.results.extend(
    body.id,
    body.leaseToken,
    body.byMs,
    callerOf(req.user, req.headers.get('x-worker-id')),
  );
  return r.ok ? reply({ expiresAt: r.expiresAt }) : reply({ error: r.error, code: r.code }, 409);
}

/** `POST /render_queue/next`: report and claim in one round trip, exactly job_results then claim. */
async function next(deps: QueueRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const obj = claimFields(NEXT_BODY, req.body);
  const list = obj.results ?? [];
  const limit = deps.claims.limitOf(obj.limit);
  const scope = await deps.scope.claimScope(req.user?.username, obj.queues ?? undefined);
  const caller = callerOf(req.user, req.headers.get('x-worker-id'));
  const answered = list.length > 0 ? await reportBatch(deps.results, list, caller) : [];
  const r = await deps.claims.claimOrWait(limit, caller, scope);
  return reply({ results: answered, jobs: r.jobs }, 200, { 'x-queue-status': r.status });
}

/** `GET /prerender_admin/overview`: leases, the ready set and the keeper at a glance; reads never write. */
async function overview(deps: QueueRouteDeps): Promise<ApiResponse> {
  const { serving, figures } = deps;
  const now = Date.now();
  const leases = deps.leases();
  // The lease figures are worker 0's last reconcile (every stateInterval).
  const rec = figures.leaseFigures(now);
  const snap = deps.ready().snapshot();
  const signal = deps.signal().read();
  const view = serving.view(now);
  const doc = deps.state().read();
  return reply({
    node: nodeName(),
    status: serving.status(now),
    paused: deps.control.isPaused(),
    leases: {
      occupancy: rec.occupancy,
      maxLeases: leases.maxLeases,
      oldestLeaseExpiresAt: rec.oldestExpiresAt,
      oldestLeaseAgeMs: rec.oldestGrantedAt === null ? null : now - rec.oldestGrantedAt,
    },
    ready: {
      capacity: snap.capacity,
      count: snap.count,
      consumed: snap.consumed,
      remaining: snap.remaining,
      generation: snap.generation,
      ageMs: snap.publishedAt === null ? null : now - snap.publishedAt,
    },
    keeper: {
      phase: signal.phase,
      live: signal.live,
      serving: view.serving,
      stale: view.stale,
      dueCount: signal.dueCount,
      complete: signal.complete,
      // The heartbeat is stored in whole seconds, rounded up (a live keeper never looks older than it
      // is), so right after a beat it reads up to a second ahead of `now`: that is age 0, not negative.
      heartbeatAgeMs: signal.heartbeatAt === null ? null : Math.max(0, now - signal.heartbeatAt),
      exact: doc?.doc.trust?.exact ?? false,
      stats: doc?.doc.trust?.keeper ?? null,
    },
  });
}

/** `GET /prerender_admin/queue-state`: the keeper's state document; 503 while it cannot vouch for it. */
async function queueState(deps: QueueRouteDeps): Promise<ApiResponse> {
  const { figures } = deps;
  const now = Date.now();
  const state = figures.vouchedState(now);
  if (!state.ok) {
    return reply(
      {
        error: `the keeper cannot vouch for its numbers (${state.phase})`,
        code: 'unavailable',
        now: {
          inFlight: figures.leaseFigures(now).occupancy,
          paused: deps.control.isPaused(),
          status: deps.serving.status(now),
        },
        trust: { live: false, exact: false, phase: state.phase },
      },
      503,
      { 'retry-after': '5' },
    );
  }
  const { doc, maxAgeMs } = state;
  const orphaned = doc.trust.keeper?.orphaned ?? null;
  return reply({
    ...doc,
    trust: { ...doc.trust, stateAgeMs: now - doc.trust.stateAt, maxAgeMs },
    ...(deps.sitemaps ? { sitemaps: deps.sitemaps() } : {}),
    ...(deps.devices
      ? {
          devices: {
            ...deps.devices(),
            orphanedRows: orphaned?.rows ?? null,
            orphanedCountedAt: orphaned?.countedAt ?? null,
          },
        }
      : {}),
  });
}

/** `GET /prerender_admin/metrics`: the Prometheus text exposition. */
async function metricsText(deps: QueueRouteDeps): Promise<ApiResponse> {
  const text = deps.metrics.text(deps.figures.liveFigures(Date.now()));
  return { status: 200, raw: { contentType: PROMETHEUS_CONTENT_TYPE, data: text } };
}

const batchLimit = (deps: QueueRouteDeps) => ({ maxBodyBytes: () => deps.render().maxBatchBytes });

const QUEUE_ROUTES: readonly RouteEntry<QueueRouteDeps>[] = [
  { method: 'POST', path: '/render_queue/claim', caller: 'fleet', handler: timed('claim', claim) },
  {
    method: 'POST',
    path: '/render_queue/job_result',
    caller: 'fleet',
    handler: timed('job_result', jobResult),
    options: (deps) => ({ maxBodyBytes: () => resultBodyLimit(deps.render()), octetStream: true }),
  },
  {
    method: 'POST',
    path: '/render_queue/job_results',
    caller: 'fleet',
    handler: timed('job_results', jobResults),
    options: batchLimit,
  },
  { method: 'POST', path: '/render_queue/extend', caller: 'fleet', handler: extendLease },
  {
    method: 'POST',
    path: '/render_queue/next',
    caller: 'fleet',
    handler: timed('next', next),
    options: batchLimit,
  },
  { method: 'GET', path: '/prerender_admin/overview', caller: 'admin', handler: overview },
  { method: 'GET', path: '/prerender_admin/queue-state', caller: 'admin', handler: queueState },
  { method: 'GET', path: '/prerender_admin/metrics', caller: 'admin', handler: metricsText },
];

export function registerQueue(router: Router, deps: QueueRouteDeps): void {
  router.register(QUEUE_ROUTES, deps);
}
