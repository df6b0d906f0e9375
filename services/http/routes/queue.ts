// Fleet and operator endpoints of the queue: claim, results, pause/resume, overview, queue-state.
import type { SitemapSummary } from '../../sitemaps/service.js';
import { HttpError, MAX_ECHO_CHARS, badRequest } from '../../../util/http/errors.js';
import type { KeeperSignal } from '../../../util/sharedMemory/keeperSignal.js';
import type { ReadySet } from '../../../util/sharedMemory/readySet.js';
import type { StateDoc } from '../../../util/sharedMemory/stateDoc.js';
import type { LeaseTable } from '../../../util/leases/table.js';
import type { RequestEndpoint } from '../../../util/metrics/catalogue.js';
import { requireObject } from '../../../util/http/input.js';
import { wellFormed } from '../../../util/text.js';
import { callerOf, type Caller } from '../../leases/caller.js';
import type { ClaimService } from '../../leases/claims.js';
import { retryableOnFault, type ResultService } from '../../results/service.js';
import type { CheckedResult } from '../../../util/results/check.js';
import { config } from '../../runtime/config.js';
import { parseQueues, type FleetScope } from '../../leases/fleetScope.js';
import { log, type HarperUser } from '../../runtime/harper.js';
import { reply, type Router } from '../router.js';
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

/** The body's `queues` field, when the body is an object (its shape is checked by parseClaimLimit). */
function queuesOf(body: unknown): unknown {
  return typeof body === 'object' && body !== null ? (body as { queues?: unknown }).queues : undefined;
}

function resultBodyLimit(): number {
  // a page of render.maxBodyBytes plus 64 KiB for the envelope and its JSON escapes; a page that
  // escapes to more uses the raw-bytes framing. Checked before buffering (services/http/router.ts).
  return config().render.maxBodyBytes + (64 << 10);
}

export interface QueueRouteDeps {
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
  /** The sitemaps' states for queue-state (services/sitemaps/service.ts); a failed last walk is a warning. */
  sitemaps?: () => SitemapSummary;
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
      try {
        return { checked: results.check(r) };
      } catch (e) {
        const id = typeof r === 'object' && r !== null ? (r as { id?: unknown }).id : undefined;
        return { invalid: { id: echoId(id), error: e instanceof HttpError ? e.message : 'invalid result' } };
      }
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

export function registerQueue(router: Router, deps: QueueRouteDeps): void {
  const { claims, results, scope: fleetScope, metrics, control, serving, figures } = deps;
  /** `router.route` with the handler's duration observed under `endpoint`, whether it answers or throws. */
  const timedRoute = (
    on: Router,
    endpoint: RequestEndpoint,
    ...[method, path, caller, handler, opts]: Parameters<Router['route']>
  ): void => {
    const labels = { endpoint };
    on.route(
      method,
      path,
      caller,
      async (req) => {
        const t0 = performance.now();
        try {
          return await handler(req);
        } finally {
          metrics.observe('request_ms', performance.now() - t0, labels);
        }
      },
      opts,
    );
  };
  const isPaused = () => control.isPaused();
  timedRoute(router, 'claim', 'POST', '/render_queue/claim', 'fleet', async (req) => {
    const limit = claims.parseLimit(req.body);
    const scope = await fleetScope.claimScope(req.user?.username, parseQueues(queuesOf(req.body)));
    const r = await claims.claimOrWait(limit, callerOf(req.user, req.headers.get('x-worker-id')), scope);
    return reply(r.jobs, 200, { 'x-queue-status': r.status });
  });

  timedRoute(
    router,
    'job_result',
    'POST',
    '/render_queue/job_result',
    'fleet',
    async (req) => {
      const workerId = req.headers.get('x-worker-id');
      if (req.rawBody) {
        const framed = results.checkFramed(req.rawBody, req.headers.get('x-metadata-size'));
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
      return answerTokenResult(results, results.check(req.body), req.user, workerId, fleetScope);
    },
    { maxBodyBytes: resultBodyLimit, octetStream: true },
  );

  timedRoute(
    router,
    'job_results',
    'POST',
    '/render_queue/job_results',
    'fleet',
    async (req) => {
      const obj = requireObject(req.body, ['results']);
      if (!Array.isArray(obj.results) || obj.results.length < 1 || obj.results.length > MAX_BATCH)
        throw badRequest('invalid_body', `results must be an array of 1 to ${MAX_BATCH} results`);
      await fleetScope.checkReporter(req.user?.username);
      return reply({
        results: await reportBatch(results, obj.results, callerOf(req.user, req.headers.get('x-worker-id'))),
      });
    },
    { maxBodyBytes: () => config().render.maxBatchBytes },
  );

  // Report and claim in one round trip: exactly job_results, then claim, sharing their code.
  timedRoute(
    router,
    'next',
    'POST',
    '/render_queue/next',
    'fleet',
    async (req) => {
      const obj = requireObject(req.body ?? {}, ['results', 'limit', 'queues']);
      const list = obj.results ?? [];
      if (!Array.isArray(list) || list.length > MAX_BATCH)
        throw badRequest('invalid_body', `results must be an array of 0 to ${MAX_BATCH} results`);
      const limit = claims.parseLimit({ limit: obj.limit });
      const scope = await fleetScope.claimScope(req.user?.username, parseQueues(obj.queues));
      const caller = callerOf(req.user, req.headers.get('x-worker-id'));
      const answered = list.length > 0 ? await reportBatch(results, list, caller) : [];
      const r = await claims.claimOrWait(limit, caller, scope);
      return reply({ results: answered, jobs: r.jobs }, 200, { 'x-queue-status': r.status });
    },
    { maxBodyBytes: () => config().render.maxBatchBytes },
  );

  router.route('GET', '/prerender_admin/overview', 'admin', async () => {
    const now = Date.now();
    const leases = deps.leases();
    // Reads never write: the lease figures are worker 0's last reconcile (every stateInterval).
    const rec = figures.leaseFigures(now);
    const snap = deps.ready().snapshot();
    const signal = deps.signal().read();
    const view = serving.view(now);
    const doc = deps.state().read();
    return reply({
      node: nodeName(),
      status: serving.status(now),
      paused: isPaused(),
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
  });

  router.route('GET', '/prerender_admin/queue-state', 'admin', async () => {
    const now = Date.now();
    const state = figures.vouchedState(now);
    if (!state.ok) {
      return reply(
        {
          error: `the keeper cannot vouch for its numbers (${state.phase})`,
          code: 'unavailable',
          now: {
            inFlight: figures.leaseFigures(now).occupancy,
            paused: isPaused(),
            status: serving.status(now),
          },
          trust: { live: false, exact: false, phase: state.phase },
        },
        503,
        { 'retry-after': '5' },
      );
    }
    const { doc, maxAgeMs } = state;
    return reply({
      ...doc,
      trust: { ...doc.trust, stateAgeMs: now - doc.trust.stateAt, maxAgeMs },
      ...(deps.sitemaps ? { sitemaps: deps.sitemaps() } : {}),
    });
  });

  router.route('GET', '/prerender_admin/metrics', 'admin', async () => {
    const now = Date.now();
    const text = metrics.text(figures.liveFigures(now));
    return { status: 200, raw: { contentType: PROMETHEUS_CONTENT_TYPE, data: text } };
  });
}
