// The page store: the only module that reads or writes RenderedPage (test/unit/tableOwners). A
// `rendered` result's body is stored here, keyed like its schedule row (`<url>|<device>`,
// util/schedule/rowKey.ts), as a Harper Blob.
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
import { promisify } from 'node:util';
import { brotliCompress, constants as zlibConstants, gzip } from 'node:zlib';
import { PageWalk, sweepPages } from '../../util/pages/sweep.js';
import { COMPRESS_MIN_BYTES, computedEtag, worthKeeping } from '../../util/pages/validators.js';
import { table, transaction, type SubscriptionEvent } from '../runtime/harper.js';
import type { Duty } from '../../util/duties/scheduler.js';
import { splitRowKey } from '../../util/schedule/rowKey.js';

export interface PageWrite {
  /** The row's key, `<url>|<device>`: the page carries its URL and device besides. */
  key: string;
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
  const latest = new Map(list.map((p) => [p.key, p]));
  // Validators and compressed copies are made here, once per stored page, outside the transaction
  // (compression runs on libuv's pool): serving answers from them without hashing or compressing.
  const prepared = await Promise.all([...latest.values()].map(prepare));
  await transaction(async (txn) => {
    const t = pages();
    for (const p of prepared) {
      const type = p.page.contentType ?? 'text/html';
      const parts = splitRowKey(p.page.key);
      await t.put(
        p.page.key,
        {
          id: p.page.key,
          url: parts?.url ?? p.page.key,
          deviceType: parts?.device ?? null,
          statusCode: p.page.statusCode,
          contentType: p.page.contentType,
          headers: p.page.headers,
          etag: p.etag,
          body: make(p.bytes, { type, saveBeforeCommit: true }),
          size: p.bytes.length,
          gzip: p.gzip === null ? null : make(p.gzip, { type, saveBeforeCommit: true }),
          br: p.br === null ? null : make(p.br, { type, saveBeforeCommit: true }),
          renderedAt: p.page.renderedAt,
        },
        txn,
      );
    }
  });
}

const gzipAsync = promisify(gzip);
const brotliAsync = promisify(brotliCompress);
// Brotli at quality 5, not the default 11: a page is compressed on every render, on the worker that took
// the result, and 5 already beats gzip on HTML (bench/serving.ts's 52.9 KB page: 10.1 KB, gzip 10.7 KB)
// at a small fraction of 11's time.
const BROTLI_QUALITY = 5;

interface PreparedPage {
  page: PageWrite;
  bytes: Buffer;
  etag: string | null;
  gzip: Buffer | null;
  br: Buffer | null;
}

