// The HTTP front of queue-keeper. Harper's REST layer gives a custom resource no auth, answers a
// malformed JSON body with a 500 and needs `headers` on every status object, so our endpoints are served
// by one middleware registered after REST (request.user is already set there). In order, every request
// under our two prefixes is: authenticated (401 first, whatever the path or method, so an anonymous
// caller cannot map the routes), routed (404/405), authorised (403), and — when it changes state —
// checked for a same-origin browser context (403 cross_site), a JSON media type (415) and its endpoint's
// size limit (413, from content-length before buffering and again while reading), then parsed as UTF-8
// JSON of bounded depth (400). Every failure is `{error, code}`; a 500 is only ever our own fault.
import { HttpError, echo } from '../../util/http/errors.js';
import type { IncomingMessage } from 'node:http';
import {
  log,
  server,
  workerIndex,
  type HarperHttpRequest,
  type HarperHttpResponse,
  type HarperUser,
} from '../runtime/harper.js';
import { config } from '../runtime/config.js';

export type Caller = 'admin' | 'feeder' | 'discover' | 'fleet' | 'any';

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

interface Route {
  method: string;
  /** Exact path, or a prefix ending in '/' whose remaining segments become params. */
  path: string;
  prefix: boolean;
  caller: Caller;
  maxBodyBytes: () => number;
  octetStream: boolean;
  handler: Handler;
}

const routes: Route[] = [];
/** API.md: admin bodies (and any endpoint that names no other limit) are at most 1 MiB. */
export const DEFAULT_MAX_BODY = 1 << 20;
/**
 * Deeper JSON is refused before any handler sees it. Our deepest legitimate body is a route list in a
 * config update (4 levels); `JSON.stringify` of a value nested ~10,000 deep overflows the stack, so a
 * deep value echoed in an answer or a log line would be a 500 at will.
 */
export const MAX_JSON_DEPTH = 32;

export interface RouteOptions {
  maxBodyBytes?: () => number;
  /** The route also takes `application/octet-stream` (the raw-bytes result framing): `req.rawBody`. */
  octetStream?: boolean;
}

