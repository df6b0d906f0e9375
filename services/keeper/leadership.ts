// Runs the keeper on worker 0: leadership (a briefly overlapping second worker 0 waits), timers for
// publish / state / verify / status sync, resubscribe and failed-load backoff, and the exhausted-set
// poke. The lifecycle itself is KeeperService.
import type { DueSummary, HeldDescription } from '../../util/keeper/core.js';
import { nameHash, randomWord } from '../../util/leases/token.js';
import { threadId } from 'node:worker_threads';
import type { Ownership } from '../../util/cluster/ownership.js';
import { keeperStaleAfterMs, leaderIdFor } from '../../util/handoff/keeperSignal.js';
import { config, onConfigChange } from '../runtime/config.js';
import { log, threads, workerIndex } from '../runtime/harper.js';
import {
  KeeperService,
  LOAD_BACKOFF_MAX_MS,
  LOAD_BACKOFF_MS,
  VERIFY_RETRY_MS,
  type ScheduleSource,
} from './service.js';
import { currentOwnership } from '../cluster/membership.js';
import { count, record } from '../metrics/values.js';
import { readRow, subscribeSchedule, walkSchedule } from '../schedule/store.js';
import { keeperSignal, leaseTable, onReadySetPoke, readySet, stateDoc } from '../runtime/sharedStructures.js';
import { deriveStatus, isPaused, onControlChange, publishStatus } from '../status/control.js';

const POKE_MIN_MS = 50;
const MINUTE_MS = 60_000;
/** The minute publish runs this long after the boundary, so `now` is surely past it on every clock read. */
const MINUTE_SLACK_MS = 5;

let service: KeeperService | undefined;
let ownership: Ownership | undefined;

/** The cluster membership the keeper holds rows by (undefined before the keeper starts). */
export function clusterOwnership(): Ownership | undefined {
  return ownership;
}

export function keeper(): KeeperService | undefined {
  return service;
}

const source: ScheduleSource = {
  subscribe: () => subscribeSchedule(),
  walk: (opts) => walkSchedule(opts),
  read: (key) => readRow(key),
};

/** The serving view every worker derives from the signal (stale keepers are reported, not enforced). */
export function servingView(now: number) {
  const s = keeperSignal().read();
  const stale =
    s.heartbeatAt === null || now - s.heartbeatAt > keeperStaleAfterMs(config().queue.keeper.publishInterval);
  // A stale keeper's last set is drained first; only an empty set makes the node not serving.
  const serving = s.live && (!stale || readySet().snapshot().remaining > 0);
  return { serving, due: s.dueCount, complete: s.complete, stale, phase: s.phase };
}

export function nodeStatusNow(now = Date.now()) {
  return deriveStatus(servingView(now));
}

interface Loop {
  ms: () => number;
  armedWith: number;
  timer: NodeJS.Timeout | null;
  running: boolean;
  run: () => Promise<void>;
}
const loops: Loop[] = [];

/**
 * Runs `fn` every `ms()` (never two at once). A config change that alters the interval re-arms the
 * waiting timer at once (SPEC §8), so lowering a ten-minute interval does not wait ten minutes.
 */
function every(ms: () => number, fn: () => unknown | Promise<unknown>): void {
  const loop: Loop = {
    ms,
    armedWith: 0,
    timer: null,
    running: false,
    run: async () => {
      loop.timer = null;
      loop.running = true;
      try {
        await fn();
      } catch (e) {
        log.error('keeper duty failed', e);
      } finally {
        loop.running = false;
      }
      arm(loop);
    },
  };
  loops.push(loop);
  arm(loop);
}

function arm(loop: Loop): void {
  if (loop.timer) clearTimeout(loop.timer);
  loop.armedWith = loop.ms();
  loop.timer = setTimeout(() => void loop.run(), loop.armedWith);
  loop.timer.unref?.();
}

function rearmChangedLoops(): void {
  for (const loop of loops) if (!loop.running && loop.timer && loop.ms() !== loop.armedWith) arm(loop);
}

async function syncStatus(force = false): Promise<void> {
  const next = nodeStatusNow();
  await publishStatus(next, force);
}

const HELD_ASK = 'queue-keeper:held-ask';
const HELD_REPLY = 'queue-keeper:held-reply';
const HELD_ASK_TIMEOUT_MS = 1000;
const heldAsks = new Map<number, (held: HeldDescription | null) => void>();
let heldAskSeq = 0;
let heldListening = false;

