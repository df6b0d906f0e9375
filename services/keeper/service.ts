// The queue keeper's lifecycle on worker 0 (SPEC §2): withdraw, subscribe-then-walk, serve while
// loading, live, publish, head check, verify, state. Its table access comes through a ScheduleSource so
// service tests can drive it with a fake table and a fake clock; services/keeper/leadership.ts wires the real one.
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { KeeperCore, type DueSummary, type ScheduleRow as KeeperRow } from '../../util/keeper/core.js';
import { stateMaxAgeMs, type KeeperPhase, type KeeperSignal } from '../../util/handoff/keeperSignal.js';
import type { ReadySet } from '../../util/handoff/readySet.js';
import { classifyUrl, toScheduleRow, type ScheduleRow } from '../../util/schedule/rules.js';
import type { StateDoc } from '../../util/handoff/stateDoc.js';

export interface ScheduleEvent {
  id: unknown;
  type: string;
  value?: Record<string, unknown>;
}

export interface EventStream extends AsyncIterable<ScheduleEvent> {
  end?: () => void;
  return?: () => unknown;
}

export interface ScheduleSource {
  subscribe(): Promise<EventStream>;
  walk(opts: {
    start?: string;
    end?: string;
    reverse?: boolean;
    limit?: number;
    exclusiveStart?: boolean;
  }): Iterable<{
    key: string;
    row: ScheduleRow | undefined;
  }>;
  read(key: string): ScheduleRow | undefined;
  /** Start a fresh read snapshot so point reads see the latest commits. */
  refreshReads?(): void;
}

export interface KeeperLog {
  info(...a: unknown[]): void;
  warn(...a: unknown[]): void;
  error(...a: unknown[]): void;
}

export interface KeeperDeps {
  source: ScheduleSource;
  ready: ReadySet;
  signal: KeeperSignal;
  state: StateDoc<unknown>;
  config: () => QueueKeeperConfig;
  isLeased: (key: string, now: number) => boolean;
  /** isLeased by the row's stored keyHash (publish uses it: no re-hash of each candidate). */
  isLeasedHash?: (hi: number, lo: number, now: number) => boolean;
  /** Live leases right now (a reconciled scan). */
  inFlight: (now: number) => number;
  /** Pause and status as the node reports them, for the state document. */
  nodeView: () => { paused: boolean; status: string };
  owns?: (key: string) => boolean;
  log: KeeperLog;
  metric?: (
    name: 'keeper_load_ms' | 'keeper_publish_ms' | 'keeper_verify_ms' | 'keeper_live',
    value: number,
  ) => void;
  countRepaired?: (n: number) => void;
  /** Called on every publish tick with the per-queue due summary (the notify `created` edge reads it). */
  onDue?: (summary: DueSummary, now: number) => void;
  /**
   * A live write made a row due now (filed due-now, revalidated, changed): the keeper asks for an early
   * publish so it is claimable within ~50 ms instead of at the next interval (SPEC §10).
   */
  onDueNow?: () => void;
  /** Yield to the event loop between chunks (tests pass a no-op). */
  yieldLoop?: () => Promise<void>;
  /** Runs `fn` after `ms` (setTimeout, unref'd, by default; tests pass a fake timer). */
  later?: (fn: () => void, ms: number) => void;
}

export const WALK_CHUNK = 1000;
const FORCED_PUBLISH_MS = 10_000;
const HEAD_CHECK_ROWS = 64;
const HEAD_CHECK_EVERY_MS = 60_000;
export const RESUBSCRIBE_BACKOFF_MS = 30_000;
export const VERIFY_RETRY_MS = 30_000;
export const LOAD_BACKOFF_MS = 30_000;
export const LOAD_BACKOFF_MAX_MS = 600_000;

export interface KeeperStats {
  loadMs: number | null;
  loadRows: number;
  lastPublish: { at: number; ms: number; published: number; skippedLeased: number; complete: boolean } | null;
  headCheck: { at: number; checked: number; repaired: number } | null;
  lastVerify: {
    at: number;
    ms: number;
    missing: number;
    mismatched: number;
    phantom: number;
    unowned: number;
    /** Rows picked up because the cluster membership changed (not repairs). */
    gained: number;
    repaired: number;
  } | null;
  repairedTotal: number;
  lastError: string | null;
  /** Time spent applying subscription events (decode + classify + move), for the per-write cost. */
  apply: { events: number; ms: number };
}

function toKeeperRow(row: ScheduleRow): KeeperRow {
  return row;
}

