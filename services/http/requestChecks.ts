// The checks a state-changing request passes before its handler runs (docs/fleets.md): a same-origin browser context, a JSON (or raw-bytes) media type, the endpoint's size limit, and
// a UTF-8 JSON body of bounded depth. Each is a plain function of the request; services/http/router.ts
// applies them in that order.
import type { IncomingMessage } from 'node:http';
import { HttpError } from '../runtime/httpError.js';

/**
 * Deeper JSON is refused before any handler sees it. Our deepest legitimate body is a route list in a
 * config update (4 levels); `JSON.stringify` of a value nested ~10,000 deep overflows the stack, so a
 * deep value echoed in an answer or a log line would be a 500 at will.
 */
export const MAX_JSON_DEPTH = 32;

export type HeaderGet = (name: string) => string | undefined | null;

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
 * The body's media type rule: a body is `application/json` (a charset allowed when it names
 * UTF-8 or US-ASCII), or `application/octet-stream` where the route takes raw bytes. A request with no body and no content type
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
  // JSON is UTF-8 (RFC 8259 §8.1): a charset parameter may say so, or name US-ASCII (a subset); any
  // other would have us misread its bytes.
  const charsetOk = params.every(
    (p) => !p.startsWith('charset=') || /^charset="?(?:utf-?8|us-ascii)"?$/.test(p),
  );
  if (type === 'application/json' && charsetOk) return { problem: null, octet: false };
  if (octetStream && type === 'application/octet-stream') return { problem: null, octet: true };
  return {
    problem: `content-type must be application/json${octetStream ? ' or application/octet-stream' : ''} (UTF-8), not ${JSON.stringify(ct.slice(0, 100))}`,
    octet: false,
  };
}

function tooLarge(limit: number, headers?: Record<string, string>): HttpError {
  return new HttpError(
    413,
    'payload_too_large',
    `the request body is larger than ${limit} bytes`,
    undefined,
    headers,
  );
}

/**
 * A refused body up to this much past its limit is still read to its end (and dropped), so a client that
 * is still sending finishes and reads the answer instead of meeting a closed socket (EPIPE) mid-upload.
 * Past it the answer closes the connection under the rest. Counted past the limit, not from zero: a
 * 70 MiB chunked batch against the 64 MiB `render.maxBatchBytes` still gets to read its 413.
 */
const DRAIN_REFUSED_BYTES = 64 << 20;

/**
 * Reads the body up to `limit` bytes; nothing over the limit is ever buffered.
 * - A length declared in content-length over the limit is answered 413 at once, without waiting for the
 *   body; the rest is read and dropped behind the answer, so the connection serves its next request. A
 *   declared length more than DRAIN_REFUSED_BYTES past the limit is answered with `connection: close`
 *   and not read.
 * - A chunked body has no declared end: once it crosses the limit the rest is read and dropped to its end
 *   and then answered 413 with `connection: close`, or answered at once (closing) when it runs more than
 *   DRAIN_REFUSED_BYTES past the limit.
 * Never iterates the stream with `for await`: leaving that loop early destroys the socket under the answer.
 */
export function readBody(nodeReq: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(nodeReq.headers?.['content-length']);
  const drainUpTo = limit + DRAIN_REFUSED_BYTES;
  return new Promise((resolve, reject) => {
    // Closed while the request waited for auth, before anything listened: no 'close' is coming again.
    if (nodeReq.destroyed && !nodeReq.readableEnded)
      return reject(
        new HttpError(400, 'invalid_body', 'the connection closed before the request body ended'),
      );
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    let settled = false;
    const refuse = (close: boolean): void => {
      if (settled) return;
      settled = true;
      reject(close ? tooLarge(limit, { connection: 'close' }) : tooLarge(limit));
    };
    if (Number.isFinite(declared) && declared > limit) {
      // Refused before a byte is read; node's parser delivers no more than the declared length.
      if (declared > drainUpTo) return refuse(true);
      over = true;
      refuse(false);
    }
    const onData = (c: Buffer) => {
      size += c.length;
      if (!over && size > limit) {
        over = true;
        chunks.length = 0;
      }
      if (!over) chunks.push(c);
      else if (size > drainUpTo) refuse(true);
    };
    nodeReq.on('data', onData);
    nodeReq.once('end', () => {
      if (over) refuse(true);
      else if (!settled) {
        settled = true;
        resolve(Buffer.concat(chunks, size));
      }
    });
    nodeReq.once('error', (e: Error) => {
      if (over) return refuse(true);
      if (settled) return;
      settled = true;
      reject(new HttpError(400, 'invalid_body', `the request body could not be read: ${e.message}`));
    });
    nodeReq.once('close', () => {
      if (over) return refuse(true);
      if (!settled) {
        settled = true;
        reject(new HttpError(400, 'invalid_body', 'the connection closed before the request body ended'));
      }
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
