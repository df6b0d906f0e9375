// The schedule owner: the only module that reads or writes RenderSchedule (test/unit/tableOwners
// fails if another source file names the table). Rules live in util/scheduleRules.ts; this file reads
// rows, applies a rule and writes the whole row back.
import {
  afterFailure,
  afterSuccess,
  discoveredRow,
  revalidatedRow,
  toScheduleRow,
  upsertTarget,
  type Outcome,
  type ScheduleRow,
  type TargetInput,
} from '../util/scheduleRules.js';
import { config } from './config.js';
import { table, transaction, type HarperTable, type SubscriptionEvent } from './harper.js';

const WRITE_CHUNK = 1000;

let cached: HarperTable | undefined;
function schedule(): HarperTable {
  cached ??= table('render_schedule', 'RenderSchedule');
  return cached;
}

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

async function writeInChunks<T>(items: T[], write: (item: T, txn: unknown) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += WRITE_CHUNK) {
    const chunk = items.slice(i, i + WRITE_CHUNK);
    await transaction(async (txn) => {
      for (const item of chunk) await write(item, txn);
    });
  }
}

/** Files verified targets; entries for one URL within a batch apply in order (last wins). */
export async function fileTargets(targets: TargetInput[], now: number): Promise<number> {
  const cfg = config();
  const pending = new Map<string, ScheduleRow>();
  for (const t of targets) {
    const existing = pending.get(t.url) ?? readRow(t.url);
    pending.set(t.url, upsertTarget(existing, t, now, cfg));
  }
  const rows = [...pending.values()];
  await writeInChunks(rows, (row, txn) => schedule().put(row.cacheKey, toRecord(row), txn));
  return targets.length;
}

/** Deletes rows; counts only rows that existed. */
export async function deleteTargets(urls: string[]): Promise<number> {
  const present = [...new Set(urls)].filter((u) => readRow(u) !== undefined);
  await writeInChunks(present, async (u, txn) => {
    await schedule().delete(u, txn);
  });
  return present.length;
}

/** Files unverified rows only where no row exists; an existing row is never changed by this path. */
export async function discoverUrls(urls: string[], now: number): Promise<number> {
  const cfg = config();
  const fresh = [...new Set(urls)].filter((u) => readRow(u) === undefined);
  await writeInChunks(fresh, (u, txn) => schedule().put(u, toRecord(discoveredRow(u, now, cfg)), txn));
  return fresh.length;
}

/** Due now and urgent; undefined when there is no row. */
export async function revalidate(url: string, now: number): Promise<ScheduleRow | undefined> {
  const existing = readRow(url);
  if (!existing) return undefined;
  const row = revalidatedRow(existing, now);
  await transaction(async (txn) => {
    await schedule().put(url, toRecord(row), txn);
  });
  return row;
}

export interface ResultWrite {
  url: string;
  outcome: Outcome;
  statusCode: number | null;
  completedAt: number;
}

export type ResultApplied = { found: false } | { found: true; row: ScheduleRow; keepLease: boolean };

/** Reschedules rows after results (success lane, fast-retry lane, backoff lane) in one transaction. */
export async function applyResults(results: ResultWrite[]): Promise<ResultApplied[]> {
  const cfg = config();
  const out: ResultApplied[] = [];
  const writes: ScheduleRow[] = [];
  const pending = new Map<string, ScheduleRow>();
  for (const r of results) {
    const existing = pending.get(r.url) ?? readRow(r.url);
    if (!existing) {
      out.push({ found: false });
      continue;
    }
    if (r.outcome === 'failed') {
      const f = afterFailure(existing, r.completedAt, r.statusCode, cfg);
      pending.set(r.url, f.row);
      writes.push(f.row);
      out.push({ found: true, row: f.row, keepLease: f.keepLease });
    } else {
      const row = afterSuccess(existing, r.completedAt, r.outcome, r.statusCode, cfg);
      pending.set(r.url, row);
      writes.push(row);
      out.push({ found: true, row, keepLease: false });
    }
  }
  if (writes.length > 0) {
    await transaction(async (txn) => {
      for (const row of writes) await schedule().put(row.cacheKey, toRecord(row), txn);
    });
  }
  return out;
}

/** Writes one row exactly as given (the keeper's tests and repair tools use the same path). */
export async function putRow(row: ScheduleRow): Promise<void> {
  await transaction(async (txn) => {
    await schedule().put(row.cacheKey, toRecord(row), txn);
  });
}

/** Live schedule events (no replay of current rows): the keeper subscribes before it walks. */
export async function subscribeSchedule(): Promise<
  AsyncIterable<SubscriptionEvent> & { end?: () => void; return?: () => void }
> {
  return schedule().subscribe({ omitCurrent: true });
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

export async function countRows(): Promise<number> {
  let n = 0;
  for (const _k of schedule().primaryStore.getKeys({})) n++;
  return n;
}
