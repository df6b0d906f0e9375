// The notify dispatcher (docs/wakes.md): fans a wake out to the hooks that may receive it, queues deliveries
// in a bounded in-memory queue, runs a few at a time, and for every attempt re-reads the fleet and hook,
// signs a fresh Standard Webhooks message and sends it. Everything it touches comes in through
// DispatcherDeps, so the unit tests drive it with a fake clock, a fake store and a fake transport.
import { checkHookUrlShape } from '../../util/notify/addressPolicy.js';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import {
  DROP_WARN_INTERVAL_MS,
  RateLimiter,
  classifyResponse,
  countsTowardDisable,
  retryDelayMs,
  type AttemptOutcome,
} from '../../util/notify/deliveryPolicy.js';
import { canReceive } from '../../util/stall/rules.js';
import { MAX_WAKE_BODY_BYTES, wakeBody } from '../../util/notify/wakeBody.js';
import {
  activeSecrets,
  mintMessageId,
  webhookHeaders,
  type SigningSecrets,
} from '../../util/notify/webhookSignature.js';
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
/** A wake body's limit; a body over it is never sent (the name bounds of util/notify/wakeBody.ts keep it). */
export const MAX_BODY_BYTES = MAX_WAKE_BODY_BYTES;

export type DeliveryEnd = 'delivered' | 'failed' | 'abandoned';

