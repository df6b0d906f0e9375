// The HTTP front of queue-keeper. Harper's REST layer gives a custom resource no auth, answers a
// malformed JSON body with a 500 and needs `headers` on every status object, so our endpoints are served
// by one middleware registered after REST (request.user is already set there). In order, every request
// under our two prefixes is: authenticated (401 first, whatever the path or method, so an anonymous
// caller cannot map the routes; the probes alone answer without credentials), routed (404/405),
// authorised (403), and — when it changes state — checked for a same-origin browser context (403
// cross_site), a JSON media type (415) and its endpoint's size limit (413, from content-length before
// buffering and again while reading), then parsed as UTF-8 JSON of bounded depth (400; the checks are in
// ./requestChecks.ts). Every failure is `{error, code}`; a 500 is only ever our own fault. The route
// table is a Router instance that resources.ts builds and hands to each route module's
// register…(router, deps), which registers the module's table of routes: each a method, a path, a caller
// and one named handler.
import { HttpError } from '../runtime/httpError.js';
import { echo } from '../../util/text.js';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type {
  HarperHttpRequest,
  HarperHttpResponse,
  HarperMiddleware,
  HarperUser,
} from '../runtime/harper.js';
import {
  crossSiteProblem,
  mediaTypeProblem,
  parseJsonBody,
  readBody,
  type HeaderGet,
} from './requestChecks.js';

/** `public`: no credentials needed (the load balancer's probes, routes/probes.ts); `any`: any user. */
export type Caller = 'admin' | 'feeder' | 'discover' | 'fleet' | 'any' | 'public';

export interface ApiRequest {
  method: string;
  path: string;
  /** Path segments after the route's prefix (for `/prerender_admin/hooks/<id>/rotate`). */
  params: string[];
  query: URLSearchParams;
  user: HarperUser;
  body: unknown;
  /** The size of the request body in bytes (used when a handler must count bytes exactly). */
  rawBodyBytes: number;
  /** The body bytes, set only for an `application/octet-stream` body on a route that accepts one. */
  rawBody?: Buffer;
  headers: { get(name: string): string | undefined | null };
}

export interface ApiResponse {
  status?: number;
  headers?: Record<string, string>;
  body?: unknown;
  /** Pre-serialised body with its content type (Prometheus text, HTML, static assets). */
  raw?: { contentType: string; data: string | Buffer };
}

export type Handler = (req: ApiRequest) => Promise<ApiResponse>;

/** A route module's handler: the module's dependencies and the request in, the answer out. */
export type RouteHandler<D> = (deps: D, req: ApiRequest) => Promise<ApiResponse>;

/** One row of a route module's table. */
export interface RouteEntry<D> {
  method: string;
  /** Exact, or a prefix ending in `/*` whose remaining segments become `req.params`. */
  path: string;
  caller: Caller;
  handler: RouteHandler<D>;
  /** The route's options, from the module's dependencies (a body limit that follows the config). */
  options?: (deps: D) => RouteOptions;
}

interface Route {
  method: string;
  /** Exact path, or a prefix ending in '/' whose remaining segments become params. */
  path: string;
  prefix: boolean;
  caller: Caller;
  maxBodyBytes: () => number;
  octetStream: boolean;
  /** An operator read that an observer role may make although it is not a GET (explain). */
  observerRead: boolean;
  handler: Handler;
}

/** admin bodies (and any endpoint that names no other limit) are at most 1 MiB. */
export const DEFAULT_MAX_BODY = 1 << 20;

export interface RouteOptions {
  maxBodyBytes?: () => number;
  /** The route also takes `application/octet-stream` (the raw-bytes result framing): `req.rawBody`. */
  octetStream?: boolean;
  /** A POST that only reads, which an observer role may call like the operator's GETs. */
  observerRead?: boolean;
}

function json(status: number, body: unknown, headers: Record<string, string> = {}) {
  return {
    status,
    // A Headers instance, not a plain object: Harper's auth layer calls headers.set() on the response.
    headers: new Headers({ 'content-type': 'application/json', ...headers }),
    body: JSON.stringify(body),
  };
}

/** A 503 says when to come back: fleets back off and retry on it (docs/prerender-fleet.md). */
const DEFAULT_RETRY_AFTER_S = '1';

