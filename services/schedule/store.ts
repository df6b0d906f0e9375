// The schedule owner: the only module that reads or writes RenderSchedule (test/unit/tableOwners
// fails if another source file names the table). Rules live in util/schedule/rules.ts; this file reads
// rows, applies a rule and writes the whole row back. Reads are module functions (they hold nothing);
// the writes and the group commit of results live on one ScheduleOwner built in resources.ts.
import { HttpError } from '../runtime/httpError.js';
import { sameSchedule, toScheduleRow, type ScheduleRow } from '../../util/schedule/rules.js';
import type { SitemapItem } from '../../util/schedule/sitemapRules.js';
import {
  ScheduleWrites,
  type SitemapFiled,
  type ResultApplied,
  type ResultWrite,
  type ScheduleStore,
  type RetiredEntry,
  type ScheduleWrite,
  type UrlsChanged,
} from '../../util/schedule/writes.js';
import { GroupCommit } from '../../util/schedule/groupCommit.js';
import type { FailingEntry } from '../../util/schedule/failing.js';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { SchedulerTimer } from '../../util/duties/scheduler.js';
import {
  log,
  table,
  transaction,
  transactionAt,
  type HarperTable,
  type SubscriptionEvent,
} from '../runtime/harper.js';
import { withKeyLocks } from '../runtime/storeLock.js';
import { rowKey, splitRowKey } from '../../util/schedule/rowKey.js';

export type { ResultApplied, ResultWrite } from '../../util/schedule/writes.js';

/**
 * How long a write waits for another writer of the same keys. A chunk holds its locks for one commit
 * (milliseconds); only a holder that died mid-section (a terminated worker) keeps one longer.
 */
const LOCK_WAIT_MS = 10_000;

// Looked up per use (two property reads), so the module holds no state of its own.
const schedule = (): HarperTable => table('render_schedule', 'RenderSchedule');
const failing = (): HarperTable => table('render_schedule', 'RenderFailing');
const retiredList = (): HarperTable => table('render_schedule', 'RenderRetired');

/** A local point read: does the failing list hold an entry for this key? */
function hasFailingEntry(key: string): boolean {
  const v = failing().primaryStore.get(key);
  return v !== null && v !== undefined;
}

/**
 * Keeps the failing list in step with a row written in `txn`: an entry while the row has strikes, none
 * once it has not (or is gone). `hadEntry` says whether one may be there to remove.
 */
async function followFailing(
  key: string,
  row: ScheduleRow | null,
  hadEntry: boolean,
  txn: unknown,
): Promise<void> {
  if (row !== null && row.strikes > 0)
    await failing().put(key, { id: key, strikes: row.strikes, failingSince: row.failingSince ?? 0 }, txn);
  else if (hadEntry) await failing().delete(key, txn);
}
/**
 * The keys of every stored row of `url`, any device: one short range read over `<url>|`, where a URL's
 * devices sit side by side (a longer URL that only starts with `<url>|` is passed over).
 */
export function keysOfUrl(url: string): string[] {
  const out: string[] = [];
  // '}' follows '|' in byte order: the range holds every key that starts with `<url>|`.
  for (const key of schedule().primaryStore.getKeys({ start: `${url}|`, end: `${url}}` })) {
    if (typeof key === 'string' && splitRowKey(key)?.url === url) out.push(key);
  }
  return out;
}

/** The primary store for rawRecords.ts's raw reads (this file stays the table's one owner). */
export const schedulePrimaryStore = () => schedule().primaryStore;

function toRecord(row: ScheduleRow): Record<string, unknown> {
  return { ...row };
}

/**
 * A local point read straight from the primary store: never a replication fetch, ~2 µs. Deleted rows
 * can leave a non-record value behind, so anything without a due time reads as absent.
 */
export function readRow(key: string): ScheduleRow | undefined {
  const v = schedule().primaryStore.get(key);
  if (!v || typeof v !== 'object') return undefined;
  return toScheduleRow(key, v as Record<string, unknown>);
}

