// Notify on this node (SPEC §6): the dispatcher runs on worker 0 only, so rate limits, edge pacing and
// health writes have one owner. `created` edges come from the keeper's per-queue due summary on worker 0;
// `requeued` signals are raised by claims on any worker and posted to worker 0; `stalled` wakes come
// from the stall ledger's sweep on worker 0.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllowList, validateHookHost, type HookUrlPolicy } from '../../util/notify/addressPolicy.js';
import type { DueSummary } from '../../util/keeper/core.js';
import type { RepresentativeRow } from '../../util/stall/rules.js';
import { componentDir, config } from '../runtime/config.js';
import { Dispatcher, type Wake, type WakeJob, type WakeReason } from './dispatcher.js';
import type { Duty } from '../keeper/maintenance.js';
import {
  destroyExpiredSecrets,
  getFleet,
  getHook,
  listFleets,
  listHooks,
  recordDelivery,
  sealKey,
  signingSecrets,
} from './fleets.js';
import { log } from '../runtime/harper.js';
import type { KeeperService } from '../keeper/service.js';
import { count } from '../metrics/values.js';
import { leaseTable } from '../runtime/sharedStructures.js';
import { createPinnedAgent, deliver, localAddresses, systemResolve } from './transport.js';
import type { Agent } from 'undici';

let dispatcher: Dispatcher | undefined;
let agent: Agent | undefined;

function userAgent(): string {
  try {
    const pkg = JSON.parse(readFileSync(join(componentDir, 'package.json'), 'utf8')) as { version?: string };
    return `queue-keeper/${pkg.version ?? '0'}`;
  } catch {
    return 'queue-keeper/0';
  }
}

/** The address policy as configured now (read per use, so a config change applies to the next attempt). */
export function hookPolicy(): HookUrlPolicy {
  const n = config().notify;
  return {
    allowHttp: n.allowHttp,
    allowList: parseAllowList(n.allowCidrs),
    selfAddresses: localAddresses(),
    resolve: systemResolve,
  };
}

/** One agent for every delivery: each new connection resolves and checks the host, then dials only that. */
function pinnedAgent(): Agent {
  agent ??= createPinnedAgent({
    validate: (host) => validateHookHost(host, hookPolicy()),
    connectTimeoutMs: () => config().notify.attemptTimeout,
  });
  return agent;
}

/**
 * False when nothing can be sent from this worker: no dispatcher here (it runs on worker 0), no sealing
 * key, or the notify.maxHooksPerFleet kill switch. The stall sweep charges nothing then.
 */
export function notifyAvailable(): boolean {
  return dispatcher !== undefined && sealKey() !== null && config().notify.maxHooksPerFleet > 0;
}

export function dispatcherForTests(): Dispatcher | undefined {
  return dispatcher;
}

function wakeJob(row: { key: string; dueMs: number; fromSitemap: boolean }): WakeJob {
  return { id: row.key, url: row.key, dueAt: row.dueMs, fromSitemap: row.fromSitemap };
}

/** The stall ledger charged (fleet, queue): wake that fleet's receiving hooks. Worker 0 only. */
export function fireStalled(fleetId: string, queue: string, job: RepresentativeRow, now: number): void {
  if (!dispatcher) return;
  void dispatcher.fire({ reason: 'stalled', queue, job: wakeJob(job), fleetId, createdAt: now });
}

// ------------------------------------------------------------------ created / requeued edges

/** Last `created`/`requeued` wake per queue: edges are paced per queue by notify.edgeCooldown. */
const lastEdgeAt = new Map<string, number>();

function fireEdge(reason: Exclude<WakeReason, 'stalled'>, queue: string, job: WakeJob, now: number): void {
  if (!dispatcher || !notifyAvailable()) return;
  const last = lastEdgeAt.get(queue);
  if (last !== undefined && now - last < config().notify.edgeCooldown) return;
  lastEdgeAt.set(queue, now);
  const wake: Wake = { reason, queue, job, createdAt: now };
  void dispatcher.fire(wake);
}

/** Queues that had due gate-passing rows at the last publish; null until the first summary (a baseline). */
let queuesWithDue: Set<string> | null = null;

/** Called by the keeper on every publish tick: a queue going from no due verified rows to some is `created`. */
export function onDueSummary(summary: DueSummary, now: number): void {
  const next = new Set<string>();
  for (const [queue, q] of summary.byQueue) {
    if (q.dueVerified === 0 || q.oldestVerifiedDue === null) continue;
    next.add(queue);
    if (queuesWithDue !== null && !queuesWithDue.has(queue)) {
      fireEdge('created', queue, wakeJob(q.oldestVerifiedDue), now);
    }
  }
  queuesWithDue = next;
}

/**
 * Leases of `queue` expired unreported (the keeper finds them on its publish tick, worker 0): wake the
 * queue's fleets, naming its oldest verified row nobody holds; with none there is nothing to wake anyone
 * for (and a queue of unverified rows never names one).
 */
export function onRequeued(queue: string, now: number, keeper: KeeperService | undefined): void {
  const leases = leaseTable();
  const oldest = keeper?.core.oldestDue(queue, now, {
    verifiedOnly: true,
    skip: (k) => leases.isLeased(k, now),
  });
  if (oldest) fireEdge('requeued', queue, wakeJob(oldest), now);
}

/** Worker 0: builds the dispatcher. */
export function startNotify(): void {
  if (dispatcher) return;
  dispatcher = new Dispatcher({
    now: () => Date.now(),
    random: Math.random,
    sleep: (ms) =>
      new Promise<void>((r) => {
        setTimeout(r, ms).unref?.();
      }),
    config,
    key: sealKey,
    fleets: listFleets,
    hooks: () => listHooks(),
    getFleet,
    getHook,
    secrets: signingSecrets,
    send: (url, headers, body, timeoutMs) => deliver({ url, headers, body, timeoutMs, agent: pinnedAgent() }),
    recordDelivery,
    count: (name, n) => count(name, n),
    log,
    userAgent: userAgent(),
  });
  if (!notifyAvailable())
    log.warn('notify: nothing will be dispatched (no sealing key or hooks switched off)');
}

/** Maintenance duty: destroys previous hook secrets whose 24 h rotation grace has ended. */
export function secretCleanupDuty(): Duty {
  return {
    name: 'secret-cleanup',
    runOnce: async (now) => {
      dispatcher?.prune(now);
      const destroyed = await destroyExpiredSecrets(now);
      if (destroyed > 0) log.info(`notify: destroyed ${destroyed} expired previous hook secret(s)`);
      return { destroyed };
    },
  };
}
