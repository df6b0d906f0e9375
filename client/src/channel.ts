// The persistent channel to queue-keeper (`/render_queue/channel`): one WebSocket a fleet opens once. It sends credits (jobs it can take) and results; the
// server pushes jobs while credits last and holds them while nothing is due. Every message is answered
// in order, by an `ack` or an `{error, code}` frame carrying the message's `ref`.
import { WebSocket, type Dispatcher } from 'undici';
import { FleetRefusedError } from './fleetOptions.js';
import type { Job, QueueStatus, ResultAnswer, WireResult } from './types.js';

/** Close codes the server refuses a socket with (Harper's codes for 401 and 403). */
const REFUSALS: Record<number, number> = { 3000: 401, 3003: 403 };

export interface ChannelOptions {
  /** The queue-keeper HTTP base, e.g. `http://127.0.0.1:9926` (ws:// is derived from it). */
  url: string;
  username: string;
  password: string;
  /** Narrow the pushes to these queues (must lie in the fleet's scope). */
  queues?: string[];
  /** The server must say `ready` within this; default 30 s. */
  openTimeoutMs?: number;
  dispatcher?: Dispatcher;
}

export interface ChannelHandlers {
  /** Jobs pushed under the credits given; `skewMs` is the server's clock minus ours. */
  onJobs(jobs: Job[], skewMs: number): void;
  /** A claim for held credits granted nothing: the node's status then. */
  onStatus?(status: QueueStatus): void;
  /** The socket closed (by either side); every credit outstanding is gone with it. */
  onClose?(code: number, reason: string): void;
}

interface Frame {
  type?: string;
  ref?: string;
  error?: string;
  code?: string;
  credits?: number;
  status?: QueueStatus;
  jobs?: Job[];
  now?: number;
  results?: ResultAnswer[];
}

/** What the server said it takes, in its `ready` frame. */
export interface ChannelLimits {
  maxMessageBytes: number;
  maxResults: number;
  maxCredits: number;
}

/** A channel refused a message: its `{error, code}` frame. */
export class ChannelMessageError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ChannelMessageError';
  }
}

export class FleetChannel {
  private readonly pending = new Map<string, { resolve: (f: Frame) => void; reject: (e: Error) => void }>();
  private refs = 0;
  private owedNow = 0;
  private closedWith: { code: number; reason: string } | null = null;
  limits: ChannelLimits = { maxMessageBytes: 0, maxResults: 100, maxCredits: 0 };

  private constructor(
    private readonly socket: WebSocket,
    private readonly handlers: ChannelHandlers,
  ) {}

  /**
   * Opens the channel and waits for the server's `ready`. Rejects with FleetRefusedError when the server
   * refuses the credentials, the role or the fleet, and with an Error when it cannot be reached.
   */
  static open(opts: ChannelOptions, handlers: ChannelHandlers): Promise<FleetChannel> {
    const base = new URL(opts.url.endsWith('/') ? opts.url : opts.url + '/');
    if (base.protocol !== 'http:' && base.protocol !== 'https:')
      throw new TypeError(`url must be http(s), not ${base.protocol}`);
    const target = new URL('render_queue/channel', base);
    target.protocol = base.protocol === 'https:' ? 'wss:' : 'ws:';
    const auth = 'Basic ' + Buffer.from(`${opts.username}:${opts.password}`).toString('base64');
    const socket = new WebSocket(target.href, {
      headers: { authorization: auth },
      ...(opts.dispatcher ? { dispatcher: opts.dispatcher } : {}),
    });
    const channel = new FleetChannel(socket, handlers);
    return new Promise((resolve, reject) => {
      let settled = false;
      let refusal: Frame | null = null;
      const timer = setTimeout(() => {
        if (settled) return;
        settled = true;
        socket.close();
        reject(new Error(`the channel did not open within ${opts.openTimeoutMs ?? 30_000} ms`));
      }, opts.openTimeoutMs ?? 30_000);
      socket.addEventListener('message', (e) => {
        let frame: Frame;
        try {
          frame = JSON.parse(String(e.data)) as Frame;
        } catch {
          return;
        }
        if (settled || frame.ref !== undefined) return channel.received(frame);
        if (frame.type === 'ready') {
          settled = true;
          clearTimeout(timer);
          channel.limits = {
            maxMessageBytes: Number((frame as { maxMessageBytes?: unknown }).maxMessageBytes) || 0,
            maxResults: Number((frame as { maxResults?: unknown }).maxResults) || 100,
            maxCredits: Number((frame as { maxCredits?: unknown }).maxCredits) || 0,
          };
          if (!opts.queues) return resolve(channel);
          // The narrowing is answered like any message: a queue outside the fleet's scope refuses the open.
          channel.ask({ queues: opts.queues }).then(
            () => resolve(channel),
            (err: unknown) => {
              socket.close();
              reject(
                err instanceof ChannelMessageError ? new FleetRefusedError(400, err.code, err.message) : err,
              );
            },
          );
        } else if (typeof frame.code === 'string') refusal = frame;
      });
      socket.addEventListener('close', (e) => {
        channel.closed(e.code, e.reason);
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        const status = REFUSALS[e.code];
        if (status !== undefined) {
          const code = refusal?.code ?? e.reason ?? `ws_${e.code}`;
          reject(
            new FleetRefusedError(status, code, `${refusal?.error ?? 'the channel was refused'} (${code})`),
          );
        } else reject(new Error(`the channel closed before it was ready (${e.code} ${e.reason})`));
      });
      // An error event is always followed by a close event, which settles.
      socket.addEventListener('error', () => {});
    });
  }

