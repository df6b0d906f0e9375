// The client's only way to the server: POSTs with basic auth over one undici pool, as JSON or as one
// result in the raw-bytes framing (job_result with `x-metadata-size`), to the configured URL or to the
// origin of the node that granted a result's lease (./resultRoutes.ts decides which origins qualify). It
// answers status, headers and parsed JSON; a network error or timeout throws (the caller decides what
// that means for the breaker).
import { Agent, type Dispatcher } from 'undici';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  json: unknown;
}

export interface TransportOptions {
  url: string;
  username: string;
  password: string;
  /** Headers and body must each arrive within this; a hung server is a network error, not a hang. */
  requestTimeoutMs: number;
  /** Injected for tests or for a proxy; the client closes only an agent it made. */
  dispatcher?: Dispatcher;
}

export class Transport {
  private readonly base: URL;
  private readonly auth: string;
  private readonly dispatcher: Dispatcher;
  private readonly ownsDispatcher: boolean;

  constructor(private readonly opts: TransportOptions) {
    this.base = new URL(opts.url.endsWith('/') ? opts.url : opts.url + '/');
    if (this.base.protocol !== 'http:' && this.base.protocol !== 'https:')
      throw new TypeError(`url must be http(s), not ${this.base.protocol}`);
    this.auth = 'Basic ' + Buffer.from(`${opts.username}:${opts.password}`).toString('base64');
    this.ownsDispatcher = !opts.dispatcher;
    this.dispatcher =
      opts.dispatcher ??
      new Agent({ keepAliveTimeout: 10_000, connections: 8, connectTimeout: opts.requestTimeoutMs });
  }

  /** The server origin and path prefix, for log lines. */
  where(): string {
    return this.base.href.replace(/\/$/, '');
  }

  /** The configured URL (with a trailing slash). */
  get baseUrl(): URL {
    return new URL(this.base.href);
  }

  /** JSON to `path` under the configured URL, or under `origin` (a node's origin, no path) when given. */
  post(path: string, body: unknown, origin: string | null = null): Promise<Answer> {
    const payload = Buffer.from(JSON.stringify(body), 'utf8');
    return this.send(path, payload, { 'content-type': 'application/json' }, origin);
  }

  /**
   * One result as raw bytes: its JSON metadata (without `body`), then the page as UTF-8, with
   * `x-metadata-size` giving the metadata's byte length. The page is never JSON-escaped.
   */
  postFramed(path: string, metadata: unknown, page: string, origin: string | null = null): Promise<Answer> {
    const meta = Buffer.from(JSON.stringify(metadata), 'utf8');
    return this.send(
      path,
      Buffer.concat([meta, Buffer.from(page, 'utf8')]),
      { 'content-type': 'application/octet-stream', 'x-metadata-size': String(meta.length) },
      origin,
    );
  }

  private async send(
    path: string,
    payload: Buffer,
    headers: Record<string, string>,
    origin: string | null,
  ): Promise<Answer> {
    const target = new URL(path.replace(/^\//, ''), origin === null ? this.base : `${origin}/`);
    const r = await this.dispatcher.request({
      origin: target.origin,
      path: target.pathname + target.search,
      method: 'POST',
      headers: {
        authorization: this.auth,
        ...headers,
        'content-length': String(payload.length),
      },
      body: payload,
      headersTimeout: this.opts.requestTimeoutMs,
      bodyTimeout: this.opts.requestTimeoutMs,
    });
    const text = await r.body.text();
    let json: unknown = undefined;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    return { status: r.statusCode, headers: r.headers, json };
  }

  async close(): Promise<void> {
    if (this.ownsDispatcher) await this.dispatcher.close();
  }
}

/** What a thrown request says, for a log line: the network error code when there is one. */
export function describeError(e: unknown): string {
  const code = (e as { code?: unknown })?.code;
  return typeof code === 'string' ? code : e instanceof Error ? e.message : String(e);
}