/** Registers an endpoint. The first registration of a method and path wins. */
export function route(
  method: string,
  path: string,
  caller: Caller,
  handler: Handler,
  opts: RouteOptions = {},
): void {
  const prefix = path.endsWith('/*');
  routes.push({
    method,
    path: prefix ? path.slice(0, -1) : path,
    prefix,
    caller,
    handler,
    maxBodyBytes: opts.maxBodyBytes ?? (() => DEFAULT_MAX_BODY),
    octetStream: opts.octetStream ?? false,
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
  return json(e.status, { error: e.message, code: e.code, ...(e.extra ?? {}) }, e.headers);
}

function unauthenticated(): HttpError {
  return new HttpError(401, 'unauthenticated', 'authentication required: send basic auth or a Harper token');
}

/** Whether a user may call as `caller`: super_user may do everything, others need a configured role. */
export function authorize(user: HarperUser | undefined, caller: Caller): void {
  if (!user) throw unauthenticated();
  if (caller === 'any') return;
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

type HeaderGet = (name: string) => string | undefined | null;

/**
 * Why a state-changing request must be refused as cross-site, or null. A browser marks where a request
 * comes from (`Sec-Fetch-Site`, `Origin`) and a page cannot forge either, while it can make an operator's
 * browser send stored Basic credentials with a form or fetch to us. Callers that are not browsers
 * (curl, fleets, feeders) send neither header and pass. The own origin is judged by host and port
 * against the `Host` header (which a page cannot set), not by scheme, so the console keeps working
 * behind a proxy that terminates TLS.
 */
export function crossSiteProblem(get: HeaderGet): string | null {
  const site = get('sec-fetch-site')?.trim().toLowerCase();
  if (site === 'cross-site' || site === 'same-site')
    return `the browser marks this request ${site}; it is refused`;
  const origin = get('origin');
  if (origin === undefined || origin === null) return null;
  const foreign = 'the Origin of this request is not this server; it is refused';
  const host = get('host');
  let o: URL;
  let own: URL;
  try {
    o = new URL(origin);
    if (o.protocol !== 'http:' && o.protocol !== 'https:') return foreign;
    // Parsed under the origin's scheme, so `host:443` and `host` compare equal for https.
    own = new URL(`${o.protocol}//${host ?? ''}`);
  } catch {
    return foreign; // `Origin: null` (sandboxed frames, file:) lands here too
  }
  return host && o.host === own.host && o.origin === origin.trim().toLowerCase() ? null : foreign;
}

/**
 * The body's media type rule (API.md): a body is `application/json` (a UTF-8 charset allowed), or
 * `application/octet-stream` where the route takes raw bytes. A request with no body and no content type
 * (hook rotate, enable, disable; an empty claim) has no media type to refuse and passes. A content type
 * with an empty body does not: HTML forms always send one, so refusing them closes the empty-body form
 * post too.
 */
export function mediaTypeProblem(
  get: HeaderGet,
  octetStream: boolean,
): { problem: string | null; octet: boolean } {
  const ct = get('content-type');
  if (ct === undefined || ct === null) {
    const len = get('content-length');
    const chunked = get('transfer-encoding') !== undefined && get('transfer-encoding') !== null;
    if (!chunked && (len === undefined || len === null || len.trim() === '0'))
      return { problem: null, octet: false };
    return { problem: 'a request body needs content-type: application/json', octet: false };
  }
  const [type, ...params] = ct.split(';').map((p) => p.trim().toLowerCase());
  const charsetOk = params.every((p) => !p.startsWith('charset=') || /^charset="?utf-?8"?$/.test(p));
  if (type === 'application/json' && charsetOk) return { problem: null, octet: false };
  if (octetStream && type === 'application/octet-stream') return { problem: null, octet: true };
  return {
    problem: `content-type must be application/json${octetStream ? ' or application/octet-stream' : ''} (UTF-8), not ${JSON.stringify(ct.slice(0, 100))}`,
    octet: false,
  };
}

function tooLarge(limit: number): HttpError {
  return new HttpError(413, 'payload_too_large', `the request body is larger than ${limit} bytes`);
}

/**
 * A refused body up to this size is read to its end (and dropped) before the 413 goes out, so the
 * client finishes sending and reads the answer instead of meeting a closed socket (EPIPE) mid-upload.
 * Past it the answer goes out at once and the connection is closed under the rest.
 */
const DRAIN_REFUSED_BYTES = 64 << 20;

/**
 * Reads the body up to `limit` bytes. Over the limit (declared, or counted while a chunked body arrives)
 * nothing more is buffered: the rest is read and discarded (up to DRAIN_REFUSED_BYTES) so the socket is
 * never left half-read, and the 413 is answered with `connection: close`, so a client streaming without
 * end is cut off after the answer. Never iterates the stream with `for await`: leaving that loop early
 * destroys the socket under the answer.
 */
function readBody(nodeReq: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(nodeReq.headers?.['content-length']);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    let settled = false;
    const refuse = (): void => {
      if (settled) return;
      settled = true;
      reject(tooLarge(limit));
    };
    if (Number.isFinite(declared) && declared > limit) {
      over = true;
      if (declared > DRAIN_REFUSED_BYTES) refuse();
    }
    const onData = (c: Buffer) => {
      size += c.length;
      if (over) {
        if (size > DRAIN_REFUSED_BYTES) refuse();
        return;
      }
      if (size > limit) {
        over = true;
        chunks.length = 0;
        if (size > DRAIN_REFUSED_BYTES) refuse();
        return;
      }
      chunks.push(c);
    };
    nodeReq.on('data', onData);
    nodeReq.once('end', () => {
      if (over) refuse();
      else if (!settled) {
        settled = true;
        resolve(Buffer.concat(chunks, size));
      }
    });
    nodeReq.once('error', (e: Error) => {
      if (settled) return;
      if (over) return refuse();
      settled = true;
      reject(new HttpError(400, 'invalid_body', `the request body could not be read: ${e.message}`));
    });
    nodeReq.once('close', () => {
      if (over) refuse();
    });
    nodeReq.resume?.();
  });
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Parses a UTF-8 JSON body; refuses invalid UTF-8 (never silently turned into U+FFFD) and deep nesting. */
export function parseJsonBody(raw: Buffer): unknown {
  let text: string;
  try {
    text = utf8.decode(raw);
  } catch {
    throw new HttpError(400, 'invalid_json', 'the request body is not valid UTF-8');
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (e) {
    throw new HttpError(
      400,
      'invalid_json',
      `the request body is not valid JSON: ${(e as Error).message.slice(0, 200)}`,
    );
  }
  if (depthOver(body, MAX_JSON_DEPTH))
    throw new HttpError(
      400,
      'invalid_json',
      `the request body is nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
  return body;
}

/** Iterative (a recursive walk would overflow on exactly the input it guards against). */
function depthOver(v: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[v, 1]];
  while (stack.length > 0) {
    const [x, d] = stack.pop()!;
    if (typeof x !== 'object' || x === null) continue;
    if (d > max) return true;
    for (const c of Array.isArray(x) ? x : Object.values(x))
      if (typeof c === 'object' && c !== null) stack.push([c, d + 1]);
  }
  return false;
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

function hasOurPrefix(url: string): boolean {
  return (
    url.startsWith('/render_queue/') ||
    url.startsWith('/prerender_admin/') ||
    // The bare prefixes too: `/render_queue` must not answer differently from `/render_queue/x`.
    /^\/(render_queue|prerender_admin)(\?|$)/.test(url)
  );
}

/** Methods that change state (API.md "Requests that change state"); PUT and PATCH have no routes here. */
const CHANGES_STATE = new Set(['POST', 'DELETE', 'PUT', 'PATCH']);

/** Which worker thread answered: an operator chasing one worker's behaviour (and the tests) read it. */
function served<R extends { headers: Headers }>(response: R): R {
  response.headers.set('x-served-by', `worker-${workerIndex() ?? 'unknown'}`);
  return response;
}

async function dispatch(request: HarperHttpRequest): Promise<HarperHttpResponse & { headers: Headers }> {
  const url: string = request.url ?? '/';
  const q = url.indexOf('?');
  const pathname = q >= 0 ? url.slice(0, q) : url;
  const method = String(request.method ?? 'GET').toUpperCase();
  const get: HeaderGet = (n) => request.headers?.get?.(n);
  let closeConnection = false;
  try {
    // Authentication first: before any 404 or 405 could tell an anonymous caller what exists.
    if (!request.user) throw unauthenticated();
    const { route: r, params, pathKnown } = findRoute(method, pathname);
    if (!r) {
      const shown = echo(pathname);
      if (pathKnown)
        throw new HttpError(405, 'method_not_allowed', `${method.slice(0, 20)} is not allowed on ${shown}`);
      throw new HttpError(404, 'not_found', `no endpoint at ${shown}`);
    }
    authorize(request.user as HarperUser | undefined, r.caller);
    let body: unknown = undefined;
    let rawBody: Buffer | undefined;
    let rawBodyBytes = 0;
    if (CHANGES_STATE.has(method)) {
      const cross = crossSiteProblem(get);
      if (cross) throw new HttpError(403, 'cross_site', cross);
      const media = mediaTypeProblem(get, r.octetStream);
      if (media.problem) throw new HttpError(415, 'unsupported_media_type', media.problem);
      let raw: Buffer;
      try {
        raw = await readBody(request._nodeRequest, r.maxBodyBytes());
      } catch (e) {
        if (e instanceof HttpError && e.status === 413) closeConnection = true;
        throw e;
      }
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
    return json(result.status ?? 200, result.body ?? null, result.headers);
  } catch (e) {
    if (e instanceof HttpError) {
      const res = errorResponse(e);
      if (closeConnection) res.headers.set('connection', 'close');
      return res;
    }
    log.error(`${method.slice(0, 20)} ${echo(pathname)} failed`, e);
    return json(500, { error: 'internal error; see the Harper log', code: 'internal' });
  }
}

let installed = false;

/** Registers the middleware on this worker (once). */
export function installHttp(): void {
  if (installed) return;
  installed = true;
  server.http(async (request, next) => {
    const url: string = request.url ?? '';
    if (!hasOurPrefix(url)) return next(request);
    const res = served(await dispatch(request));
    ours.add(res);
    return res;
  });
  // Harper refuses wrong credentials itself, before any route runs, with a bare {"error":"Login
  // failed"}. Wrapping the whole chain (runFirst) lets our paths answer that in the API's own shape.
  server.http(
    async (request, next) => {
      const res = await next(request);
      if (res?.status !== 401 || ours.has(res) || !hasOurPrefix(request.url ?? '')) return res;
      return served(
        json(401, {
          error: 'authentication failed: the credentials were not accepted',
          code: 'unauthenticated',
        }),
      );
    },
    { runFirst: true },
  );
}

/** Responses our dispatcher built (already in the API's shape), so the runFirst wrapper leaves them be. */
const ours = new WeakSet<object>();

/** Shape a handler result with a status and headers. */
export function reply(body: unknown, status = 200, headers?: Record<string, string>): ApiResponse {
  return { status, body, headers };
}
