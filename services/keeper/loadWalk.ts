// The keeper's load walk (services/keeper/service.ts load()): the table in chunks of WALK_CHUNK keys,
// each row applied as the walk yields it, serving from the first chunk on. Events win: a key an event
// touched since the load began keeps the event's value.
import type { HeldFields, KeeperCore } from '../../util/keeper/core.js';
import { WALK_CHUNK, type KeeperDeps, type ScheduleSource } from './deps.js';

/** Which way a load walk runs: forward from the bottom, or top-down to where the forward walk stopped. */
export interface LoadWalk {
  reverse: boolean;
  end?: string;
  /** Publish while loading (only the forward walk does; the top-down rest is short). */
  publish: boolean;
}

/** Where a load walk got to: the last key it read. */
export interface WalkCursor {
  last?: string;
}

/** What a load walk reads and calls of the keeper. */
export interface LoadHost {
  core: KeeperCore;
  source: ScheduleSource;
  /** Keys events touched since the load began (null: none are tracked). */
  touched: Set<string> | null;
  /** Whether this node holds `key` (a configured device's row of a URL it owns). */
  owns: (key: string) => boolean;
  /** A row of a URL this node owns whose device is not configured: counted, not held. */
  orphan: (key: string) => boolean;
  /** The walk found no row at `key`: the keeper looks whether it is stored but unreadable. */
  unreadable?: (key: string, now: number) => void;
  yieldLoop: () => Promise<void>;
  /** A chunk was read at `t`: serve, and publish when the walk publishes and the interval has passed. */
  chunkRead: (t: number, publish: boolean) => void;
}

/**
 * One load walk, chunk after chunk from `cursor.last` on. Rows are applied as the walk yields them, never
 * after collecting a chunk: a walk that throws at an unreadable key must keep the rows it read before it,
 * and `cursor.last` must be the last one read, or the good rows beside the bad key would be dropped (and
 * the top-down walk could not reach them either).
 */
export async function loadWalk(
  host: LoadHost,
  walk: LoadWalk,
  cursor: WalkCursor,
  tally: { rows: number; orphaned: number },
  now: () => number,
): Promise<void> {
  const { core, source, touched, owns, orphan } = host;
  let read = 0;
  // One call per key, before the walk reads the next. `fields` may be one object the walk reuses:
  // KeeperCore.apply reads it during the call only.
  const visit = (key: string, fields: HeldFields | undefined): void => {
    if (fields !== undefined && !(touched !== null && touched.size > 0 && touched.has(key))) {
      if (owns(key)) core.apply(key, fields, now());
      else if (orphan(key)) tally.orphaned++;
    } else if (fields === undefined) host.unreadable?.(key, now());
    tally.rows++;
    read++;
    cursor.last = key;
  };
  for (;;) {
    read = 0;
    const range = {
      start: cursor.last,
      end: walk.end,
      reverse: walk.reverse,
      exclusiveStart: cursor.last !== undefined,
      limit: WALK_CHUNK,
    };
    if (source.walkHeld !== undefined) source.walkHeld(range, visit);
    else for (const { key, row } of source.walk(range)) visit(key, row);
    if (read === 0) return;
    host.chunkRead(now(), walk.publish);
    await host.yieldLoop();
  }
}

/** The store's row count as a sizing hint, 0 when it cannot be had: a hint never fails the load. */
export function rowEstimate(deps: Pick<KeeperDeps, 'source' | 'log'>): number {
  try {
    return deps.source.estimateRows?.() ?? 0;
  } catch (e) {
    deps.log.warn(`keeper: no row count to size the held rows by (${(e as Error)?.message ?? e})`);
    return 0;
  }
}