export class KeeperService {
  readonly core: KeeperCore;
  phase: KeeperPhase = 'stopped';
  /** Claims may be served (set from the first loaded chunk on). */
  serving = false;
  loadComplete = false;
  partial = false;
  resyncing = false;
  stats: KeeperStats = {
    loadMs: null,
    loadRows: 0,
    lastPublish: null,
    headCheck: null,
    lastVerify: null,
    repairedTotal: 0,
    lastError: null,
    apply: { events: 0, ms: 0 },
  };
  private touched: Set<string> | null = null;
  private verifyTouched: Set<string> | null = null;
  private stream: EventStream | null = null;
  private lastPublishKey = '';
  private lastPublishAt = -Infinity;
  private headChecked = new Map<string, number>();
  private verifying = false;
  /** The next verification walk follows a membership change: rows it adds are gains, not repairs. */
  private expectGains = false;
  private verifyQueued = false;
  private readonly yieldLoop: () => Promise<void>;
  private readonly later: (fn: () => void, ms: number) => void;
  /** Events applied; tests use it to wait for the consumer. */
  eventsApplied = 0;
  subscriptions = 0;

  constructor(private readonly deps: KeeperDeps) {
    const cfg = deps.config();
    this.core = new KeeperCore({ classify: this.classifier(cfg), score: this.scoreOptions(cfg) });
    this.yieldLoop = deps.yieldLoop ?? (() => new Promise((r) => setImmediate(r)));
    this.later =
      deps.later ??
      ((fn, ms) => {
        setTimeout(fn, ms).unref?.();
      });
  }

  private classifier(cfg: QueueKeeperConfig) {
    return (url: string, own: number | null) => classifyUrl(url, own, cfg);
  }

  private scoreOptions(cfg: QueueKeeperConfig) {
    const r = cfg.queue.ready;
    return {
      sitemapBoost: r.sitemapBoost,
      urgentHeadStart: r.urgentHeadStart,
      changedHeadStart: r.changedHeadStart,
    };
  }

  private owns(key: string): boolean {
    return this.deps.owns ? this.deps.owns(key) : true;
  }

  /** A route, default-cadence or score change: re-sort held rows in memory, never reload. */
  reclassify(): void {
    const cfg = this.deps.config();
    this.core.reclassify(this.classifier(cfg), this.scoreOptions(cfg));
  }

  /** Step 1: clear the signal, publish an empty set, report unready. */
  withdraw(now: number): void {
    this.serving = false;
    this.deps.ready.publish([], now);
    this.deps.signal.write({ live: false, phase: this.phase, dueCount: 0, complete: false }, now);
    this.deps.metric?.('keeper_live', 0);
  }

  applyEvent(ev: ScheduleEvent, now: number): void {
    const key = typeof ev.id === 'string' ? ev.id : String(ev.id);
    if (ev.type !== 'put' && ev.type !== 'delete' && ev.type !== 'patch') return;
    this.touched?.add(key);
    this.verifyTouched?.add(key);
    const row = ev.type === 'delete' || !ev.value ? undefined : toScheduleRow(key, ev.value);
    const held = row && this.owns(key) ? toKeeperRow(row) : null;
    const changed = this.core.apply(key, held, now);
    this.eventsApplied++;
    if (changed && held && held.nextRenderTime <= now && this.serving) this.deps.onDueNow?.();
  }

  /** Opens the subscription and consumes it in the background; resolves once subscribed. */
  async subscribe(now: () => number, onClosed: (err?: unknown) => void): Promise<void> {
    const stream = await this.deps.source.subscribe();
    this.stream = stream;
    this.subscriptions++;
    void (async () => {
      try {
        for await (const ev of stream) {
          if (this.stream !== stream) return;
          const t0 = performance.now();
          this.applyEvent(ev, now());
          this.stats.apply.ms += performance.now() - t0;
          this.stats.apply.events++;
        }
        if (this.stream === stream) onClosed();
      } catch (e) {
        if (this.stream === stream) onClosed(e);
      }
    })();
  }

  /**
   * The subscription ended or failed: the keeper keeps serving what it holds but marks itself resyncing
   * (`exact: false`), then after RESUBSCRIBE_BACKOFF_MS opens a new subscription and runs a verification
   * walk to pick up what it missed meanwhile. A failed attempt waits the backoff again — never a tight
   * loop against a store that is refusing subscriptions.
   */
  subscriptionClosed(now: () => number, err?: unknown): void {
    this.deps.log.error('keeper subscription closed; resubscribing after backoff, then verifying', err);
    this.resyncing = true;
    this.stats.lastError = `subscription closed: ${(err as Error | undefined)?.message ?? 'ended'}`;
    const onClosed = (e?: unknown) => this.subscriptionClosed(now, e);
    const retry = (): void => {
      this.later(() => {
        void (async () => {
          try {
            this.closeSubscription();
            await this.subscribe(now, onClosed);
            await this.verify(now);
            this.resyncing = false;
          } catch (e) {
            this.deps.log.error('keeper resubscribe failed; retrying after backoff', e);
            this.stats.lastError = `resubscribe failed: ${(e as Error | undefined)?.message ?? String(e)}`;
            retry();
          }
        })();
      }, RESUBSCRIBE_BACKOFF_MS);
    };
    retry();
  }