/**
 * What serving (services/serving/service.ts) reads of a row: its next render time, urgent mark and
 * `state` when the row carries one. One local point read; undefined when there is no row.
 */
export function readServingRow(
  key: string,
): { nextRenderTime: number; urgentAt: number | null; state: string | null } | undefined {
  const v = schedule().primaryStore.get(key) as Record<string, unknown> | null | undefined;
  if (!v || typeof v !== 'object' || typeof v.nextRenderTime !== 'number') return undefined;
  return {
    nextRenderTime: v.nextRenderTime,
    urgentAt: typeof v.urgentAt === 'number' ? v.urgentAt : null,
    state: typeof v.state === 'string' ? v.state : null,
  };
}

/**
 * How long a chunk keeps writing until every write reads back. The crash soak (bench/crash-soak.ts)
 * found rows whose delete was committed and answered and yet never took. The suspected cause (read in
 * Harper's source, not proven): a transaction is stamped with its thread's clock (performance.now() plus
 * a per-thread offset, re-synced every minute) and a write whose stamp precedes the record's current
 * version is dropped, so a delete on one worker just after a put on another can vanish while its commit
 * resolves normally. Reading back under the locks catches any such loss; writing again gets a later stamp.
 */
const STICK_WAIT_MS = 2000;

/**
 * Result writes that reach this worker within this long of the first share one batch: one lock round,
 * one transaction, one read-back (measured in bench/README.md). 0 turns it off. The environment may name
 * another wait (GROUP_COMMIT_WAIT_ENV, util/schedule/groupCommit.ts), which resources.ts hands in.
 */
export const GROUP_COMMIT_WAIT_MS = 2;
/** Under one write chunk (1,000 keys), so a merged batch takes one sorted lock set and one transaction. */
const GROUP_COMMIT_MAX_RESULTS = 500;

export interface ScheduleOwnerDeps {
  config: () => QueueKeeperConfig;
  /** The group commit's batch window (unref'd, like every timer of the worker: util/duties/scheduler.ts). */
  timer: SchedulerTimer;
  /** The one-shot waits of a commit: a retry's backoff and a turn for a commit to show. */
  sleep: (ms: number) => Promise<void>;
  /**
   * The point read under the locks (before deciding, and back after the commit); readRow unless
   * resources.ts hands in the raw reader (rawRecords.ts readScheduleRow), which answers the same.
   */
  read?: (key: string) => ScheduleRow | undefined;
  /** The group commit's wait (ms); GROUP_COMMIT_WAIT_MS unless resources.ts hands in another. */
  groupCommitWaitMs?: number;
  /**
   * While the upgrade to device keys runs (services/devices/duties.ts), the device it moves bare-URL rows
   * to; null once it is done. A write that finds no row under `<url>|<that device>` reads the bare row
   * instead, so a feeder filing (or a walk listing) a URL the upgrade has not reached yet keeps its
   * history; the upgrade then finds the device row written and only drops the bare one.
   */
  upgradeDevice?: () => string | null;
}

/**
 * The schedule's writes on this worker, bound to Harper: every change goes through one ScheduleWrites,
 * and result writes through one group commit whose open batch lives here. Built once, in resources.ts.
 */
export class ScheduleOwner {
  private readonly writes: ScheduleWrites;
  private readonly resultBatches: GroupCommit<ResultWrite, ResultApplied>;
  private readonly read: (key: string) => ScheduleRow | undefined;

  constructor(private readonly deps: ScheduleOwnerDeps) {
    this.read = deps.read ?? readRow;
    const store: ScheduleStore = {
      read: (key) => this.read(key),
      bareRow: (key) => this.bareRow(key),
      keysOfUrl,
      locked: async (keys, fn) => {
        const r = await withKeyLocks(schedule().primaryStore, 'schedule', keys, LOCK_WAIT_MS, fn);
        if (!r.locked)
          throw new HttpError(
            503,
            'busy',
            'another write of the same targets is still running; retry shortly',
          );
        return r.value;
      },
      commit: (writes) => this.commit(writes),
    };
    this.writes = new ScheduleWrites(store, deps.config);
    this.resultBatches = new GroupCommit<ResultWrite, ResultApplied>({
      run: (results) => this.writes.applyResults(results),
      maxItems: GROUP_COMMIT_MAX_RESULTS,
      maxWaitMs: deps.groupCommitWaitMs ?? GROUP_COMMIT_WAIT_MS,
      setTimer: (fn, ms) => deps.timer.set(fn, ms),
      clearTimer: (handle) => deps.timer.clear(handle),
    });
  }