export class Dispatcher {
  /** Deliveries waiting for a slot, oldest first; at most QUEUE_CAPACITY. */
  private readonly queue: Delivery[] = [];
  private readonly limiter: RateLimiter;
  /** Attempt slots in use; a delivery waiting out a retry delay holds none. */
  private slotsInUse = 0;
  /** Retries whose delay is over, waiting for a slot; served before new deliveries. */
  private readonly slotWaiters: Array<() => void> = [];
  /** Hooks with a delivery in progress (attempting or waiting to retry): one at a time per hook. */
  private readonly busyHooks = new Set<string>();
  private readonly idleWaiters: Array<() => void> = [];
  private drops = 0;
  private lastDropWarn = -Infinity;
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
      // Capacity first: a delivery refused for room must not spend the hook's rate.
      if (this.queue.length >= QUEUE_CAPACITY) {
        this.drop(now, `the delivery queue is full (${QUEUE_CAPACITY})`);
        continue;
      }
      if (!this.limiter.tryTake(hook.id, now)) {
        this.drop(now, `hook ${hook.id} is over notify.ratePerMinute`);
        continue;
      }
      this.queue.push({ msgId: mintMessageId(), hookId: hook.id, fleetId: hook.fleetId, wake });
      queued++;
    }
    this.pump();
    return queued;
  }

  /** Counts a dropped delivery; warns at most once per DROP_WARN_INTERVAL_MS however fast they drop. */
  private drop(now: number, why: string): void {
    this.drops++;
    this.deps.count('notify_dropped');
    if (now - this.lastDropWarn < DROP_WARN_INTERVAL_MS) return;
    this.lastDropWarn = now;
    this.deps.log.warn(`notify: dropped a delivery because ${why}; ${this.drops} dropped since start`);
  }

  /** Forgets the rate windows of hooks with no delivery in the last minute (maintenance). */
  prune(now: number): number {
    return this.limiter.prune(now);
  }

  /** Resolves when nothing is queued, attempting or waiting to retry (tests and shutdown). */
  idle(): Promise<void> {
    if (this.pending === 0) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  get pending(): number {
    return this.queue.length + this.busyHooks.size;
  }

  /** Starts queued deliveries while slots are free, skipping hooks that already have one in progress. */
  private pump(): void {
    for (
      let i = 0;
      i < this.queue.length && this.slotsInUse < CONCURRENCY && this.slotWaiters.length === 0;
    ) {
      const d = this.queue[i]!;
      if (this.busyHooks.has(d.hookId)) {
        i++;
        continue;
      }
      this.queue.splice(i, 1);
      this.busyHooks.add(d.hookId);
      this.slotsInUse++;
      void this.run(d)
        .catch((e: unknown) => this.deps.log.error('notify: delivery crashed', e))
        .finally(() => {
          this.releaseSlot();
          this.busyHooks.delete(d.hookId);
          this.pump();
          if (this.pending === 0) for (const w of this.idleWaiters.splice(0)) w();
        });
    }
  }

  private releaseSlot(): void {
    const next = this.slotWaiters.shift();
    if (next)
      next(); // the slot passes straight to a waiting retry
    else this.slotsInUse--;
  }

  /** Waits out a retry delay without holding a slot, so one slow receiver cannot stall every other. */
  private async pauseForRetry(ms: number): Promise<void> {
    this.releaseSlot();
    this.pump();
    await this.deps.sleep(ms);
    if (this.slotsInUse < CONCURRENCY) {
      this.slotsInUse++;
      return;
    }
    await new Promise<void>((r) => this.slotWaiters.push(r));
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
      const built = this.build(d, hook, fleet, key, attempt, now, cfg);
      if ('problem' in built) {
        // Our fault, not the receiver's: no attempt, no health write, nothing that could disable the hook.
        deps.log.error(`notify: delivery ${d.msgId} to hook ${hook.id} not sent: ${built.problem}`);
        this.remember(d, 'abandoned', attempts);
        return;
      }
      attempts = attempt;
      last = await deps.send(built.url, built.headers, built.body, cfg.notify.attemptTimeout);
      const verdict = classifyResponse(last);
      if (verdict === 'success') {
        deps.count('notify_delivered');
        await deps.recordDelivery(hook.id, health(last, true), cfg.notify.disableAfterFailures, deps.now());
        this.remember(d, 'delivered', attempts);
        return;
      }
      if (verdict === 'fail' || attempt >= cfg.notify.maxAttempts) break;
      await this.pauseForRetry(retryDelayMs(attempt, deps.random));
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

  /** The signed request of one attempt, or why we cannot send one. */
  private build(
    d: Delivery,
    hook: HookRecord,
    fleet: FleetRecord,
    key: Buffer,
    attempt: number,
    now: number,
    cfg: QueueKeeperConfig,
  ): { url: URL; headers: Record<string, string>; body: string } | { problem: string } {
    const shape = checkHookUrlShape(hook.url, cfg.notify);
    // A URL stored under looser rules (allowHttp since turned off) is refused: the receiver did nothing.
    if (!shape.ok) return { problem: `the hook url ${shape.phrase}` };
    let secrets: string[];
    try {
      secrets = activeSecrets(this.deps.secrets(hook, key, now), now);
    } catch {
      return { problem: 'its secret does not open under QUEUE_KEEPER_SECRET_KEY (rotate the hook)' };
    }
    const body = wakeBody({
      reason: d.wake.reason,
      queue: d.wake.queue,
      fleet: fleet.name,
      job: d.wake.job,
      attempt,
      createdAt: d.wake.createdAt,
    });
    if (Buffer.byteLength(body) > MAX_BODY_BYTES)
      return { problem: `the body would be ${Buffer.byteLength(body)} bytes (limit ${MAX_BODY_BYTES})` };
    const headers = webhookHeaders({
      msgId: d.msgId,
      timestampSec: Math.floor(now / 1000),
      body,
      secrets,
      userAgent: this.deps.userAgent,
    });
    return { url: shape.url, headers, body };
  }
}

function health(o: SendOutcome | null, success: boolean): DeliveryHealth {
  if (o === null) return { success, status: null, error: null };
  if ('status' in o) return { success, status: o.status, error: success ? null : `HTTP ${o.status}` };
  return { success, status: null, error: o.phrase ?? o.error, counts: success || countsTowardDisable(o) };
}

function describe(o: SendOutcome | null): string {
  if (o === null) return 'no attempt';
  return 'status' in o ? `HTTP ${o.status}` : `${o.error} (${o.phrase ?? o.error})`;
}