  closeSubscription(): void {
    const s = this.stream;
    this.stream = null;
    try {
      s?.end?.();
      // A stream's return() may hand back a promise that rejects; never let that go unhandled.
      void Promise.resolve(s?.return?.()).catch(() => undefined);
    } catch {
      // already closed
    }
  }

  private applyWalked(
    key: string,
    row: ScheduleRow | undefined,
    now: number,
    touched: Set<string> | null,
  ): void {
    // Events win: a key an event touched since the walk began keeps the event's value.
    if (touched?.has(key) || !row) return;
    if (!this.owns(key)) return;
    this.core.apply(key, toKeeperRow(row), now);
  }

  /**
   * Walks the table in chunks, applying rows no event has touched; publishes while loading. On a key
   * that does not decode it reads the rest from the top down; if that also stops short the load ends
   * partial (`exact: false`).
   */
  async load(now: () => number): Promise<void> {
    const started = now();
    this.phase = 'loading';
    this.loadComplete = false;
    this.partial = false;
    this.touched = new Set();
    let rows = 0;
    let lastKey: string | undefined;
    let forwardFailed: unknown = null;
    // Rows are applied as the walk yields them, never after collecting a chunk: a walk that throws at an
    // unreadable key must keep the rows it read before it, and lastKey must be the last one read, or the
    // good rows beside the bad key would be dropped (and the top-down walk could not reach them either).
    try {
      for (;;) {
        let read = 0;
        for (const { key, row } of this.deps.source.walk({
          start: lastKey,
          exclusiveStart: lastKey !== undefined,
          limit: WALK_CHUNK,
        })) {
          this.applyWalked(key, row, now(), this.touched);
          rows++;
          read++;
          lastKey = key;
        }
        if (read === 0) break;
        this.serving = true;
        // Serve from the first chunk on, then publish at the publish interval: a publish per chunk was
        // ~45 % of a 1M-row load's CPU (bench/README.md), for sets claims mostly never saw.
        const t = now();
        if (t - this.lastPublishAt >= this.deps.config().queue.keeper.publishInterval)
          this.publishOnce(t, false);
        await this.yieldLoop();
      }
    } catch (e) {
      forwardFailed = e;
    }
    if (forwardFailed) {
      this.deps.log.error(
        `keeper load stopped at an unreadable row after ${rows} rows; reading the rest from the top down`,
        forwardFailed,
      );
      let top: string | undefined;
      try {
        for (;;) {
          let read = 0;
          for (const { key, row } of this.deps.source.walk({
            start: top,
            end: lastKey,
            reverse: true,
            exclusiveStart: top !== undefined,
            limit: WALK_CHUNK,
          })) {
            this.applyWalked(key, row, now(), this.touched);
            rows++;
            read++;
            top = key;
          }
          if (read === 0) break;
          this.serving = true;
          await this.yieldLoop();
        }
      } catch (e) {
        this.partial = true;
        this.stats.lastError = `partial load: ${(e as Error)?.message ?? String(e)}`;
        this.deps.log.error(
          `keeper load is partial: the top-down walk also stopped short; live on ${this.core.size} rows with exact=false`,
          e,
        );
      }
    }
    this.touched = null;
    this.stats.loadMs = now() - started;
    this.stats.loadRows = rows;
    this.deps.metric?.('keeper_load_ms', this.stats.loadMs);
    this.loadComplete = true;
    this.serving = true;
    this.phase = 'live';
    this.deps.metric?.('keeper_live', 1);
    this.publishOnce(now(), true);
  }

  /** What a publish depends on: held version, minute, lease occupancy, consumption of the set. */
  private changeKey(now: number): string {
    return `${this.core.version}|${Math.floor(now / 60_000)}|${this.deps.inFlight(now)}|${this.deps.ready.cursorPosition()}`;
  }