  /** Credits the server still owes this socket (given, not yet answered by a push). */
  get owed(): number {
    return this.owedNow;
  }

  get isOpen(): boolean {
    return this.closedWith === null;
  }

  /**
   * Sends results (answered in order) and `credits` more jobs wanted; resolves with the results'
   * answers once the server applied them. Rejects with ChannelMessageError when the server refused the
   * message (nothing of it was applied), and with an Error when the socket closed first.
   */
  async report(results: WireResult[], credits = 0): Promise<ResultAnswer[]> {
    const ack = await this.ask({
      ...(results.length > 0 ? { results } : {}),
      ...(credits > 0 ? { credits } : {}),
    });
    return Array.isArray(ack.results) ? ack.results : [];
  }

  /** Drops every credit outstanding: the server pushes nothing more until new credits come. */
  async withdraw(): Promise<void> {
    await this.ask({ withdraw: true });
    // Pushes before the ack were counted off already; none can follow it (messages apply in order).
    this.owedNow = 0;
  }

  close(): void {
    this.socket.close(1000);
  }

  private ask(message: Record<string, unknown>): Promise<Frame> {
    if (this.closedWith) return Promise.reject(new Error(`the channel is closed (${this.closedWith.code})`));
    const ref = `c${++this.refs}`;
    // Counted as owed at once: a push under these credits may arrive before the ack.
    const credits = typeof message.credits === 'number' ? message.credits : 0;
    this.owedNow += credits;
    return new Promise<Frame>((resolve, reject) => {
      this.pending.set(ref, { resolve, reject });
      this.send({ ...message, ref });
    }).catch((e: unknown) => {
      if (e instanceof ChannelMessageError) this.owedNow = Math.max(0, this.owedNow - credits);
      throw e;
    });
  }

  private send(message: Record<string, unknown>): void {
    this.socket.send(JSON.stringify(message));
  }

  private received(frame: Frame): void {
    if (frame.type === 'jobs' && Array.isArray(frame.jobs)) {
      this.owedNow = Math.max(0, this.owedNow - frame.jobs.length);
      const skew = typeof frame.now === 'number' ? frame.now - Date.now() : 0;
      this.handlers.onJobs(frame.jobs, Math.abs(skew) < 2_000 ? 0 : skew);
      return;
    }
    if (frame.type === 'status' && frame.status) {
      this.handlers.onStatus?.(frame.status);
      return;
    }
    const waiting = frame.ref !== undefined ? this.pending.get(frame.ref) : undefined;
    if (frame.type === 'ack') {
      if (waiting) {
        this.pending.delete(frame.ref!);
        waiting.resolve(frame);
      }
      return;
    }
    if (typeof frame.code === 'string') {
      const e = new ChannelMessageError(frame.code, frame.error ?? frame.code);
      if (waiting) {
        this.pending.delete(frame.ref!);
        waiting.reject(e);
      }
    }
  }

  private closed(code: number, reason: string): void {
    if (this.closedWith) return;
    this.closedWith = { code, reason };
    this.owedNow = 0;
    const e = new Error(`the channel closed (${code} ${reason})`);
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
    this.handlers.onClose?.(code, reason);
  }
}
