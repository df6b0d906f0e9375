// A fake queue-keeper on 127.0.0.1 that speaks just enough of the fleet API for the client: it records every
// request (with the fake clock's time) and answers from a handler the test sets. JSON calls and
// raw-bytes results (job_result with `x-metadata-size`) are recorded and answered apart.
import http from 'node:http';
import { closeLoopback, listenLoopback } from './loopback.js';
import type { FakeClock } from './fakeClock.js';
import type { Job, WireResult } from '../src/types.js';

export interface Seen {
  path: string;
  at: number;
  auth: string | undefined;
  body: { results?: WireResult[]; limit?: number; queues?: string[] };
}

export interface Reply {
  status?: number;
  queueStatus?: string;
  json?: unknown;
  /** Drop the connection without answering (a lost answer). */
  destroy?: boolean;
}

export type Handler = (req: Seen, index: number) => Reply | Promise<Reply>;

/** One result in the raw-bytes framing, as it arrived. */
export interface SeenFramed {
  path: string;
  at: number;
  auth: string | undefined;
  contentType: string | undefined;
  /** The `x-metadata-size` header as sent. */
  metadataSize: string | undefined;
  /** The request body exactly as received. */
  raw: Buffer;
  /** The first `metadataSize` bytes, parsed. */
  metadata: Partial<WireResult>;
  /** The bytes after them. */
  page: Buffer;
}

export type FramedHandler = (req: SeenFramed, index: number) => Reply | Promise<Reply>;

/** Accepts every result; hands out no jobs. */
export function acceptAll(req: Seen): { results: unknown[] } {
  return {
    results: (req.body.results ?? []).map((r) => ({ id: r.id, accepted: true, nextRenderTime: 0 })),
  };
}

export class FakeFleetServer {
  readonly seen: Seen[] = [];
  handler: Handler = (req) => ({ queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } });
  readonly framed: SeenFramed[] = [];
  framedHandler: FramedHandler = () => ({ json: { accepted: true, nextRenderTime: 0 } });
  private server: http.Server | null = null;
  url = '';
  /** The server's clock minus the client's (its Date header and job expiries follow it). */
  offsetMs = 0;

  constructor(private readonly clock: FakeClock) {}

  async start(): Promise<string> {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', async () => {
        const raw = Buffer.concat(chunks);
        let reply: Reply;
        if (req.headers['content-type'] === 'application/octet-stream') {
          const metadataSize = req.headers['x-metadata-size'] as string | undefined;
          const n = Number(metadataSize);
          const seen: SeenFramed = {
            path: req.url ?? '/',
            at: this.clock.now(),
            auth: req.headers.authorization,
            contentType: req.headers['content-type'],
            metadataSize,
            raw,
            metadata: JSON.parse(raw.subarray(0, n).toString('utf8')),
            page: raw.subarray(n),
          };
          reply = await this.framedHandler(seen, this.framed.push(seen) - 1);
        } else {
          const text = raw.toString('utf8');
          const seen: Seen = {
            path: req.url ?? '/',
            at: this.clock.now(),
            auth: req.headers.authorization,
            body: text ? JSON.parse(text) : {},
          };
          reply = await this.handler(seen, this.seen.push(seen) - 1);
        }
        if (reply.destroy) {
          req.socket.destroy();
          return;
        }
        const headers: Record<string, string> = {
          'content-type': 'application/json',
          date: new Date(this.clock.now() + this.offsetMs).toUTCString(),
        };
        if (reply.queueStatus) headers['x-queue-status'] = reply.queueStatus;
        res.writeHead(reply.status ?? 200, headers).end(JSON.stringify(reply.json ?? {}));
      });
    });
    this.url = await listenLoopback(this.server);
    return this.url;
  }

  async stop(): Promise<void> {
    if (this.server) await closeLoopback(this.server);
  }

  /** A job whose lease lasts `leaseMs` from now on the fake clock. */
  job(id: string, leaseMs = 600_000, queue = 'product'): Job {
    return {
      id,
      url: id,
      queue,
      isFromSitemap: true,
      expiresAt: this.clock.now() + this.offsetMs + leaseMs,
      leaseToken: `tok-${id}`,
      // This server's own origin: the result comes back here, as from a single node.
      callbackOrigin: this.url,
      deviceType: 'desktop',
    };
  }
}