function errorResponse(e: HttpError) {
  const headers =
    e.status === 503 && e.headers?.['retry-after'] === undefined
      ? { ...e.headers, 'retry-after': DEFAULT_RETRY_AFTER_S }
      : e.headers;
  return json(e.status, { error: e.message, code: e.code, ...(e.extra ?? {}) }, headers);
}

function unauthenticated(): HttpError {
  return new HttpError(401, 'unauthenticated', 'authentication required: send basic auth or a Harper token');
}

/**
 * Whether a user may call as `caller`: super_user may do everything, others need a configured role. An
 * observer role may make the operator's reads (`readOnly`: every GET, and explain) and nothing else.
 */
export function authorize(
  user: HarperUser | undefined,
  caller: Caller,
  q: QueueKeeperConfig['queue'],
  readOnly = false,
): void {
  if (caller === 'public') return;
  if (!user) throw unauthenticated();
  if (caller === 'any') return;
  if (user.role?.permission?.super_user) return;
  const roleName = user.role?.role ?? '';
  if ((caller === 'admin' || caller === 'feeder') && readOnly && q.observerRoles.includes(roleName)) return;
  const allowed =
    caller === 'feeder'
      ? q.feederRoles
      : caller === 'discover'
        ? q.discoverRoles
        : caller === 'fleet'
          ? q.fleetRoles
          : [];
  if (!allowed.includes(roleName))
    throw new HttpError(
      403,
      'forbidden',
      `this endpoint needs ${caller === 'admin' ? 'a super_user' : `a ${caller} role`}`,
    );
}

/** Path segments, percent-decoded; a malformed escape makes the path unknown (404), never a 500. */
function decodeParams(rest: string): string[] | null {
  try {
    return rest.split('/').map(decodeURIComponent);
  } catch {
    return null;
  }
}

/**
 * An operator read: an observer role may call it (every GET under /prerender_admin/, explain, and a
 * feeder's read marked observerRead such as the sitemap list).
 */
function readOnly(r: Route): boolean {
  if (r.path.startsWith('/prerender_admin/')) return r.method === 'GET' || r.observerRead;
  return r.observerRead && r.method === 'GET';
}

function findRoute(
  routes: readonly Route[],
  method: string,
  pathname: string,
): { route?: Route; params: string[]; pathKnown: boolean } {
  let pathKnown = false;
  for (const r of routes) {
    let params: string[] | null = null;
    if (r.prefix) {
      if (pathname.startsWith(r.path) && pathname.length > r.path.length)
        params = decodeParams(pathname.slice(r.path.length));
    } else if (pathname === r.path || pathname === r.path + '/') params = [];
    if (params === null) continue;
    pathKnown = true;
    if (r.method === method) return { route: r, params, pathKnown };
  }
  return { params: [], pathKnown };
}

/**
 * The request target in origin form: an absolute-form target (`POST http://host/render_queue/claim`,
 * which HTTP/1.1 servers must accept) is cut to its path and query, so it reaches the same route, and
 * the same 401, as `/render_queue/claim`.
 */
export function originForm(url: string): string {
  const m = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(url);
  if (m === null) return url;
  const rest = url.slice(m[0].length);
  return rest.startsWith('/') ? rest : `/${rest}`;
}

/** Whether a request target (origin form) is ours to answer: under `/render_queue/` or `/prerender_admin/`. */
export function hasOurPrefix(url: string): boolean {
  return (
    url.startsWith('/render_queue/') ||
    url.startsWith('/prerender_admin/') ||
    // The bare prefixes too: `/render_queue` must not answer differently from `/render_queue/x`.
    /^\/(render_queue|prerender_admin)(\?|$)/.test(url)
  );
}

/** Methods that change state (docs/fleets.md); PUT and PATCH have no routes here. */
const CHANGES_STATE: ReadonlySet<string> = new Set(['POST', 'DELETE', 'PUT', 'PATCH']);

/** Which worker thread answered: an operator chasing one worker's behaviour (and the tests) read it. */
function served<R extends { headers: Headers }>(response: R, worker: number | undefined): R {
  response.headers.set('x-served-by', `worker-${worker ?? 'unknown'}`);
  return response;
}

