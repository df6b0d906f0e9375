// Following a replicated table on this worker: read it, subscribe, apply each event, and when the
// subscription fails or ends, wait `retryMs`, read again and subscribe again (an on-demand duty on the
// worker's DutyScheduler). RuntimeConfig (QueueConfigOverride) and NodeControl (QueueControl) follow their
// tables this way; the keeper's RenderSchedule subscription has its own rules (subscribe before the walk,
// events win over walked values: services/keeper/service.ts) and does not.
import { onWake, type DutyHandle, type DutyScheduler } from '../../util/duties/scheduler.js';

/** What Harper's `table.subscribe()` answers, as far as a follower uses it. */
export interface TableSubscription<E> extends AsyncIterable<E> {
  end?: () => void;
  return?: () => unknown;
}

/** Ends a Harper subscription, quietly: it may be closed already, and its return() may reject. */
export function endSubscription(s: { end?: () => void; return?: () => unknown } | null | undefined): void {
  try {
    s?.end?.();
    // A stream's return() may hand back a promise that rejects; never let that go unhandled.
    void Promise.resolve(s?.return?.()).catch(() => undefined);
  } catch {
    // already closed
  }
}

export interface TableFollowerDeps<E> {
  /** Names the duty and the log line (`QueueControl subscription failed; …`). */
  name: string;
  scheduler: DutyScheduler;
  retryMs: number;
  /** Reads the table's current state: before the first subscription and again after every gap. */
  reload: () => Promise<void>;
  subscribe: () => Promise<TableSubscription<E>>;
  /** Applies one event; awaited, so events apply in order. */
  onEvent: (event: E) => void | Promise<void>;
  log: { error: (...args: unknown[]) => void };
}

export class TableFollower<E> {
  private started = false;
  private stopped = false;
  private stream: TableSubscription<E> | null = null;
  private resubscribe: DutyHandle | null = null;

  constructor(private readonly deps: TableFollowerDeps<E>) {}

  /** Reads the table (a failure here is the caller's: nothing is followed yet), then follows it. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await this.deps.reload();
    this.resubscribe = this.deps.scheduler.add(
      {
        name: `${this.deps.name} resubscribe`,
        runOnce: async () => {
          // A failed read still subscribes: the events that follow bring the state back, and a
          // follower that stopped subscribing would never be woken again.
          await this.deps
            .reload()
            .catch((e: unknown) => this.deps.log.error(`${this.deps.name} read failed`, e));
          await this.follow();
          return {};
        },
      },
      onWake(() => this.deps.retryMs),
    );
    void this.follow();
  }

  /** Closes the subscription and stops the resubscribe duty. */
  async stop(): Promise<void> {
    this.stopped = true;
    const s = this.stream;
    this.stream = null;
    endSubscription(s);
    await this.resubscribe?.stop();
  }

  private async follow(): Promise<void> {
    if (this.stopped) return;
    let sub: TableSubscription<E>;
    try {
      sub = await this.deps.subscribe();
    } catch (e) {
      this.closed(e);
      return;
    }
    this.stream = sub;
    void (async () => {
      try {
        for await (const ev of sub) {
          if (this.stream !== sub) return;
          await this.deps.onEvent(ev);
        }
        if (this.stream === sub) this.closed();
      } catch (e) {
        if (this.stream === sub) this.closed(e);
      }
    })();
  }

  private closed(err?: unknown): void {
    this.stream = null;
    if (this.stopped) return;
    if (err !== undefined)
      this.deps.log.error(
        `${this.deps.name} subscription failed; retrying in ${this.deps.retryMs / 1000} s`,
        err,
      );
    this.resubscribe?.wake();
  }
}
