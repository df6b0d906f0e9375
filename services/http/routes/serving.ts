// `GET`/`HEAD /p/<absolute url>`: stored pages served to crawlers, without authentication (docs/serving.md).
// The router runs it first on Harper's chain; services/serving/service.ts decides every answer, and this
// module turns it into Harper's response and counts it.
import type { MetricName } from '../../../util/metrics/catalogue.js';
import type { SERVED_RESULTS } from '../../../util/metrics/catalogue.js';
import type { HarperHttpRequest, HarperHttpResponse } from '../../runtime/harper.js';
import type { PageServing } from '../../serving/service.js';
import type { Router } from '../router.js';

export interface ServingRouteDeps {
  serving: Pick<PageServing, 'serve'>;
  count: (name: MetricName, n: number, labels: { result: (typeof SERVED_RESULTS)[number] }) => void;
  observe: (name: MetricName, ms: number, labels: { result: (typeof SERVED_RESULTS)[number] }) => void;
}

/** One crawler's request: the page, the answer's counts and its time. */
async function servePage(
  deps: ServingRouteDeps,
  request: HarperHttpRequest,
  target: string,
): Promise<HarperHttpResponse> {
  const t0 = performance.now();
  const method = String(request.method).toUpperCase() === 'HEAD' ? 'HEAD' : 'GET';
  const get = (name: string): string | null => request.headers?.get?.(name) ?? null;
  const a = await deps.serving.serve({ method, target, header: get });
  deps.observe('served_ms', performance.now() - t0, { result: a.result });
  deps.count('served', 1, { result: a.result });
  const response: HarperHttpResponse = { status: a.status, headers: new Headers(a.headers) };
  if (a.body !== null) response.body = a.body;
  return response;
}

/** The module's one route: a public prefix, run before authentication (services/http/router.ts). */
const SERVING_ROUTES = [{ methods: ['GET', 'HEAD'], path: '/p/*', handler: servePage }] as const;

export function registerServing(router: Router, deps: ServingRouteDeps): void {
  for (const r of SERVING_ROUTES)
    router.publicRoute(r.methods, r.path, (request, target) => r.handler(deps, request, target));
}
