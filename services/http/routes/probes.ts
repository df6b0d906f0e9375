// The probes a load balancer or Kubernetes calls (docs/operating.md "Probes"): `live` (the process
// answers HTTP) and `ready` (util/keeper/readiness.ts). No authentication, and nothing in the answer but
// a status word, so an anonymous caller learns whether to send traffic and nothing else; `health` keeps
// the authenticated detail.
import type { Readiness } from '../../../util/keeper/readiness.js';
import type { ApiResponse, Router, RouteEntry } from '../router.js';

export interface ProbeDeps {
  /** This node's readiness at an instant, as this worker reads it. */
  readiness: (now: number) => Readiness;
}

// A probe's answer is about this instant: a cache in between would keep a node in or out of the pool.
const PROBE_HEADERS = { 'cache-control': 'no-store' };

function word(status: number, text: string): ApiResponse {
  return {
    status,
    headers: PROBE_HEADERS,
    raw: { contentType: 'text/plain; charset=utf-8', data: `${text}\n` },
  };
}

/** `live`: the process answers HTTP. */
async function live(): Promise<ApiResponse> {
  return word(200, 'live');
}

/** `ready`: this node's keeper serves claims here (util/keeper/readiness.ts). */
async function ready(deps: ProbeDeps): Promise<ApiResponse> {
  const r = deps.readiness(Date.now());
  return word(r === 'ready' ? 200 : 503, r);
}

const PROBE_ROUTES: readonly RouteEntry<ProbeDeps>[] = ['GET', 'HEAD'].flatMap((method) => [
  { method, path: '/prerender_admin/live', caller: 'public' as const, handler: live },
  { method, path: '/prerender_admin/ready', caller: 'public' as const, handler: ready },
]);

export function registerProbes(router: Router, deps: ProbeDeps): void {
  router.register(PROBE_ROUTES, deps);
}
