// Which stored pages the page sweep removes (services/pages/store.ts runs it on worker 0's maintenance tick).
// A page belongs to its schedule row: the delete path removes both, and the sweep removes the pages a
// race or a crash left behind (a result stored just after its row was deleted, a delete that stopped
// between the two writes).

export interface StoredPageEntry {
  url: string;
  renderedAt: number | null;
}

/**
 * Pages whose row is gone and that are older than `graceMs`. The grace is for clusters: the page table
 * and the schedule replicate as two separate databases, so a node can hold a freshly rendered page before
 * the row it was rendered for has arrived. Removing that page would replicate the removal to every node.
 * A node alone has no such lag and passes 0. A page without a render time counts as old.
 */
export function orphanedPages(
  entries: StoredPageEntry[],
  hasRow: (url: string) => boolean,
  now: number,
  graceMs: number,
): string[] {
  return entries
    .filter((e) => !hasRow(e.url) && (e.renderedAt === null || now - e.renderedAt >= graceMs))
    .map((e) => e.url);
}

/** The slice of an lmdb store the walk needs (`Table.primaryStore`; lmdb-js honours `exclusiveStart`). */
export interface OrderedStore {
  getRange(opts: { start?: string; exclusiveStart?: boolean; limit: number }): Iterable<{
    key: unknown;
    value: unknown;
  }>;
}

/**
 * A bounded walk over the stored pages: each `next` reads at most `chunk` keys after the last one it
 * saw, and starts over from the first key once a read comes back short. Tombstones (non-record values)
 * are skipped but still move the cursor.
 */
export class PageWalk {
  private cursor: string | undefined;

  constructor(readonly chunk: number) {}

  /** Whether the next step reads from the first key (a fresh walk, or the last one came back short). */
  get atStart(): boolean {
    return this.cursor === undefined;
  }

  next(store: OrderedStore): StoredPageEntry[] {
    const range = store.getRange(
      this.cursor === undefined
        ? { limit: this.chunk }
        : { start: this.cursor, exclusiveStart: true, limit: this.chunk },
    );
    const entries: StoredPageEntry[] = [];
    let seen = 0;
    let last: string | undefined;
    for (const { key, value } of range) {
      seen++;
      last = String(key);
      if (value === null || typeof value !== 'object') continue;
      const at = (value as { renderedAt?: unknown }).renderedAt;
      entries.push({ url: last, renderedAt: typeof at === 'number' ? at : null });
    }
    this.cursor = seen < this.chunk ? undefined : last;
    return entries;
  }
}

export interface SweepRun {
  walk: PageWalk;
  store: OrderedStore;
  hasRow: (url: string) => boolean;
  now: number;
  graceMs: number;
  /** Pages one run looks at, at most: the walk's chunk at a time, with a turn of the event loop between. */
  pages: number;
  remove: (urls: string[]) => Promise<number>;
  yieldLoop: () => Promise<void>;
}

/**
 * One run of the sweep: chunks of the walk until `pages` were looked at or the walk wrapped to the start.
 * Reading a chunk decodes each page's record and point-reads its row, so a run is cut into chunks that
 * each let the loop turn (a run of 2,000 pages in one go held worker 0 for ~100 ms beside other work).
 */
export async function sweepPages(run: SweepRun): Promise<{ checked: number; removed: number }> {
  let checked = 0;
  let removed = 0;
  for (let looked = 0; looked < run.pages;) {
    if (looked > 0) await run.yieldLoop();
    const entries = run.walk.next(run.store);
    looked += run.walk.chunk;
    checked += entries.length;
    const orphans = orphanedPages(entries, run.hasRow, run.now, run.graceMs);
    if (orphans.length > 0) removed += await run.remove(orphans);
    if (run.walk.atStart) break;
  }
  return { checked, removed };
}
