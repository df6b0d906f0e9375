// Render-now waiters (docs/serving.md "Render now"): a request that may render now waits for its page by
// subscription, never by polling. One pair of subscriptions per key on this worker (the page, and the
// schedule row, whose rescheduling says a render ended without a page) serves every waiter of that key,
// so one render answers them all; at most `serving.renderNow.maxWaiting` wait at once per node.
import type { SchedulerTimer } from '../../util/duties/scheduler.js';
import { renderEndedWithoutPage } from '../../util/serving/freshness.js';
import type { NodeSlots } from '../../util/serving/nodeCounters.js';
import type { SubscriptionEvent } from '../runtime/harper.js';

/** `ended`: the page was written, or a result rescheduled the row without one (a failed render). */
export type WaitOutcome = 'ended' | 'timeout' | 'full';

type PageEvents = AsyncIterable<SubscriptionEvent> & { end?: () => void; return?: () => void };

export interface RenderNowDeps {
  /** Live writes of one stored page (services/pages/store.ts subscribePage). */
  subscribe: (key: string) => Promise<PageEvents>;
  /** Live writes of one schedule row (services/schedule/store.ts subscribeRow). */
  subscribeRow: (key: string) => Promise<PageEvents>;
  now: () => number;
  /** The node's waiter slots (a word of shared memory, resources.ts). */
  slots: NodeSlots;
  /** Each waiter's deadline (a one-shot, cleared when the page lands). */
  timer: SchedulerTimer;
  log: { error: (...args: unknown[]) => void };
}

interface Watch {
  waiters: Set<(o: WaitOutcome) => void>;
  ready: Promise<void>;
  events: PageEvents[];
  closed: boolean;
}

export class RenderNowWaiters {
  private readonly watches = new Map<string, Watch>();

  constructor(private readonly deps: RenderNowDeps) {}

  /**
   * Waits up to `timeoutMs` for a put of `key`'s page. `start` runs once the subscription is live (so a
   * render cannot land unseen between the two): it asks for the render, and answers true when the page
   * is already there. Answers at once `full` when `maxWaiting` requests of the node already wait.
   */
  async wait(
    key: string,
    timeoutMs: number,
    maxWaiting: number,
    start: () => Promise<boolean>,
  ): Promise<WaitOutcome> {
    if (!this.deps.slots.take(maxWaiting)) return 'full';
    try {
      const watch = this.watch(key);
      let settle!: (o: WaitOutcome) => void;
      const outcome = new Promise<WaitOutcome>((resolve) => (settle = resolve));
      watch.waiters.add(settle);
      const deadline = this.deps.timer.set(() => settle('timeout'), timeoutMs);
      try {
        await watch.ready;
        if (await start()) settle('ended');
        return await outcome;
      } finally {
        this.deps.timer.clear(deadline);
        watch.waiters.delete(settle);
        if (watch.waiters.size === 0) this.close(key, watch);
      }
    } finally {
      this.deps.slots.release();
    }
  }

  /** Waiters on this worker now (tests and the bench read it). */
  waiting(): number {
    let n = 0;
    for (const w of this.watches.values()) n += w.waiters.size;
    return n;
  }

  private watch(key: string): Watch {
    const found = this.watches.get(key);
    if (found) return found;
    const watch: Watch = { waiters: new Set(), ready: Promise.resolve(), events: [], closed: false };
    const follow = (make: Promise<PageEvents>, ends: (ev: SubscriptionEvent) => boolean) =>
      make.then((events) => {
        watch.events.push(events);
        if (watch.closed) endEvents(events);
        else void this.follow(key, watch, events, ends);
      });
    watch.ready = Promise.all([
      follow(this.deps.subscribe(key), (ev) => ev.type === 'put'),
      follow(
        this.deps.subscribeRow(key),
        (ev) =>
          ev.type === 'put' &&
          ev.value !== undefined &&
          renderEndedWithoutPage(
            { nextRenderTime: ev.value.nextRenderTime, lastOutcome: ev.value.lastOutcome },
            this.deps.now(),
          ),
      ),
    ]).then(
      () => undefined,
      (e: unknown) => this.deps.log.error('serving: a render-now subscription failed', e),
    );
    this.watches.set(key, watch);
    return watch;
  }

  private async follow(
    key: string,
    watch: Watch,
    events: PageEvents,
    ends: (ev: SubscriptionEvent) => boolean,
  ): Promise<void> {
    try {
      for await (const ev of events) {
        if (!ends(ev)) continue;
        for (const settle of [...watch.waiters]) settle('ended');
      }
    } catch (e) {
      if (!watch.closed) this.deps.log.error('serving: a render-now subscription ended', e);
    }
  }

  private close(key: string, watch: Watch): void {
    if (watch.closed) return;
    watch.closed = true;
    if (this.watches.get(key) === watch) this.watches.delete(key);
    for (const events of watch.events) endEvents(events);
  }
}

function endEvents(events: PageEvents): void {
  if (events.end) events.end();
  else events.return?.();
}