  /** The bare-URL row a device key stands for while the upgrade has not moved it (deps.upgradeDevice). */
  private bareRow(key: string): ScheduleRow | undefined {
    const device = this.deps.upgradeDevice?.() ?? null;
    if (device === null) return undefined;
    const parts = splitRowKey(key);
    if (parts === null || parts.device !== device) return undefined;
    const bare = this.read(parts.url);
    return bare === undefined ? undefined : { ...bare, cacheKey: key };
  }

  /** Files verified targets; entries for one URL within a batch apply in order (last wins). */
  fileTargets(targets: Parameters<ScheduleWrites['fileTargets']>[0], now: number): Promise<number> {
    return this.writes.fileTargets(targets, now);
  }

  /** Deletes every row of each URL, whatever its device; counts the URLs that had one. */
  deleteTargets(urls: readonly string[]): Promise<UrlsChanged> {
    return this.writes.deleteTargets(urls);
  }

  /**
   * Files unverified rows, a row per configured device, only where none exists and `mayFile` allows;
   * an existing row is never changed by this path. Counts the URLs that got a row.
   */
  discoverUrls(urls: readonly string[], now: number, mayFile?: (key: string) => boolean): Promise<number> {
    return this.writes.discoverUrls(urls, now, mayFile);
  }

  /** Files the URLs a sitemap walk read (docs/sitemaps.md); answers what each did. */
  fileFromSitemap(
    items: readonly SitemapItem[],
    sitemapId: string,
    now: number,
    mayFile?: (key: string) => boolean,
  ): Promise<SitemapFiled> {
    return this.writes.fileFromSitemap(items, sitemapId, now, mayFile);
  }

  /** Unlinks the rows of `sitemapId` among `urls` (they left it); counts them. */
  unlinkFromSitemap(urls: readonly string[], sitemapId: string): Promise<number> {
    return this.writes.unlinkFromSitemap(urls, sitemapId);
  }

  /** Deletes the rows of `sitemapId` among `urls`; answers the URLs deleted (their pages go next). */
  deleteSitemapRows(urls: readonly string[], sitemapId: string): Promise<string[]> {
    return this.writes.deleteSitemapRows(urls, sitemapId);
  }

  /** Files a device's rows from their URLs' other rows, where none exists (services/devices/duties.ts). */
  fileDeviceRows(pairs: ReadonlyArray<{ key: string; source: ScheduleRow }>): Promise<number> {
    return this.writes.fileDeviceRows(pairs);
  }

  /** Deletes rows by key; counts those that existed. */
  deleteKeys(keys: readonly string[]): Promise<number> {
    return this.writes.deleteKeys(keys);
  }

  /** Every row of `url` due now and urgent, whatever its device; none when it has no row. */
  revalidate(url: string, now: number): Promise<ScheduleRow[]> {
    return this.writes.revalidate(url, now);
  }

  /** Rewrites rows unchanged, so the keeper looks again at leases released early (the rows view's release). */
  touchKeys(keys: readonly string[]): Promise<number> {
    return this.writes.touchKeys(keys);
  }

  /** The rows of these keys due now and urgent (the rows view's render-now); a key with no row is passed. */
  revalidateKeys(keys: readonly string[], now: number): Promise<ScheduleRow[]> {
    return this.writes.revalidateKeys(keys, now);
  }

  /** One row by key due now and urgent (serving's render-now); undefined when there is none. */
  async revalidateKey(key: string, now: number): Promise<ScheduleRow | undefined> {
    return (await this.writes.revalidateKeys([key], now))[0];
  }

