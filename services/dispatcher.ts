// The notify dispatcher (SPEC §6): fans a wake out to the hooks that may receive it, queues deliveries in
// a bounded in-memory queue, runs a few at a time, and for every attempt re-reads the fleet and hook,
// signs a fresh Standard Webhooks message and sends it. Everything it touches comes in through
// DispatcherDeps, so the unit tests drive it with a fake clock, a fake store and a fake transport.
import { checkHookUrlShape } from '../util/addressPolicy.js';
import type { QueueKeeperConfig } from '../util/configSchema.js';
import {
  BoundedQueue,
  DROP_WARN_INTERVAL_MS,
  RateLimiter,
  classifyResponse,
  retryDelayMs,
  type AttemptOutcome,
} from '../util/deliveryPolicy.js';
import { canReceive } from '../util/stallRules.js';
import {
  activeSecrets,
  mintMessageId,
  webhookHeaders,
  type SigningSecrets,
} from '../util/webhookSignature.js';
import type { DeliveryHealth, FleetRecord, HookRecord } from './fleets.js';

export type WakeReason = 'created' | 'requeued' | 'stalled';

/** The row a wake names. Only gate-passing (verified) rows may ever be put here. */
export interface WakeJob {
  id: string;
  url: string;
  dueAt: number;
  fromSitemap: boolean;
}

export interface Wake {
  reason: WakeReason;
  queue: string;
  job: WakeJob;
  /** Set for `stalled`: the ledger charged one (fleet, queue) pair, so only that fleet is woken. */
  fleetId?: string;
  createdAt: number;
}

export type SendOutcome = AttemptOutcome & { phrase?: string };

export interface DispatcherDeps {
  now(): number;
  random(): number;
  sleep(ms: number): Promise<void>;
  config(): QueueKeeperConfig;
  /** The sealing key; null = fail closed (nothing is sent). */
  key(): Buffer | null;
  fleets(): Promise<FleetRecord[]>;
  hooks(): Promise<HookRecord[]>;
  getFleet(id: string): Promise<FleetRecord | undefined>;
  getHook(id: string): Promise<HookRecord | undefined>;
  secrets(hook: HookRecord, key: Buffer, now: number): SigningSecrets;
  send(url: URL, headers: Record<string, string>, body: string, timeoutMs: number): Promise<SendOutcome>;
  recordDelivery(id: string, health: DeliveryHealth, disableAfter: number, now: number): Promise<boolean>;
  count(name: 'notify_delivered' | 'notify_failed' | 'notify_dropped' | 'notify_disabled', n?: number): void;
  log: { info(...a: unknown[]): void; warn(...a: unknown[]): void; error(...a: unknown[]): void };
  userAgent: string;
}

interface Delivery {
  msgId: string;
  hookId: string;
  fleetId: string;
  wake: Wake;
}

/** Pending deliveries beyond this are dropped (and counted): a wake is a hint, the ledger catches up. */
export const QUEUE_CAPACITY = 1000;
/** Deliveries in flight at once; a slow receiver cannot hold up more than this many others. */
export const CONCURRENCY = 4;
/** The body limit of SPEC §6; a body over it is never sent. */
export const MAX_BODY_BYTES = 4096;

export type DeliveryEnd = 'delivered' | 'failed' | 'abandoned';

export class Dispatcher {
  private readonly queue = new BoundedQueue<Delivery>(QUEUE_CAPACITY);
  private readonly limiter: RateLimiter;
  private running = 0;
  private readonly waiters: Array<() => void> = [];
  /** How each delivery ended, for tests and the log; bounded to the last few hundred. */
  readonly recent: Array<{ msgId: string; hookId: string; end: DeliveryEnd; attempts: number }> = [];

  constructor(private readonly deps: DispatcherDeps) {
    this.limiter = new RateLimiter(deps.config().notify.ratePerMinute);
  }

  /** Queues one delivery per receiving hook; returns how many were queued. Never throws. */
  async fire(wake: Wake): Promise<number> {
    try {
      return await this.fanOut(wake);
    } catch (e) {
      this.deps.log.error(`notify: could not fan out a ${wake.reason} wake for queue ${wake.queue}`, e);
      return 0;
    }
  }

  private async fanOut(wake: Wake): Promise<number> {
    const cfg = this.deps.config();
    if (this.deps.key() === null || cfg.notify.maxHooksPerFleet === 0) return 0;
    this.limiter.setRate(cfg.notify.ratePerMinute);
    const fleets = new Map((await this.deps.fleets()).map((f) => [f.id, f]));
    const now = this.deps.now();
    let queued = 0;
    for (const hook of await this.deps.hooks()) {
      if (wake.fleetId !== undefined && hook.fleetId !== wake.fleetId) continue;
      const fleet = fleets.get(hook.fleetId);
      if (!fleet || !canReceive(hook, fleet, wake.queue)) continue;
      if (!this.limiter.tryTake(hook.id, now)) {
        this.drop(now, `hook ${hook.id} is over notify.ratePerMinute`);
        continue;
      }
      if (!this.queue.push(this.delivery(hook, wake))) {
        this.drop(now, `the delivery queue is full (${QUEUE_CAPACITY})`);
        continue;
      }
      queued++;
    }
    this.pump();
    return queued;
  }

  private drops = 0;
  private lastDropWarn = -Infinity;

  /** Counts a dropped delivery; warns at most once per DROP_WARN_INTERVAL_MS however fast they drop. */
  private drop(now: number, why: string): void {
    this.drops++;
    this.deps.count('notify_dropped');
    if (now - this.lastDropWarn < DROP_WARN_INTERVAL_MS) return;
    this.lastDropWarn = now;
    this.deps.log.warn(`notify: dropped a delivery because ${why}; ${this.drops} dropped since start`);
  }