function listenForHeldAsks(): void {
  if (heldListening) return;
  heldListening = true;
  if (workerIndex() === 0) {
    threads().onMessageByType?.(HELD_ASK, (msg: { id?: unknown; url?: unknown; now?: unknown }, port) => {
      if (typeof msg.url !== 'string' || typeof msg.now !== 'number') return;
      const held = service?.core.describe(msg.url, msg.now) ?? null;
      port?.postMessage({ type: HELD_REPLY, id: msg.id, held });
    });
  } else {
    threads().onMessageByType?.(HELD_REPLY, (msg: { id?: unknown; held?: HeldDescription | null }) => {
      if (typeof msg.id !== 'number') return;
      heldAsks.get(msg.id)?.(msg.held ?? null);
      heldAsks.delete(msg.id);
    });
  }
}

/**
 * What the keeper holds for a URL. The keeper lives on worker 0; any other worker asks it over the
 * thread ports (null when worker 0 does not answer within a second, e.g. while it restarts).
 */
export async function describeHeld(url: string, now: number): Promise<HeldDescription | null> {
  if (service) return service.core.describe(url, now);
  if (workerIndex() === 0) return null;
  listenForHeldAsks();
  const id = ++heldAskSeq;
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      heldAsks.delete(id);
      resolve(null);
    }, HELD_ASK_TIMEOUT_MS);
    heldAsks.set(id, (held) => {
      clearTimeout(timer);
      resolve(held);
    });
    for (const port of threads()) port.postMessage({ type: HELD_ASK, id, url, now });
  });
}

/** Every worker: worker 0 answers held asks, the others listen for the replies. */
export function startHeldAsks(): void {
  listenForHeldAsks();
}

/** What the keeper tells the rest of the node (wired in resources.ts, the composition root). */
export interface KeeperEvents {
  /** Every publish tick: the per-queue due summary (notify's `created` edges). */
  onDue: (summary: DueSummary, now: number) => void;
  /** Leases of `queue` expired unreported since the last tick (notify's `requeued` wakes). */
  onRequeued: (queue: string, now: number) => void;
}

/** The queue names an expired lease's queue hash can stand for: the routes now, plus `unrouted`. */
function queueNames(): Map<number, string> {
  const names = new Map<number, string>([[nameHash('unrouted'), 'unrouted']]);
  for (const r of config().render.routes) names.set(nameHash(r.name), r.name);
  return names;
}

