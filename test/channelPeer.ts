// A bare WebSocket peer of /render_queue/channel for integration tests and benches: it records every
// frame, and `ask` sends a message with a fresh ref and waits for the answer that carries it. It speaks
// the wire format directly (undici's WebSocket), so a test of the server does not go through the fleet
// client's channel module.
import { WebSocket } from 'undici';
import type { Job } from './api.js';
import type { Credentials } from './harness.js';

/** A job as the channel pushes it: the same shape `claim` answers. */
export type ChannelJob = Job;

export interface ChannelFrame {
  type?: 'ready' | 'ack' | 'jobs' | 'status';
  ref?: string | number;
  error?: string;
  code?: string;
  credits?: number;
  status?: string;
  jobs?: ChannelJob[];
  results?: Array<{
    id: string | null;
    accepted: boolean;
    nextRenderTime?: number;
    code?: string;
    duplicate?: boolean;
  }>;
  [k: string]: unknown;
}

export class ChannelPeer {
  readonly frames: ChannelFrame[] = [];
  /** Every job pushed to this socket, in order. */
  readonly jobs: ChannelJob[] = [];
  closed: { code: number; reason: string } | null = null;
  onJobs: ((jobs: ChannelJob[]) => void) | null = null;
  private waiters: Array<() => void> = [];
  private refs = 0;

  private constructor(private readonly socket: WebSocket) {}

  /** Opens a socket; resolves once the server said `ready`, or once it closed (a refusal). */
  static open(
    baseUrl: string,
    auth: Credentials | null,
    headers: Record<string, string> = {},
  ): Promise<ChannelPeer> {
    const all = { ...headers };
    if (auth)
      all.authorization = 'Basic ' + Buffer.from(`${auth.username}:${auth.password}`).toString('base64');
    const socket = new WebSocket(baseUrl.replace(/^http/, 'ws') + '/render_queue/channel', { headers: all });
    const peer = new ChannelPeer(socket);
    socket.addEventListener('message', (e) => {
      const frame = JSON.parse(String(e.data)) as ChannelFrame;
      peer.frames.push(frame);
      if (frame.type === 'jobs' && frame.jobs) {
        peer.jobs.push(...frame.jobs);
        peer.onJobs?.(frame.jobs);
      }
      peer.notify();
    });
    socket.addEventListener('close', (e) => {
      peer.closed = { code: e.code, reason: e.reason };
      peer.notify();
    });
    socket.addEventListener('error', () => peer.notify());
    return peer
      .next((f) => f.type === 'ready')
      .then(
        () => peer,
        () => peer,
      );
  }

  get ready(): boolean {
    return this.frames.some((f) => f.type === 'ready');
  }

  send(message: unknown): void {
    this.socket.send(
      typeof message === 'string' || Buffer.isBuffer(message) ? message : JSON.stringify(message),
    );
  }

  /** Sends `message` with a new ref; resolves with the ack or error frame that carries it. */
  ask(message: Record<string, unknown>, ms = 15_000): Promise<ChannelFrame> {
    const ref = `r${++this.refs}`;
    this.send({ ...message, ref });
    return this.next((f) => f.ref === ref, ms);
  }

  /** The first frame (already received or coming) that satisfies `pred`; rejects on close or timeout. */
  next(pred: (f: ChannelFrame) => boolean, ms = 15_000): Promise<ChannelFrame> {
    return new Promise((resolve, reject) => {
      const deadline = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== check);
        reject(
          new Error(
            `no matching channel frame within ${ms} ms; saw ${JSON.stringify(this.frames.slice(-5))}`,
          ),
        );
      }, ms);
      const check = () => {
        const f = this.frames.find(pred);
        if (f || this.closed) {
          clearTimeout(deadline);
          this.waiters = this.waiters.filter((w) => w !== check);
          if (f) resolve(f);
          else reject(new Error(`the channel closed (${this.closed!.code} ${this.closed!.reason})`));
        }
      };
      this.waiters.push(check);
      check();
    });
  }

  /** Resolves once the socket has closed (with its code and reason). */
  async whenClosed(ms = 15_000): Promise<{ code: number; reason: string }> {
    await this.next(() => false, ms).catch(() => undefined);
    if (!this.closed) throw new Error('the channel did not close');
    return this.closed;
  }

  close(): void {
    this.socket.close();
  }

  private notify(): void {
    for (const w of [...this.waiters]) w();
  }
}
