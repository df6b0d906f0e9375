// The HTTP front of queue-keeper. Harper's REST layer gives a custom resource no auth, answers a
// malformed JSON body with a 500 and needs `headers` on every status object, so our endpoints are served
// by one middleware registered after REST (request.user is already set there): we read and size-check
// the raw body, parse JSON ourselves, check roles, and always answer `{error, code}` on failure.
import { HttpError } from '../util/httpError.js';
import { log, server, workerIndex, type HarperUser } from './harper.js';
import { config } from './config.js';

export type Caller = 'admin' | 'feeder' | 'discover' | 'fleet' | 'any';

export interface ApiRequest {
  method: string;
  path: string;
  /** Path segments after the route's prefix (for `/prerender_admin/hooks/<id>/rotate`). */
  params: string[];
  query: URLSearchParams;
  user: HarperUser;
  body: unknown;
  /** The raw request body as text (used when a handler must count bytes exactly). */
  rawBodyBytes: number;
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

interface Route {
  method: string;
  /** Exact path, or a prefix ending in '/' whose remaining segments become params. */
  path: string;
  prefix: boolean;
  caller: Caller;
  maxBodyBytes: () => number;
  handler: Handler;
}

const routes: Route[] = [];
const DEFAULT_MAX_BODY = 1 << 20;

export function route(
  method: string,
  path: string,
  caller: Caller,
  handler: Handler,
  opts: { maxBodyBytes?: () => number } = {},
): void {
  const prefix = path.endsWith('/*');
  routes.push({
    method,
    path: prefix ? path.slice(0, -1) : path,
    prefix,
    caller,
    handler,
    maxBodyBytes: opts.maxBodyBytes ?? (() => DEFAULT_MAX_BODY),
  });
}

function json(status: number, body: unknown, headers: Record<string, string> = {}) {
  return {
    status,
    // A Headers instance, not a plain object: Harper's auth layer calls headers.set() on the response.
    headers: new Headers({ 'content-type': 'application/json', ...headers }),
    body: JSON.stringify(body),
  };
}

export function errorResponse(e: HttpError) {
  return json(e.status, { error: e.message, code: e.code, ...(e.extra ?? {}) });
}

/** Whether a user may call as `caller`: super_user may do everything, others need a configured role. */
export function authorize(user: HarperUser | undefined, caller: Caller): void {
  if (caller === 'any') return;
  if (!user)
    throw new HttpError(401, 'unauthenticated', 'authentication required: send basic auth or a Harper token');
  if (user.role?.permission?.super_user) return;
  const roleName = user.role?.role ?? '';
  const q = config().queue;
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

/* eslint-disable @typescript-eslint/no-explicit-any */
async function readBody(nodeReq: any, limit: number): Promise<Buffer> {
  const declared = Number(nodeReq.headers?.['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    nodeReq.resume?.();
    throw new HttpError(413, 'payload_too_large', `the request body is larger than ${limit} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of nodeReq as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > limit) {
      nodeReq.resume?.();
      throw new HttpError(413, 'payload_too_large', `the request body is larger than ${limit} bytes`);
    }
    chunks.push(c);
  }
  return Buffer.concat(chunks, size);
}

/** Path segments, percent-decoded; a malformed escape makes the path unknown (404), never a 500. */
function decodeParams(rest: string): string[] | null {
  try {
    return rest.split('/').map(decodeURIComponent);
  } catch {
    return null;
  }
}

function findRoute(
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

function hasOurPrefix(pathname: string): boolean {
  return pathname.startsWith('/render_queue/') || pathname.startsWith('/prerender_admin/');
}

/** Which worker thread answered: an operator chasing one worker's behaviour (and the tests) read it. */
function served(response: { headers: Headers }): { headers: Headers } {
  response.headers.set('x-served-by', `worker-${workerIndex() ?? 'unknown'}`);
  return response;
}

async function dispatch(request: any): Promise<any> {
  const url: string = request.url ?? '/';
  const q = url.indexOf('?');
  const pathname = q >= 0 ? url.slice(0, q) : url;
  const method = String(request.method ?? 'GET').toUpperCase();
  const { route: r, params, pathKnown } = findRoute(method, pathname);
  if (!r) {
    if (pathKnown)
      return json(405, { error: `${method} is not allowed on ${pathname}`, code: 'method_not_allowed' });
    return json(404, { error: `no endpoint at ${pathname}`, code: 'not_found' });
  }
  try {
    authorize(request.user as HarperUser | undefined, r.caller);
    let body: unknown = undefined;
    let rawBodyBytes = 0;
    if (method !== 'GET' && method !== 'HEAD') {
      const raw = await readBody(request._nodeRequest, r.maxBodyBytes());
      rawBodyBytes = raw.length;
      if (raw.length > 0) {
        try {
          body = JSON.parse(raw.toString('utf8'));
        } catch (e) {
          throw new HttpError(
            400,
            'invalid_json',
            `the request body is not valid JSON: ${(e as Error).message}`,
          );
        }
      }
    }
    const result = await r.handler({
      method,
      path: pathname,
      params,
      query: new URLSearchParams(q >= 0 ? url.slice(q + 1) : ''),
      user: request.user as HarperUser,
      body,
      rawBodyBytes,
      headers: { get: (n: string) => request.headers?.get?.(n) },
    });
    if (result.raw) {
      return {
        status: result.status ?? 200,
        headers: new Headers({ 'content-type': result.raw.contentType, ...(result.headers ?? {}) }),
        body: result.raw.data,
      };
    }
    return json(result.status ?? 200, result.body ?? null, result.headers);
  } catch (e) {
    if (e instanceof HttpError) return errorResponse(e);
    log.error(`${method} ${pathname} failed`, e);
    return json(500, { error: 'internal error; see the Harper log', code: 'internal' });
  }
}

let installed = false;

/** Registers the middleware on this worker (once). */
export function installHttp(): void {
  if (installed) return;
  installed = true;
  server.http(async (request: any, next: (r: any) => Promise<any>) => {
    const url: string = request.url ?? '';
    if (!hasOurPrefix(url)) return next(request);
    return served(await dispatch(request));
  });
}

/** Shape a handler result with a status and headers. */
export function reply(body: unknown, status = 200, headers?: Record<string, string>): ApiResponse {
  return { status, body, headers };
}