/** Starts the keeper on this worker once it holds leadership. Call on worker 0 only. */
export async function startKeeper(events: KeeperEvents): Promise<void> {
  const ownerId = leaderIdFor(threadId, randomWord());
  const signal = keeperSignal();
  const ready = readySet();
  const leases = leaseTable();
  for (;;) {
    if (signal.claimLeadership(ownerId, Date.now(), config().queue.keeper.publishInterval)) break;
    // Another worker 0 (a restart overlap) still heartbeats; wait for it to stop.
    await new Promise((r) => setTimeout(r, 1000));
  }
  process.on('exit', () => signal.releaseLeadership(ownerId));

  // Row ownership over the cluster's members, re-read every maintenance tick (SPEC §9).
  ownership = await currentOwnership();
  if (ownership.nodes.length > 1)
    log.info(`keeper: clustered with ${ownership.nodes.join(', ')}; holding the rows this node owns`);

  let dueNow: () => void = () => undefined;
  const svc = new KeeperService({
    source,
    ready,
    signal,
    state: stateDoc(),
    config,
    isLeased: (k, now) => leases.isLeased(k, now),
    isLeasedHash: (hi, lo, now) => leases.isLeasedHash(hi, lo, now),
    // The gauge (drifts only high) is cheap; the state timer reconciles it before each document.
    inFlight: () => leases.occupancy(),
    nodeView: () => ({ paused: isPaused(), status: nodeStatusNow() }),
    log,
    metric: (name, v) => record(name, v),
    countRepaired: (n) => count('keeper_repaired', n),
    onDue: events.onDue,
    onDueNow: () => dueNow(),
    owns: (key) => ownership?.owns(key) ?? true,
  });
  service = svc;
  svc.withdraw(Date.now());
  onControlChange(() => void syncStatus(true).catch((e) => log.error('status write failed', e)));
  await syncStatus().catch((e) => log.error('status write failed', e));

  onConfigChange((_next, _prev, changed) => {
    rearmChangedLoops();
    if (
      changed.some(
        (p) =>
          p.startsWith('render.routes') || p === 'render.defaultInterval' || p.startsWith('queue.ready.'),
      )
    )
      svc.reclassify();
  });

  // An early publish, at most every POKE_MIN_MS: a claim found the set used up while due rows remain
  // (the exhausted-set poke), or a write made a row due now.
  let earlyTimer: NodeJS.Timeout | null = null;
  let lastEarlyPublish = 0;
  const publishSoon = (): void => {
    if (earlyTimer || !svc.serving) return;
    const wait = Math.max(0, lastEarlyPublish + POKE_MIN_MS - Date.now());
    earlyTimer = setTimeout(() => {
      earlyTimer = null;
      lastEarlyPublish = Date.now();
      svc.publishOnce(Date.now(), true);
    }, wait);
  };
  onReadySetPoke(publishSoon);
  dueNow = publishSoon;

  // Rows come due on minute boundaries (every writer floors due times): publish at each boundary, not at
  // the next periodic tick, so the first grant of a burst comes within milliseconds of its due instant.
  const armMinute = (): void => {
    const wait = MINUTE_MS - (Date.now() % MINUTE_MS) + MINUTE_SLACK_MS;
    setTimeout(() => {
      if (svc.serving) svc.publishOnce(Date.now(), true);
      armMinute();
    }, wait).unref?.();
  };
  armMinute();

  const onClosed = (err?: unknown) => svc.subscriptionClosed(() => Date.now(), err);

  // Load with backoff: 30 s doubling to 10 min.
  let backoff = LOAD_BACKOFF_MS;
  for (;;) {
    try {
      await svc.subscribe(() => Date.now(), onClosed);
      await svc.load(() => Date.now());
      break;
    } catch (e) {
      svc.phase = 'failed';
      svc.stats.lastError = `load failed: ${(e as Error)?.message ?? String(e)}`;
      svc.closeSubscription();
      svc.withdraw(Date.now());
      log.error(`keeper load failed; retrying in ${backoff / 1000} s`, e);
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, LOAD_BACKOFF_MAX_MS);
    }
  }
  log.info(`keeper live: ${svc.core.size} rows loaded in ${svc.stats.loadMs} ms`);

  every(
    () => config().queue.keeper.publishInterval,
    async () => {
      // A keeper that lost its leader slot (it stalled past the stale limit and a new worker 0 took
      // over) must stop writing shared memory: two publishers would interleave sets.
      if (!signal.claimLeadership(ownerId, Date.now(), config().queue.keeper.publishInterval)) {
        if (svc.serving)
          log.error('keeper lost its leadership slot to another worker 0; no longer publishing');
        svc.serving = false;
        return;
      }
      if (!svc.serving && svc.phase === 'live') svc.serving = true;
      const now = Date.now();
      svc.publishOnce(now, false);
      // requeued at expiry (SPEC §6): one pass over the lease slots finds leases that ran out unreported.
      const expired = new Set<number>();
      leases.collectExpired(now, (q) => expired.add(q));
      if (expired.size > 0) {
        const names = queueNames();
        for (const q of expired) {
          const name = names.get(q);
          if (name !== undefined) events.onRequeued(name, now);
        }
      }
      await syncStatus();
    },
  );
  every(
    () => config().queue.keeper.stateInterval,
    () => {
      leases.reconcile(Date.now());
      svc.writeState(Date.now());
    },
  );
  svc.writeState(Date.now());
  every(
    () => config().queue.statusSyncInterval,
    async () => {
      leases.reconcile(Date.now());
      await syncStatus();
    },
  );
  every(
    () => config().maintenance.tickInterval,
    async () => {
      const next = await currentOwnership();
      if (ownership && next.sameMembership(ownership)) return;
      log.info(`keeper: cluster membership is now ${next.nodes.join(', ')}`);
      ownership = next;
      await svc.membershipChanged(() => Date.now());
    },
  );

  // Verification: every verifyInterval (0 = off, re-checked each minute); a failed walk retries in 30 s.
  const verifyLoop = (delay: number): void => {
    setTimeout(async () => {
      const interval = config().queue.keeper.verifyInterval;
      if (interval === 0) return verifyLoop(60_000);
      try {
        await svc.verify(() => Date.now());
        verifyLoop(config().queue.keeper.verifyInterval || 60_000);
      } catch (e) {
        log.error('keeper verification failed; retrying in 30 s', e);
        svc.stats.lastError = `verify failed: ${(e as Error)?.message ?? String(e)}`;
        verifyLoop(VERIFY_RETRY_MS);
      }
    }, delay).unref?.();
  };
  verifyLoop(config().queue.keeper.verifyInterval || 60_000);
}
