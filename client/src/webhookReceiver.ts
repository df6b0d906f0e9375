// A small Standard Webhooks receiver that wakes the claim loop when queue-keeper signals that work
// sits unclaimed. It verifies every delivery with the `standardwebhooks` library, accepts either of the
// two signatures a rotation sends, refuses stale timestamps and does not act on a webhook-id twice.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import type { Clock } from './clock.js';

export interface WebhookReceiverOptions {
  /** Port to listen on (0 = any free port; read it back from `fleet.webhookAddress`). */
  port: number;
  /** Interface to bind; default 127.0.0.1 (put a TLS proxy in front: queue-keeper sends to https only). */
  host?: string;
  /** Only this path is served; default `/`. */
  path?: string;
  /**
   * The hook's secret(s) (`whsec_…`). Give two while you move to a rotated secret: a delivery verifies
   * if any of its signatures matches any of these.
   */
  secrets: string | string[];
  /**
   * A delivery whose timestamp is further than this from now is refused (default and maximum 300 s, the
   * Standard Webhooks tolerance: the library refuses anything beyond it whatever is set here).
   */
  toleranceSec?: number;
}

/** What a verified delivery told us (the fields of a queue-keeper webhook body). */
export interface WebhookDelivery {
  id: string;
  type?: string;
  reason?: string;
  queue?: string;
  fleet?: string;
}

export type Verdict =
  | { ok: true; delivery: WebhookDelivery }
  | {
      ok: false;
      status: number;
      reason: 'missing_headers' | 'stale' | 'bad_signature' | 'replay' | 'bad_body';
    };

/** The library's own tolerance; a larger setting here would be silently overruled by it. */
const MAX_TOLERANCE_SEC = 300;
/** A delivery body is a few hundred bytes; anything near this is not queue-keeper. */
const MAX_BODY_BYTES = 64 << 10;
/** Bounds the replay memory: a flood of valid ids cannot grow it without end. */
const MAX_REMEMBERED_IDS = 10_000;

/** Verification with an injected clock, separate from the HTTP server so tests can call it directly. */
export class WebhookVerifier {
  private readonly hooks: Webhook[];
  private readonly toleranceMs: number;
  /** webhook-id → when we may forget it (its timestamp can no longer pass the tolerance check). */
  private readonly seen = new Map<string, number>();

  constructor(
    secrets: string | string[],
    toleranceSec: number | undefined,
    private readonly clock: Clock,
  ) {
    const list = (Array.isArray(secrets) ? secrets : [secrets]).filter((s) => s.length > 0);
    if (list.length === 0) throw new TypeError('webhook.secrets needs at least one secret');
    this.hooks = list.map((s) => new Webhook(s));
    const tol = toleranceSec ?? MAX_TOLERANCE_SEC;
    if (!(tol > 0 && tol <= MAX_TOLERANCE_SEC))
      throw new RangeError(`webhook.toleranceSec must be in (0, ${MAX_TOLERANCE_SEC}]`);
    this.toleranceMs = tol * 1000;
  }

  verify(headers: Record<string, string | string[] | undefined>, raw: string): Verdict {
    const one = (k: string) => {
      const v = headers[k];
      return typeof v === 'string' ? v : undefined;
    };
    const id = one('webhook-id');
    const ts = one('webhook-timestamp');
    const sig = one('webhook-signature');
    if (!id || !ts || !sig) return { ok: false, status: 400, reason: 'missing_headers' };
    const now = this.clock.now();
    const tsMs = Number(ts) * 1000;
    if (!/^\d{1,12}$/.test(ts) || Math.abs(now - tsMs) > this.toleranceMs)
      return { ok: false, status: 400, reason: 'stale' };
    const plain = { 'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': sig };
    // During a rotation the header carries `v1,<new> v1,<old>`; the library tries each signature, and
    // we try each secret we hold, so either side of the rotation verifies.
    const valid = this.hooks.some((h) => {
      try {
        h.verify(raw, plain, { jsonParse: false });
        return true;
      } catch {
        return false;
      }
    });
    if (!valid) return { ok: false, status: 401, reason: 'bad_signature' };
    this.forget(now);
    if (this.seen.has(id)) return { ok: false, status: 200, reason: 'replay' };
    let body: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(raw);
      if (typeof parsed !== 'object' || parsed === null) throw new TypeError('not an object');
      body = parsed as Record<string, unknown>;
    } catch {
      return { ok: false, status: 400, reason: 'bad_body' };
    }
    // Remember the id as long as a delivery carrying it could still pass the timestamp check.
    this.seen.set(id, Math.max(now, tsMs) + this.toleranceMs);
    if (this.seen.size > MAX_REMEMBERED_IDS) this.seen.delete(this.seen.keys().next().value!);
    const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
    return {
      ok: true,
      delivery: {
        id,
        type: str(body.type),
        reason: str(body.reason),
        queue: str(body.queue),
        fleet: str(body.fleet),
      },
    };
  }

  private forget(now: number): void {
    for (const [id, until] of this.seen) {
      if (until > now) break; // insertion order is close to expiry order; a late straggler waits a round
      this.seen.delete(id);
    }
  }
}

export interface WebhookEvents {
  onDelivery(d: WebhookDelivery): void;
  onRejected(reason: Exclude<Verdict, { ok: true }>['reason']): void;
}

/** The HTTP side: one path, POST only, bounded body, answers before it wakes anything. */
export class WebhookReceiver {
  private server: http.Server | null = null;
  private readonly verifier: WebhookVerifier;
  private readonly path: string;

  constructor(
    private readonly opts: WebhookReceiverOptions,
    private readonly events: WebhookEvents,
    clock: Clock,
  ) {
    this.verifier = new WebhookVerifier(opts.secrets, opts.toleranceSec, clock);
    this.path = opts.path ?? '/';
  }

  async listen(): Promise<AddressInfo> {
    const server = http.createServer((req, res) => this.handle(req, res));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.opts.port, this.opts.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    return server.address() as AddressInfo;
  }

  address(): AddressInfo | null {
    return (this.server?.address() as AddressInfo | null) ?? null;
  }

  async close(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (!s) return;
    await new Promise<void>((resolve) => {
      s.close(() => resolve());
      s.closeAllConnections();
    });
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const answer = (status: number, body: Record<string, unknown>) => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    if ((req.url ?? '/').split('?')[0] !== this.path) return answer(404, { error: 'not found' });
    if (req.method !== 'POST') return answer(405, { error: 'POST only' });
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > MAX_BODY_BYTES) {
      answer(413, { error: 'body too large' });
      req.destroy();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        answer(413, { error: 'body too large' });
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (size > MAX_BODY_BYTES) return;
      const v = this.verifier.verify(req.headers, Buffer.concat(chunks).toString('utf8'));
      if (v.ok) {
        answer(200, { accepted: true });
        this.events.onDelivery(v.delivery);
        return;
      }
      // A replay is answered 2xx: it is usually queue-keeper retrying after our answer was lost, and a
      // 4xx would count against the hook's health. It wakes nothing either way.
      answer(v.status, v.status === 200 ? { accepted: false, reason: v.reason } : { error: v.reason });
      this.events.onRejected(v.reason);
    });
  }
}