  /**
   * Reschedules rows after results; a row deleted meanwhile stays deleted. Resolves once the batch the
   * results joined has committed and read back; a failed batch rejects every caller in it.
   */
  applyResults(results: readonly ResultWrite[]): Promise<ResultApplied[]> {
    return this.resultBatches.submit(results);
  }

  /** Commits one chunk, writing again until every write reads back (STICK_WAIT_MS) or answering busy. */
  private async commit(writes: readonly ScheduleWrite[]): Promise<void> {
    let left: readonly ScheduleWrite[] = writes;
    const deadline = Date.now() + STICK_WAIT_MS;
    for (let attempt = 0; ; attempt++) {
      await transaction(async (txn) => {
        for (const w of left) {
          if (w.row) await schedule().put(w.key, toRecord(w.row), txn);
          else await schedule().delete(w.key, txn);
          // A retirement's entry commits with the delete: the row never leaves without one.
          if (w.retired) await retiredList().put(w.key, { id: w.key, ...w.retired }, txn);
          await followFailing(w.key, w.row, w.wasFailing ?? hasFailingEntry(w.key), txn);
        }
      });
      left = await this.notYetRead(left);
      if (left.length === 0) return;
      if (Date.now() >= deadline) {
        log.error(
          `schedule: ${left.length} committed write(s) still not applied after ${STICK_WAIT_MS} ms; answering busy`,
        );
        throw new HttpError(503, 'busy', 'the write did not take effect in time; retry shortly');
      }
      // Written again in a fresh transaction: its stamp is later than whatever version beat this one.
      if (attempt > 0) await this.deps.sleep(Math.min(50, 2 ** attempt));
    }
  }

  /**
   * The writes this thread cannot read back yet, after a short wait for the commit to show: the next
   * holder of a key must read the committed row, or its read-decide-write could undo this one. Normally
   * every write reads back at once; it costs one point read per key.
   */
  private async notYetRead(writes: readonly ScheduleWrite[]): Promise<ScheduleWrite[]> {
    const store = schedule().primaryStore;
    let pending: ScheduleWrite[] = [];
    for (let look = 0; look < 5; look++) {
      store.resetReadTxn?.();
      pending = writes.filter((w) => {
        const now = this.read(w.key);
        return w.row ? now === undefined || !sameSchedule(now, w.row) : now !== undefined;
      });
      if (pending.length === 0) return pending;
      await this.deps.sleep(0);
    }
    return pending;
  }
}

/**
 * Replica repair (services/cluster/repair.ts): the row as stored and its version, while the stored entry
 * is live and still at `version`; what a peer that lacks the row takes from this node.
 */
export function scheduleEntry(key: string, version: number): Record<string, unknown> | undefined {
  const e = schedule().primaryStore.getEntry?.(key);
  if (e?.version !== version || !e.value || typeof e.value !== 'object') return undefined;
  return { ...(e.value as Record<string, unknown>) };
}

/**
 * Replica repair: takes a row another node holds at a newer version than this node does (or that this
 * node lacks), written here under that version, not the clock's, so every node ends with the same
 * version and nothing newer is ever overwritten. Under the key's lock, and only while this node holds no
 * version (live or deleted) at or after it. Answers whether it wrote.
 */
export async function takeScheduleRow(
  key: string,
  version: number,
  record: Record<string, unknown>,
): Promise<boolean> {
  const row = toScheduleRow(key, record);
  if (row === undefined) return false;
  const store = schedule().primaryStore;
  const r = await withKeyLocks(store, 'schedule', [key], LOCK_WAIT_MS, async () => {
    const e = store.getEntry?.(key);
    if (e !== undefined && (typeof e.version !== 'number' || e.version >= version)) return false;
    await transactionAt(version, async (txn) => {
      await schedule().put(key, toRecord(row), txn);
      await followFailing(key, row, hasFailingEntry(key), txn);
    });
    return true;
  });
  return r.locked && r.value;
}

/**
 * Replica repair: a row this node holds that another node deleted later is deleted here under that
 * deletion's version (never a newer one), only while the stored version is still older than it.
 */