  /** Publishes the ready set when anything changed (or 10 s passed); always writes the heartbeat. */
  publishOnce(now: number, force: boolean): boolean {
    const cfg = this.deps.config();
    this.core.tick(now);
    const key = this.changeKey(now);
    const summary = this.core.dueSummary(now);
    const due = summary.due;
    // Only a complete load is a baseline: a queue first seen in a later chunk is not a new edge.
    if (this.serving && this.loadComplete) this.deps.onDue?.(summary, now);
    const complete = this.loadComplete && !this.partial;
    if (!force && key === this.lastPublishKey && now - this.lastPublishAt < FORCED_PUBLISH_MS) {
      this.deps.signal.write({ live: this.serving, phase: this.phase, dueCount: due, complete }, now);
      return false;
    }
    const t0 = performance.now();
    const leasedHash = this.deps.isLeasedHash;
    const top = this.core.topK(
      cfg.queue.ready.capacity,
      now,
      leasedHash ? (_k, hi, lo) => leasedHash(hi, lo, now) : (k) => this.deps.isLeased(k, now),
    );
    const r = this.deps.ready.publish(top.entries, now);
    const ms = performance.now() - t0;
    // Taken after the write: the publish resets the cursor, which must not read as a change next tick.
    this.lastPublishKey = this.changeKey(now);
    this.lastPublishAt = now;
    this.stats.lastPublish = {
      at: now,
      ms,
      published: r.published,
      skippedLeased: top.skipped,
      complete: top.complete,
    };
    this.deps.metric?.('keeper_publish_ms', ms);
    this.deps.signal.write({ live: this.serving, phase: this.phase, dueCount: due, complete }, now);
    this.headCheck(
      now,
      top.entries.slice(0, HEAD_CHECK_ROWS).map((e) => e.key),
    );
    return true;
  }

  /**
   * Point-reads the head of the published set (each key at most once a minute) and repairs what the
   * keeper holds wrongly. Reads are synchronous, so no event can land between the read and the repair;
   * the read snapshot is refreshed first so it is never older than the events already applied.
   */
  headCheck(now: number, keys: string[]): number {
    this.reportUnclaimable();
    this.deps.source.refreshReads?.();
    let checked = 0;
    let repaired = 0;
    for (const key of keys) {
      const last = this.headChecked.get(key);
      if (last !== undefined && now - last < HEAD_CHECK_EVERY_MS) continue;
      this.headChecked.set(key, now);
      checked++;
      const row = this.deps.source.read(key);
      const want = row && this.owns(key) ? toKeeperRow(row) : null;
      if (!this.core.matches(key, want)) {
        this.core.apply(key, want, now);
        repaired++;
      }
    }
    if (this.headChecked.size > 10_000) {
      for (const [k, at] of this.headChecked) if (now - at >= HEAD_CHECK_EVERY_MS) this.headChecked.delete(k);
    }
    if (checked > 0) this.stats.headCheck = { at: now, checked, repaired };
    if (repaired > 0) {
      this.stats.repairedTotal += repaired;
      this.deps.countRepaired?.(repaired);
      this.deps.log.warn(`keeper head check repaired ${repaired} of ${checked} rows`);
    }
    return repaired;
  }

  private unclaimableLogged = 0;

  /** Says once per batch, at error level, that rows were refused as unclaimable (they need a fix by hand). */
  private reportUnclaimable(): void {
    const n = this.core.unclaimable;
    if (n === this.unclaimableLogged) return;
    this.deps.log.error(
      `keeper: ${n - this.unclaimableLogged} row(s) not held because their key is not well-formed Unicode ` +
        `(a lone surrogate) and can never be claimed; delete or re-file them. Last: ${JSON.stringify(
          (this.core.lastUnclaimable ?? '').slice(0, 200),
        )}`,
    );
    this.unclaimableLogged = n;
  }

  /**
   * The verification walk: add missing rows, fix mismatched ones, drop rows no longer owned, then
   * point-check held keys for rows deleted without an event. A walk asked for while one runs is queued.
   */
  async verify(now: () => number): Promise<NonNullable<KeeperStats['lastVerify']> | null> {
    if (this.verifying) {
      this.verifyQueued = true;
      return null;
    }
    this.verifying = true;
    try {
      let result: NonNullable<KeeperStats['lastVerify']>;
      do {
        this.verifyQueued = false;
        result = await this.verifyWalk(now);
      } while (this.verifyQueued);
      return result;
    } finally {
      this.verifying = false;
      this.verifyTouched = null;
    }
  }