  private delivery(hook: HookRecord, wake: Wake): Delivery {
    return { msgId: mintMessageId(), hookId: hook.id, fleetId: hook.fleetId, wake };
  }

  /** Resolves when nothing is queued or in flight (tests and shutdown). */
  idle(): Promise<void> {
    if (this.running === 0 && this.queue.size === 0) return Promise.resolve();
    return new Promise((r) => this.waiters.push(r));
  }

  get pending(): number {
    return this.queue.size + this.running;
  }

  private pump(): void {
    while (this.running < CONCURRENCY) {
      const d = this.queue.shift();
      if (!d) break;
      this.running++;
      void this.run(d)
        .catch((e: unknown) => this.deps.log.error('notify: delivery crashed', e))
        .finally(() => {
          this.running--;
          this.pump();
          if (this.running === 0 && this.queue.size === 0) for (const w of this.waiters.splice(0)) w();
        });
    }
  }

  private remember(d: Delivery, end: DeliveryEnd, attempts: number): void {
    this.recent.push({ msgId: d.msgId, hookId: d.hookId, end, attempts });
    if (this.recent.length > 500) this.recent.splice(0, this.recent.length - 500);
  }

  /** One delivery: up to maxAttempts, each preceded by the full re-check; one health write at the end. */
  private async run(d: Delivery): Promise<void> {
    const { deps } = this;
    let last: SendOutcome | null = null;
    let attempts = 0;
    for (let attempt = 1; ; attempt++) {
      const cfg = deps.config();
      const now = deps.now();
      const ready = await this.recheck(d, cfg);
      if (ready === null) {
        // Revoked, deleted, disabled, narrowed or kill-switched since it was queued: send nothing and
        // leave the hook's health alone (nothing was attempted against the receiver).
        this.remember(d, 'abandoned', attempts);
        return;
      }
      const { hook, fleet, key } = ready;
      attempts = attempt;
      last = await this.attempt(d, hook, fleet, key, attempt, now, cfg);
      const verdict = classifyResponse(last);
      if (verdict === 'success') {
        deps.count('notify_delivered');
        await deps.recordDelivery(hook.id, health(last, true), cfg.notify.disableAfterFailures, deps.now());
        this.remember(d, 'delivered', attempts);
        return;
      }
      if (verdict === 'fail' || attempt >= cfg.notify.maxAttempts) break;
      await deps.sleep(retryDelayMs(attempt, deps.random));
    }
    const cfg = deps.config();
    deps.count('notify_failed');
    this.remember(d, 'failed', attempts);
    const disabled = await deps.recordDelivery(
      d.hookId,
      health(last, false),
      cfg.notify.disableAfterFailures,
      deps.now(),
    );
    deps.log.warn(
      `notify: delivery ${d.msgId} to hook ${d.hookId} failed after ${attempts} attempt(s): ${describe(last)}`,
    );
    if (disabled) {
      deps.count('notify_disabled');
      deps.log.warn(
        `notify: hook ${d.hookId} disabled after ${cfg.notify.disableAfterFailures} failed deliveries in a row; rotate or enable it to resume`,
      );
    }
  }

  private async recheck(
    d: Delivery,
    cfg: QueueKeeperConfig,
  ): Promise<{ hook: HookRecord; fleet: FleetRecord; key: Buffer } | null> {
    const key = this.deps.key();
    if (key === null || cfg.notify.maxHooksPerFleet === 0) return null;
    const [hook, fleet] = await Promise.all([this.deps.getHook(d.hookId), this.deps.getFleet(d.fleetId)]);
    if (!hook || !fleet || !canReceive(hook, fleet, d.wake.queue)) return null;
    return { hook, fleet, key };
  }

  private async attempt(
    d: Delivery,
    hook: HookRecord,
    fleet: FleetRecord,
    key: Buffer,
    attempt: number,
    now: number,
    cfg: QueueKeeperConfig,
  ): Promise<SendOutcome> {
    const shape = checkHookUrlShape(hook.url, cfg.notify);
    if (!shape.ok) return { error: 'refused', phrase: shape.phrase };
    let secrets: string[];
    try {
      secrets = activeSecrets(this.deps.secrets(hook, key, now), now);
    } catch {
      this.deps.log.error(
        `notify: the secret of hook ${hook.id} does not open under QUEUE_KEEPER_SECRET_KEY`,
      );
      return { error: 'refused', phrase: 'secret does not open' };
    }
    const body = JSON.stringify({
      type: 'render.ready',
      reason: d.wake.reason,
      queue: d.wake.queue,
      fleet: fleet.name,
      job: d.wake.job,
      attempt,
      createdAt: d.wake.createdAt,
    });
    if (Buffer.byteLength(body) > MAX_BODY_BYTES) return { error: 'refused', phrase: 'body too large' };
    const headers = webhookHeaders({
      msgId: d.msgId,
      timestampSec: Math.floor(now / 1000),
      body,
      secrets,
      userAgent: this.deps.userAgent,
    });
    return this.deps.send(shape.url, headers, body, cfg.notify.attemptTimeout);
  }
}

function health(o: SendOutcome | null, success: boolean): DeliveryHealth {
  if (o === null) return { success, status: null, error: null };
  if ('status' in o) return { success, status: o.status, error: success ? null : `HTTP ${o.status}` };
  return { success, status: null, error: o.phrase ?? o.error };
}

function describe(o: SendOutcome | null): string {
  if (o === null) return 'no attempt';
  return 'status' in o ? `HTTP ${o.status}` : `${o.error} (${o.phrase ?? o.error})`;
}