export async function deleteScheduleRowAt(key: string, version: number): Promise<boolean> {
  const store = schedule().primaryStore;
  const r = await withKeyLocks(store, 'schedule', [key], LOCK_WAIT_MS, async () => {
    const e = store.getEntry?.(key);
    if (e === undefined || typeof e.version !== 'number' || e.version >= version || !e.value) return false;
    await transactionAt(version, async (txn) => {
      await schedule().delete(key, txn);
      await followFailing(key, null, hasFailingEntry(key), txn);
    });
    return true;
  });
  return r.locked && r.value;
}

/** The schedule's keys from `start` (after it when `exclusive`) below `end`, at most `limit`, in key order. */
export function* scheduleKeysInRange(range: {
  start?: string;
  end?: string;
  exclusive: boolean;
  limit: number;
}): Generator<string> {
  for (const key of schedule().primaryStore.getKeys({
    start: range.start,
    end: range.end,
    exclusiveStart: range.exclusive && range.start !== undefined,
    limit: range.limit,
  }))
    if (typeof key === 'string') yield key;
}

/** The schedule's keys after `after` (all from the start when undefined), at most `limit`, in key order. */
export function scheduleKeysAfter(after: string | undefined, limit: number): string[] {
  const out: string[] = [];
  for (const key of schedule().primaryStore.getKeys({
    start: after,
    exclusiveStart: after !== undefined,
    limit,
  }))
    if (typeof key === 'string') out.push(key);
  return out;
}

/**
 * The upgrade to device keys (services/devices/duties.ts): moves each row keyed by a bare URL to
 * `<url>|<device>` with every field and its failing-list entry, in one transaction per chunk, under both
 * keys' locks. Where the new key already has a row (a feeder filed the URL since the start), that row is
 * kept and the old one goes. Answers the rows moved.
 */
export async function moveBareRows(keys: readonly string[], device: string): Promise<number> {
  const store = schedule().primaryStore;
  const pairs = keys.map((from) => ({ from, to: rowKey(from, device) }));
  const r = await withKeyLocks(
    store,
    'schedule',
    pairs.flatMap((p) => [p.from, p.to]),
    LOCK_WAIT_MS,
    async () => {
      store.resetReadTxn?.();
      let moved = 0;
      await transaction(async (txn) => {
        for (const { from, to } of pairs) {
          const old = readRow(from);
          if (old === undefined) continue;
          if (readRow(to) === undefined) {
            const row = { ...old, cacheKey: to };
            await schedule().put(to, toRecord(row), txn);
            await followFailing(to, row, hasFailingEntry(to), txn);
            moved++;
          }
          await schedule().delete(from, txn);
          await followFailing(from, null, hasFailingEntry(from), txn);
          const retired = retiredList().primaryStore.get(from) as Record<string, unknown> | undefined;
          if (retired && typeof retired === 'object') {
            await retiredList().put(to, { ...retired, id: to, deviceType: device }, txn);
            await retiredList().delete(from, txn);
          }
        }
      });
      return moved;
    },
  );
  if (!r.locked) throw new Error('the upgrade could not lock rows a writer held; it retries');
  return r.value;
}

/** Moves the retired list's entries keyed by a bare URL to `<url>|<device>`; answers how many. */
export async function moveBareRetired(device: string): Promise<number> {
  const bare: Array<{ key: string; value: Record<string, unknown> }> = [];
  for (const { key, value } of retiredList().primaryStore.getRange({}))
    if (typeof key === 'string' && splitRowKey(key) === null && value && typeof value === 'object')
      bare.push({ key, value: value as Record<string, unknown> });
  if (bare.length === 0) return 0;
  await transaction(async (txn) => {
    for (const { key, value } of bare) {
      const to = rowKey(key, device);
      await retiredList().put(to, { ...value, id: to, url: key, deviceType: device }, txn);
      await retiredList().delete(key, txn);
    }
  });
  return bare.length;
}

/** Live schedule events (no replay of current rows): the keeper subscribes before it walks. */
export async function subscribeSchedule(): Promise<
  AsyncIterable<SubscriptionEvent> & { end?: () => void; return?: () => void }