async function dispatch(
  routes: readonly Route[],
  deps: RouterDeps,
  request: HarperHttpRequest,
  /** The request target in origin form (originForm), as the middleware matched it. */
  url: string,
): Promise<HarperHttpResponse & { headers: Headers }> {
  const q = url.indexOf('?');
  const pathname = q >= 0 ? url.slice(0, q) : url;
  const method = String(request.method ?? 'GET').toUpperCase();
  const get: HeaderGet = (n) => request.headers?.get?.(n);
  try {
    const { route: r, params, pathKnown } = findRoute(routes, method, pathname);
    // Authentication first: before any 404 or 405 could tell an anonymous caller what exists. Only an
    // exact public route (a probe, by method and path) answers without credentials.
    if (!request.user && r?.caller !== 'public') throw unauthenticated();
    if (!r) {
      const shown = echo(pathname);
      if (pathKnown)
        throw new HttpError(405, 'method_not_allowed', `${method.slice(0, 20)} is not allowed on ${shown}`);
      throw new HttpError(404, 'not_found', `no endpoint at ${shown}`);
    }
    authorize(request.user as HarperUser | undefined, r.caller, deps.config().queue, readOnly(r));
    let body: unknown = undefined;
    let rawBody: Buffer | undefined;
    let rawBodyBytes = 0;
    if (CHANGES_STATE.has(method)) {
      const cross = crossSiteProblem(get);
      if (cross) throw new HttpError(403, 'cross_site', cross);
      const media = mediaTypeProblem(get, r.octetStream);
      if (media.problem) throw new HttpError(415, 'unsupported_media_type', media.problem);
      const raw = await readBody(request._nodeRequest, r.maxBodyBytes());
      rawBodyBytes = raw.length;
      if (media.octet) rawBody = raw;
      else if (raw.length > 0) body = parseJsonBody(raw);
    }
    const result = await r.handler({
      method,
      path: pathname,
      params,
      query: new URLSearchParams(q >= 0 ? url.slice(q + 1) : ''),
      user: request.user as HarperUser,
      body,
      rawBody,
      rawBodyBytes,
      headers: { get },
    });
    if (result.raw) {
      return {
        status: result.status ?? 200,
        headers: new Headers({ 'content-type': result.raw.contentType, ...(result.headers ?? {}) }),
        body: result.raw.data,
      };
    }
    // A 204 has no body (a prerender fleet's result answer): no JSON `null`, no content type.
    if (result.status === 204)
      return { status: 204, headers: new Headers(result.headers ?? {}), body: undefined };
    return json(result.status ?? 200, result.body ?? null, result.headers);
  } catch (e) {
    if (e instanceof HttpError) {
      return errorResponse(e);
    }
    deps.log.error(`${method.slice(0, 20)} ${echo(pathname)} failed`, e);
    return json(500, { error: 'internal error; see the Harper log', code: 'internal' });
  }
}

export interface RouterDeps {
  /** Harper's middleware chain (`server.http`). */
  http: (fn: HarperMiddleware, opts?: Record<string, unknown>) => void;
  /** The roles each caller kind may use come from `queue.*Roles`. */
  config: () => QueueKeeperConfig;
  log: { error: (...args: unknown[]) => void };
  /** This worker's index, named in `x-served-by`. */
  workerIndex: () => number | undefined;
}

/**
 * A route anyone may call (crawlers carry no credentials, docs/serving.md): it answers Harper's request
 * itself, body and all, and never sees a user.
 */
export type PublicHandler = (request: HarperHttpRequest, target: string) => Promise<HarperHttpResponse>;

interface PublicRoute {
  /** A path prefix ending in '/'. */
  prefix: string;
  methods: readonly string[];
  handler: PublicHandler;
}

/** This worker's route table and the middleware that serves it. */
export class Router {
  private readonly routes: Route[] = [];
  private readonly publicRoutes: PublicRoute[] = [];
  private installed = false;
  /** Responses our dispatcher built (already in the API's shape), so the runFirst wrapper leaves them be. */
  private readonly ours = new WeakSet<object>();

  constructor(private readonly deps: RouterDeps) {}