  private async verifyWalk(now: () => number): Promise<NonNullable<KeeperStats['lastVerify']>> {
    const started = now();
    const t0 = performance.now();
    this.verifyTouched = new Set();
    const touched = this.verifyTouched;
    let missing = 0;
    let mismatched = 0;
    let phantom = 0;
    let unowned = 0;
    let gained = 0;
    const gains = this.expectGains;
    this.expectGains = false;
    let lastKey: string | undefined;
    for (;;) {
      const chunk = [
        ...this.deps.source.walk({
          start: lastKey,
          exclusiveStart: lastKey !== undefined,
          limit: WALK_CHUNK,
        }),
      ];
      if (chunk.length === 0) break;
      for (const { key, row } of chunk) {
        if (touched.has(key) || !row) continue;
        if (!this.owns(key)) {
          if (this.core.has(key)) {
            this.core.apply(key, null, now());
            unowned++;
          }
          continue;
        }
        if (!this.core.has(key)) {
          if (gains) gained++;
          else missing++;
        } else if (!this.core.matches(key, toKeeperRow(row))) mismatched++;
        else continue;
        this.core.apply(key, toKeeperRow(row), now());
      }
      lastKey = chunk[chunk.length - 1]!.key;
      await this.yieldLoop();
    }
    // Deleted rows leave no trace in a walk: point-check what we hold.
    this.deps.source.refreshReads?.();
    const held = [...this.core.keys()];
    for (let i = 0; i < held.length; i++) {
      const key = held[i]!;
      if (!touched.has(key) && this.deps.source.read(key) === undefined) {
        this.core.apply(key, null, now());
        phantom++;
      }
      if (i % WALK_CHUNK === WALK_CHUNK - 1) await this.yieldLoop();
    }
    const repaired = missing + mismatched + phantom;
    const result = {
      at: started,
      ms: performance.now() - t0,
      missing,
      mismatched,
      phantom,
      unowned,
      gained,
      repaired,
    };
    this.stats.lastVerify = result;
    this.stats.repairedTotal += repaired;
    this.deps.metric?.('keeper_verify_ms', result.ms);
    if (gains) this.deps.log.info(`keeper: picked up ${gained} rows gained by the membership change`);
    if (repaired > 0) {
      this.deps.countRepaired?.(repaired);
      this.deps.log.warn(
        `keeper verification repaired ${repaired} rows (missing=${missing} mismatched=${mismatched} phantom=${phantom})`,
      );
    }
    return result;
  }

  /**
   * The cluster membership changed (SPEC §9): drop the rows this node no longer owns at once, then walk
   * the table for the rows it gained. `owns` must already answer with the new membership.
   */
  async membershipChanged(now: () => number): Promise<{ dropped: number; gained: number }> {
    let dropped = 0;
    for (const key of [...this.core.keys()]) {
      if (this.owns(key)) continue;
      this.core.apply(key, null, now());
      dropped++;
    }
    this.deps.log.info(`keeper: cluster membership changed; dropped ${dropped} rows no longer owned`);
    this.expectGains = true;
    // A walk already running queues one more; that one counts the gains (and logs them).
    const walk = await this.verify(now);
    return { dropped, gained: walk?.gained ?? 0 };
  }

  /** Whether the keeper can vouch for its numbers right now. */
  exact(): boolean {
    return (
      this.phase === 'live' &&
      !this.resyncing &&
      !this.partial &&
      (this.stats.lastVerify?.repaired ?? 0) === 0
    );
  }

  /** Computes the queue-state document and writes it to shared memory. */
  writeState(now: number): boolean {
    const cfg = this.deps.config();
    const counts = this.core.state(now);
    const inFlight = this.deps.inFlight(now);
    const node = this.deps.nodeView();
    const doc = {
      now: {
        ...counts.now,
        inFlight,
        unclaimed: Math.max(0, counts.now.due - inFlight),
        paused: node.paused,
        status: node.status,
      },
      coming: counts.coming,
      lateness: counts.lateness,
      flow: counts.flow,
      trust: {
        source: 'keeper',
        live: this.phase === 'live',
        phase: this.phase,
        exact: this.exact(),
        stateAt: now,
        maxAgeMs: stateMaxAgeMs(cfg.queue.keeper.stateInterval),
        keeper: {
          rows: this.core.size,
          classes: this.core.classCount,
          load: { ms: this.stats.loadMs, rows: this.stats.loadRows, partial: this.partial },
          lastPublish: this.stats.lastPublish,
          headCheck: this.stats.headCheck,
          lastVerify: this.stats.lastVerify,
          repairedTotal: this.stats.repairedTotal,
          apply: {
            events: this.stats.apply.events,
            avgUs: this.stats.apply.events ? (1000 * this.stats.apply.ms) / this.stats.apply.events : null,
          },
          resyncing: this.resyncing,
          lastError: this.stats.lastError,
        },
      },
    };
    return this.deps.state.write(doc, now);
  }
}