> {
  return schedule().subscribe({ omitCurrent: true });
}

/** Live writes of one row (no replay): a render-now waiter learns that a render ended without a page. */
export async function subscribeRow(
  key: string,
): Promise<AsyncIterable<SubscriptionEvent> & { end?: () => void; return?: () => void }> {
  return schedule().subscribe({ id: key, omitCurrent: true });
}

export interface WalkOptions {
  start?: string;
  end?: string;
  reverse?: boolean;
  limit?: number;
  /** Start strictly after `start` (the walk's resume point). */
  exclusiveStart?: boolean;
}

/**
 * Walks the table by primary key straight from the store. Yields `{key, row}`; a stored value that is
 * not a schedule record yields `row: undefined` so the caller can count it. A key that does not decode
 * throws from the iterator: the caller resumes from the other end.
 */
export function* walkSchedule(opts: WalkOptions): Generator<{ key: string; row: ScheduleRow | undefined }> {
  const range = schedule().primaryStore.getRange({
    start: opts.start,
    end: opts.end,
    reverse: opts.reverse ?? false,
    limit: opts.limit,
    exclusiveStart: opts.exclusiveStart,
  });
  for (const { key, value } of range) {
    if (typeof key !== 'string') continue;
    const row =
      value && typeof value === 'object' ? toScheduleRow(key, value as Record<string, unknown>) : undefined;
    yield { key, row };
  }
}

/** The failing list's entries (every row whose last result failed), read from its own small table. */
/** The retired list's entries (retired rows, newest kept), read from its own small table. */
export function* retiredEntries(): Generator<RetiredEntry> {
  for (const { key, value } of retiredList().primaryStore.getRange({})) {
    if (typeof key !== 'string' || typeof value !== 'object' || value === null) continue;
    const v = value as Record<string, unknown>;
    if (typeof v.retiredAt !== 'number' || typeof v.reason !== 'string') continue;
    const parts = splitRowKey(key);
    yield {
      url: typeof v.url === 'string' ? v.url : (parts?.url ?? key),
      deviceType: typeof v.deviceType === 'string' ? v.deviceType : (parts?.device ?? ''),
      reason: v.reason as RetiredEntry['reason'],
      queue: typeof v.queue === 'string' ? v.queue : 'unrouted',
      lastStatusCode: typeof v.lastStatusCode === 'number' ? v.lastStatusCode : null,
      retiredAt: v.retiredAt,
    };
  }
}

/** Whether the retired list has a live entry for the row `key` (discover files no row for it). */
export function isRetired(key: string, now: number, retentionMs: number): boolean {
  const v = retiredList().primaryStore.get(key) as { retiredAt?: unknown } | undefined;
  return typeof v?.retiredAt === 'number' && now - v.retiredAt < retentionMs;
}

/** Deletes retired entries older than the retention, at most `limit` a call; answers how many. */
export async function dropExpiredRetired(now: number, retentionMs: number, limit: number): Promise<number> {
  const old: string[] = [];
  for (const { key, value } of retiredList().primaryStore.getRange({})) {
    const at = (value as { retiredAt?: unknown } | null)?.retiredAt;
    if (typeof key === 'string' && typeof at === 'number' && now - at >= retentionMs) old.push(key);
    if (old.length >= limit) break;
  }
  if (old.length === 0) return 0;
  await transaction(async (txn) => {
    for (const key of old) await retiredList().delete(key, txn);
  });
  return old.length;
}

export function* failingEntries(): Generator<FailingEntry> {
  for (const { key, value } of failing().primaryStore.getRange({})) {
    if (typeof key !== 'string' || typeof value !== 'object' || value === null) continue;
    const v = value as { strikes?: unknown; failingSince?: unknown };
    if (typeof v.strikes !== 'number' || v.strikes <= 0) continue;
    const parts = splitRowKey(key);
    yield {
      key,
      url: parts?.url ?? key,
      deviceType: parts?.device ?? null,
      strikes: v.strikes,
      failingSince: typeof v.failingSince === 'number' ? v.failingSince : 0,
    };
  }
}
