// The FleetClient's channel mode (`channel: true`): its round trips go over one persistent WebSocket
// (./channel.ts) instead of `/render_queue/next`. A round trip sends the pending results and the free
// slots as credits; jobs arrive as the server pushes them, so the loop never polls an empty queue. The
// socket opens on the first round trip and again after it closed (its credits die with it; the loop's
// breaker and error backoff pace the reconnects). Each socket has a number: a job's result rides the
// socket that pushed the job while that socket is open, and goes over HTTP to the granting node once it
// closed, since a new socket may reach another node.
import { ChannelMessageError, FleetChannel, type ChannelOptions } from './channel.js';
import { FleetRefusedError } from './fleetOptions.js';
import type { Job, QueueStatus, ResultAnswer, WireResult } from './types.js';
import { describeError } from './transport.js';

export type LinkOutcome =
  | { answers: ResultAnswer[] }
  | { failure: string }
  | { refused: { status: number; code: string; message: string } };

export interface ChannelLinkDeps {
  options: ChannelOptions;
  /** Jobs pushed, with the server's clock minus ours and the number of the socket they came on. */
  onJobs: (jobs: Job[], skewMs: number, socket: number) => void;
  onStatus: (status: QueueStatus) => void;
  /** The socket closed: its credits are gone, so the loop has free slots to credit again. */
  onClose: () => void;
}

export class ChannelLink {
  private channel: FleetChannel | null = null;
  private opening: Promise<FleetChannel> | null = null;
  /** The number of the socket opened last. */
  private socket = 0;

  constructor(private readonly deps: ChannelLinkDeps) {}

  /** Credits the server still owes: slots already promised to jobs on their way. */
  get owed(): number {
    return this.channel?.isOpen ? this.channel.owed : 0;
  }

  /** Whether a result of a job pushed on socket `socket` can ride the channel now. */
  carries(socket: number | undefined): boolean {
    return socket !== undefined && socket === this.socket && this.channel?.isOpen === true;
  }

  /** One round trip: `results` applied and answered, then `credits` more jobs wanted. */
  async exchange(results: WireResult[], credits: number): Promise<LinkOutcome> {
    let channel: FleetChannel;
    try {
      channel = await this.open();
    } catch (e) {
      if (e instanceof FleetRefusedError)
        return { refused: { status: e.status, code: e.code, message: e.message } };
      return { failure: describeError(e) };
    }
    try {
      return { answers: await channel.report(results, credits) };
    } catch (e) {
      if (e instanceof ChannelMessageError)
        return { refused: { status: 400, code: e.code, message: e.message } };
      return { failure: describeError(e) };
    }
  }

  /** A fleet stopping: no more pushes (jobs already on their way still arrive and are rendered). */
  withdraw(): void {
    if (this.channel?.isOpen && this.channel.owed > 0) this.channel.withdraw().catch(() => {});
  }

  close(): void {
    this.channel?.close();
    this.channel = null;
  }

  private open(): Promise<FleetChannel> {
    if (this.channel?.isOpen) return Promise.resolve(this.channel);
    if (this.opening) return this.opening;
    const socket = ++this.socket;
    this.opening = FleetChannel.open(this.deps.options, {
      onJobs: (jobs, skew) => this.deps.onJobs(jobs, skew, socket),
      onStatus: (s) => this.deps.onStatus(s),
      onClose: () => this.deps.onClose(),
    })
      .then((c) => (this.channel = c))
      .finally(() => (this.opening = null));
    return this.opening;
  }
}