  /** Registers an endpoint. The first registration of a method and path wins. */
  route(method: string, path: string, caller: Caller, handler: Handler, opts: RouteOptions = {}): void {
    const prefix = path.endsWith('/*');
    this.routes.push({
      method,
      path: prefix ? path.slice(0, -1) : path,
      prefix,
      caller,
      handler,
      maxBodyBytes: opts.maxBodyBytes ?? (() => DEFAULT_MAX_BODY),
      octetStream: opts.octetStream ?? false,
      observerRead: opts.observerRead ?? false,
    });
  }

  /** Registers every route of a module's table, in order, each handler given the module's dependencies. */
  register<D>(table: readonly RouteEntry<D>[], deps: D): void {
    for (const r of table)
      this.route(r.method, r.path, r.caller, (req) => r.handler(deps, req), r.options?.(deps));
  }

  /**
   * Registers an unauthenticated prefix route (`/p/*`). It runs first on Harper's chain, before
   * authentication, so credentials a crawler happens to send are never checked and a request is never
   * refused for them; the handler alone decides what the request sees.
   */
  publicRoute(methods: readonly string[], path: string, handler: PublicHandler): void {
    if (!path.endsWith('/*')) throw new Error(`a public route is a prefix ending in /*: ${path}`);
    this.publicRoutes.push({ prefix: path.slice(0, -1), methods, handler });
  }

  /**
   * The route table as registered: method, path (a prefix route's path ends in `/*`), caller, and whether
   * an observer role may call it. The route test compares it with docs/openapi.yaml.
   */
  table(): Array<{ method: string; path: string; caller: Caller; readOnly: boolean }> {
    const routes = this.routes.map((r) => ({
      method: r.method,
      path: r.prefix ? `${r.path}*` : r.path,
      caller: r.caller,
      readOnly: (r.caller === 'admin' || r.caller === 'feeder') && readOnly(r),
    }));
    const open = this.publicRoutes.flatMap((r) =>
      r.methods.map((method) => ({
        method,
        path: `${r.prefix}*`,
        caller: 'public' as const,
        readOnly: false,
      })),
    );
    return [...routes, ...open];
  }

  /** Registers the middleware on this worker (once). */
  install(): void {
    if (this.installed) return;
    this.installed = true;
    const { deps, routes, ours, publicRoutes } = this;
    if (publicRoutes.length > 0)
      deps.http(
        async (request, next) => {
          const target = originForm(request.url ?? '');
          const r = publicRoutes.find((p) => target.startsWith(p.prefix));
          if (r === undefined) return next(request);
          const method = String(request.method ?? 'GET').toUpperCase();
          if (!r.methods.includes(method))
            return json(
              405,
              { error: `${method.slice(0, 20)} is not allowed here`, code: 'method_not_allowed' },
              {
                allow: r.methods.join(', '),
              },
            );
          try {
            return await r.handler(request, target);
          } catch (e) {
            deps.log.error(`${method} ${r.prefix}… failed`, e);
            return json(500, { error: 'internal error; see the Harper log', code: 'internal' });
          }
        },
        { runFirst: true },
      );
    deps.http(async (request, next) => {
      const url: string = originForm(request.url ?? '');
      if (!hasOurPrefix(url)) return next(request);
      const res = served(await dispatch(routes, deps, request, url), deps.workerIndex());
      ours.add(res);
      return res;
    });
    // Harper refuses wrong credentials itself, before any route runs, with a bare {"error":"Login
    // failed"}; a refresh token sent as a Bearer token it stops with its "not found" (status -1, a plain
    // 404). Our middleware answers every request under our prefixes that reaches it, so one that comes
    // back without our answer and without a user was refused by Harper's authentication. Wrapping the
    // whole chain (runFirst) lets our paths answer that in the API's own shape.
    deps.http(
      async (request, next) => {
        const res = await next(request);
        if (res !== undefined && ours.has(res)) return res;
        if (!hasOurPrefix(originForm(request.url ?? ''))) return res;
        if (res?.status !== 401 && request.user) return res;
        return served(
          json(401, {
            error: 'authentication failed: the credentials were not accepted',
            code: 'unauthenticated',
          }),
          deps.workerIndex(),
        );
      },
      { runFirst: true },
    );
  }
}

/** Shape a handler result with a status and headers. */
export function reply(body: unknown, status = 200, headers?: Record<string, string>): ApiResponse {
  return { status, body, headers };
}
