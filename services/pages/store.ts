// The page store: the only module that reads or writes RenderedPage (test/unit/tableOwners). A
// `rendered` result's body is stored here, keyed by the target URL, as a Harper Blob.
//
// Why a Blob (README "Page storage", verified on 4.7.29): RenderedPage is replicated, so every write is
// recorded in the database's transaction log and kept for `logging.auditRetention`. A String body put the
// whole page into that log on every render. A Blob of 8 KiB or more lives in its own file under
// <root>/blobs/render_queue/, and the record and its log entry hold only a reference, so the log grows by
// a small record per render. Replication streams the blob file to the other nodes, which write their
// own copy. The file of a replaced or deleted page stays while a log entry still refers to it (a peer
// catching up may need it) and is deleted by Harper's audit cleanup once the entry has expired.
//
// Two rules keep that safe:
// - every write carries a fresh blob: a patch (or a put that reuses the blob it read) keeps the old file
//   reference, and the audit cleanup deletes that file when the older entry expires, leaving the row
//   pointing at a missing file (seen on 4.7.29: "Incomplete blob"). So this module only ever puts.
// - one write per URL per transaction: a second put of the same URL in one transaction would leave the
//   first blob's file referenced by nothing (only `cleanup_orphan_blobs` finds those).
import { orphanedPages, PageWalk } from '../../util/pages/sweep.js';
import { table, transaction } from '../runtime/harper.js';
import type { Duty } from '../../util/duties/scheduler.js';

export interface PageWrite {
  url: string;
  statusCode: number | null;
  contentType: string | null;
  /** Response headers to keep with the page (util/prerender/result.ts STORED_HEADERS), or null. */
  headers: Record<string, string> | null;
  body: string;
  renderedAt: number;
}

interface BlobOptions {
  type?: string;
  saveBeforeCommit?: boolean;
}
type CreateBlob = (source: Uint8Array, options?: BlobOptions) => Blob;

// Deletes are small records; this many per transaction keeps one commit short.
const DELETE_CHUNK = 1000;

function pages() {
  return table('render_queue', 'RenderedPage');
}

/** Harper's createBlob: a global of the running server in 4.7.29, not an export of the harperdb module. */
function createBlob(): CreateBlob {
  const make = (globalThis as { createBlob?: CreateBlob }).createBlob;
  if (typeof make !== 'function') throw new Error('createBlob is not available: not running inside Harper');
  return make;
}

/**
 * Stores rendered pages (one transaction for the lot), replacing any earlier page of each URL; the last
 * entry of a URL wins. Resolves once the transaction has committed. `saveBeforeCommit` makes Harper finish
 * writing each blob file before it commits the record, so a page read after this resolves is complete.
 */
export async function storePages(list: PageWrite[]): Promise<void> {
  if (list.length === 0) return;
  const make = createBlob();
  const latest = new Map(list.map((p) => [p.url, p]));
  await transaction(async (txn) => {
    const t = pages();
    for (const p of latest.values())
      await t.put(
        p.url,
        {
          id: p.url,
          url: p.url,
          statusCode: p.statusCode,
          contentType: p.contentType,
          headers: p.headers,
          body: make(Buffer.from(p.body, 'utf8'), {
            type: p.contentType ?? 'text/html',
            saveBeforeCommit: true,
          }),
          renderedAt: p.renderedAt,
        },
        txn,
      );
  });
}

function stored(url: string): boolean {
  const v = pages().primaryStore.get(url);
  return v !== null && typeof v === 'object';
}

/** Removes the pages of these URLs; answers how many existed. A missing page writes nothing. */
export async function deletePages(urls: string[]): Promise<number> {
  const present = [...new Set(urls)].filter(stored);
  for (let i = 0; i < present.length; i += DELETE_CHUNK) {
    const chunk = present.slice(i, i + DELETE_CHUNK);
    await transaction(async (txn) => {
      const t = pages();
      for (const url of chunk) await t.delete(url, txn);
    });
  }
  return present.length;
}

export interface PageSweepDeps {
  /** A cheap local read: does the schedule still hold a row for this URL? */
  hasRow: (url: string) => boolean;
  /** How long a page without a row is left alone (0 on a node alone; see util/pages/sweep.ts). */
  graceMs: () => Promise<number>;
  /** Pages looked at per tick (default PAGE_SWEEP_CHUNK). */
  chunk?: number;
}

export interface PageSweepResult extends Record<string, number> {
  checked: number;
  removed: number;
}

// 2,000 point reads of the schedule per tick take a few milliseconds, and at the default 30 s tick a
// walk over a million pages takes about four hours: the sweep is the backstop, the delete path removes a
// deleted target's page at once.
export const PAGE_SWEEP_CHUNK = 2000;

/**
 * The page sweep, one duty of worker 0's maintenance tick: each run looks at the next chunk of pages
 * (a cursor over the keys, wrapping at the end) and removes those whose schedule row is gone.
 */
export function pageSweepDuty(deps: PageSweepDeps): Duty {
  const walk = new PageWalk(deps.chunk ?? PAGE_SWEEP_CHUNK);
  return {
    name: 'page-sweep',
    runOnce: async (now): Promise<PageSweepResult> => {
      const entries = walk.next(pages().primaryStore);
      const orphans = orphanedPages(entries, deps.hasRow, now, await deps.graceMs());
      const removed = await deletePages(orphans);
      return { checked: entries.length, removed };
    },
  };
}