async function prepare(page: PageWrite): Promise<PreparedPage> {
  const bytes = Buffer.from(page.body, 'utf8');
  const etag = computedEtag(page.headers, bytes);
  if (bytes.length < COMPRESS_MIN_BYTES) return { page, bytes, etag, gzip: null, br: null };
  const [gz, br] = await Promise.all([
    gzipAsync(bytes),
    brotliAsync(bytes, {
      params: {
        [zlibConstants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY,
        [zlibConstants.BROTLI_PARAM_SIZE_HINT]: bytes.length,
      },
    }),
  ]);
  return {
    page,
    bytes,
    etag,
    gzip: worthKeeping(bytes.length, gz.length) ? gz : null,
    br: worthKeeping(bytes.length, br.length) ? br : null,
  };
}

/** A stored page as serving reads it (docs/serving.md). Bodies are Blobs, or strings in older rows. */
export interface StoredPage {
  statusCode: number | null;
  contentType: string | null;
  /** The fleet's stored headers (lower-cased), with `etag` filled from the computed tag when absent. */
  headers: Readonly<Record<string, string>>;
  body: Blob | string;
  /** The body's size in bytes; null in a row stored before sizes were kept. */
  size: number | null;
  gzip: Blob | null;
  br: Blob | null;
  renderedAt: number | null;
}

const isBlob = (v: unknown): v is Blob =>
  typeof v === 'object' && v !== null && typeof (v as Blob).stream === 'function';

/** One local point read of a stored page, straight from the primary store; undefined when none. */
export function readPage(key: string): StoredPage | undefined {
  const v = pages().primaryStore.get(key) as Record<string, unknown> | null | undefined;
  if (!v || typeof v !== 'object') return undefined;
  const body = v.body;
  if (!isBlob(body) && typeof body !== 'string') return undefined;
  const stored = v.headers && typeof v.headers === 'object' ? (v.headers as Record<string, string>) : {};
  const headers =
    stored.etag === undefined && typeof v.etag === 'string' ? { ...stored, etag: v.etag } : stored;
  return {
    statusCode: typeof v.statusCode === 'number' ? v.statusCode : null,
    contentType: typeof v.contentType === 'string' ? v.contentType : null,
    headers,
    body,
    size: typeof v.size === 'number' ? v.size : null,
    gzip: isBlob(v.gzip) ? v.gzip : null,
    br: isBlob(v.br) ? v.br : null,
    renderedAt: typeof v.renderedAt === 'number' ? v.renderedAt : null,
  };
}

/**
 * Live writes of one page (no replay of the current value): the render-now waiters' wake-up. End it with
 * `end()`; events arrive for every put of this key on any worker or node.
 */
export async function subscribePage(
  key: string,
): Promise<AsyncIterable<SubscriptionEvent> & { end?: () => void; return?: () => void }> {
  return pages().subscribe({ id: key, omitCurrent: true });
}

function stored(key: string): boolean {
  const v = pages().primaryStore.get(key);
  return v !== null && typeof v === 'object';
}

/** Removes the pages of these keys; answers how many existed. A missing page writes nothing. */
export async function deletePages(keys: string[]): Promise<number> {
  const present = [...new Set(keys)].filter(stored);
  for (let i = 0; i < present.length; i += DELETE_CHUNK) {
    const chunk = present.slice(i, i + DELETE_CHUNK);
    await transaction(async (txn) => {
      const t = pages();
      for (const key of chunk) await t.delete(key, txn);
    });
  }
  return present.length;
}

/**
 * The keys of every stored page of `url`, any device: one short range read over `<url>|` (as the
 * schedule's keysOfUrl), so a deleted URL loses the pages of devices no longer configured too.
 */
export function pageKeysOfUrl(url: string): string[] {
  const out: string[] = [];
  for (const key of pages().primaryStore.getKeys({ start: `${url}|`, end: `${url}}` }))
    if (typeof key === 'string' && splitRowKey(key)?.url === url) out.push(key);
  return out;
}

/**
 * The pages after `after` (from the start when undefined), at most `limit`, in key order, with whether
 * each is of the layout before devices: a page every write since carries `deviceType`, so one without
 * it was stored under its bare URL.
 */
export function pageKeysAfter(
  after: string | undefined,
  limit: number,
): Array<{ key: string; bare: boolean }> {
  const out: Array<{ key: string; bare: boolean }> = [];
  for (const { key, value } of pages().primaryStore.getRange({
    start: after,
    exclusiveStart: after !== undefined,
    limit,
  })) {
    if (typeof key !== 'string') continue;
    const v = value as { deviceType?: unknown } | null;
    out.push({ key, bare: v !== null && typeof v === 'object' && typeof v.deviceType !== 'string' });
  }
  return out;
}

/** A stored body's bytes: a Blob read whole, or an older row's string. */
async function bytesOf(v: unknown): Promise<Buffer | null> {
  if (isBlob(v)) return Buffer.from(await v.arrayBuffer());
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  return null;
}

/**
 * The upgrade to device keys (services/devices/duties.ts): moves each page stored under its bare URL to
 * `<url>|<device>`, its body and compressed copies copied into new blobs. Writing the old blob reference
 * under the new key would lose the body once Harper's audit cleanup removes the old version's file
 * (docs/operating.md "Upgrading"). A page the new key already has (rendered since the start) is kept. Answers the
 * pages moved.
 */
export async function moveBarePages(keys: readonly string[], device: string): Promise<number> {
  const make = createBlob();
  let moved = 0;
  for (const from of keys) {
    const v = pages().primaryStore.get(from) as Record<string, unknown> | null | undefined;
    if (!v || typeof v !== 'object' || typeof v.deviceType === 'string') continue;
    const to = `${from}|${device}`;
    const body = await bytesOf(v.body);
    const gz = await bytesOf(v.gzip);
    const br = await bytesOf(v.br);
    const type = typeof v.contentType === 'string' ? v.contentType : 'text/html';
    await transaction(async (txn) => {
      const t = pages();
      if (!stored(to) && body !== null) {
        await t.put(
          to,
          {
            ...v,
            id: to,
            url: typeof v.url === 'string' ? v.url : from,
            deviceType: device,
            body: make(body, { type, saveBeforeCommit: true }),
            size: typeof v.size === 'number' ? v.size : body.length,
            gzip: gz === null ? null : make(gz, { type, saveBeforeCommit: true }),
            br: br === null ? null : make(br, { type, saveBeforeCommit: true }),
          },
          txn,
        );
        moved++;
      }
      await t.delete(from, txn);
    });
  }
  return moved;
}

export interface PageSweepDeps {
  /** A cheap local read: does the schedule still hold a row for this URL? */
  hasRow: (url: string) => boolean;
  /** How long a page without a row is left alone (0 on a node alone; see util/pages/sweep.ts). */
  graceMs: () => Promise<number>;
  /** Pages looked at per tick (default PAGE_SWEEP_CHUNK). */
  chunk?: number;
  /** The turn of the event loop between two slices of a tick's pages. */
  yieldLoop: () => Promise<void>;
}

export interface PageSweepResult extends Record<string, number> {
  checked: number;
  removed: number;
}

// At the default 30 s tick a walk over a million pages takes about four hours: the sweep is the backstop,
// the delete path removes a deleted target's page at once. A tick reads its pages PAGE_SWEEP_SLICE at a
// time (each page's record decoded, its row point-read) with a turn of the event loop between.
export const PAGE_SWEEP_CHUNK = 2000;
const PAGE_SWEEP_SLICE = 250;

/**
 * The page sweep, one duty of worker 0's maintenance tick: each run looks at the next chunk of pages
 * (a cursor over the keys, wrapping at the end) and removes those whose schedule row is gone.
 */
export function pageSweepDuty(deps: PageSweepDeps): Duty {
  const chunk = deps.chunk ?? PAGE_SWEEP_CHUNK;
  const walk = new PageWalk(Math.min(chunk, PAGE_SWEEP_SLICE));
  return {
    name: 'page-sweep',
    runOnce: async (now): Promise<PageSweepResult> =>
      sweepPages({
        walk,
        store: pages().primaryStore,
        hasRow: deps.hasRow,
        now,
        graceMs: await deps.graceMs(),
        pages: chunk,
        remove: deletePages,
        yieldLoop: deps.yieldLoop,
      }),
  };
}
