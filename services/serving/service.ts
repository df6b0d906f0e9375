// What `GET`/`HEAD /p/<absolute url>` does (docs/serving.md): the route (services/http/routes/serving.ts)
// hands each request here. A hit is one point read of the row and one of the page, nothing written;
// the rest — stale marks, misses, discover filings, origin fetches and render-now waits — is decided by
// the pure rules in util/serving/ and carried out here. An answer never carries anything but the stored
// page or the origin's: no row field, no other table, no internal error text.
import type { Readable } from 'node:stream';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { notModified } from '../../util/serving/conditional.js';
import { chooseCoding } from '../../util/serving/encoding.js';
import {
  ageSeconds,
  freshness,
  needsUrgentMark,
  servable,
  type ServingRow,
} from '../../util/serving/freshness.js';
import { chooseDevice, deviceTypes, servingKey } from '../../util/serving/keys.js';
import { missAnswer, renderNowVerdict } from '../../util/serving/miss.js';
import type { MinuteBudget } from '../../util/serving/nodeCounters.js';
import { servedTarget } from '../../util/serving/target.js';
import type { StoredPage } from '../pages/store.js';
import { ORIGIN_HEADER, type OriginResult } from './origin.js';
import type { WaitOutcome } from './renderNow.js';

/** The `result` label of queue_keeper_served_total (util/metrics/catalogue.ts SERVED_RESULTS). */
export type ServedResult = 'hit' | 'stale' | 'not_modified' | 'origin' | 'rendered' | 'not_found' | 'error';

export interface ServeRequest {
  method: 'GET' | 'HEAD';
  /** The request target in origin form, starting `/p/`. */
  target: string;
  header: (name: string) => string | null;
}

export type ServeBody = Buffer | Blob | Readable | null;

export interface ServeAnswer {
  status: number;
  headers: Record<string, string>;
  body: ServeBody;
  result: ServedResult;
}

export interface PageServingDeps {
  config: () => QueueKeeperConfig;
  now: () => number;
  readRow: (key: string) => ServingRow | undefined;
  readPage: (key: string) => StoredPage | undefined;
  /** Makes a row urgent and due now (services/schedule/store.ts revalidate); undefined when no row. */
  markUrgent: (key: string, now: number) => Promise<unknown>;
  /** Files URLs as discovered (unverified) where no row exists. */
  discover: (urls: string[], now: number) => Promise<unknown>;
  /** The node's discover filings this minute. */
  discoverBudget: MinuteBudget;
  origin: {
    fetch(url: string, method: 'GET' | 'HEAD', header: (n: string) => string | null): Promise<OriginResult>;
  };
  renderNow: {
    wait(
      key: string,
      timeoutMs: number,
      maxWaiting: number,
      start: () => Promise<boolean>,
    ): Promise<WaitOutcome>;
  };
  log: { error: (...args: unknown[]) => void };
}

/** The render-now request header (its value is `serving.renderNow.token`). */
export const RENDER_NOW_HEADER = 'x-render-now';
export const DEVICE_HEADER = 'x-device-type';

/** Stored headers a served page carries besides its validators (util/prerender/result.ts STORED_HEADERS). */
const PAGE_HEADERS: readonly string[] = ['link', 'x-robots-tag', 'cache-control'];
/** What a 304 keeps: the validators and the caching headers. */
const NOT_MODIFIED_HEADERS: readonly string[] = [
  'etag',
  'last-modified',
  'cache-control',
  'vary',
  'age',
  'x-prerender',
];

/** Seconds a crawler is asked to wait when every origin slot is taken. */
const ORIGIN_BUSY_RETRY_S = '5';

function problem(
  status: number,
  code: string,
  error: string,
  result: ServedResult,
  extra: Record<string, string> = {},
): ServeAnswer {
  return {
    status,
    headers: { 'content-type': 'application/json', ...extra },
    body: Buffer.from(JSON.stringify({ error, code })),
    result,
  };
}

/** Every 404 is this one answer, so a miss never tells which kind of miss it was. */
const notFound = (): ServeAnswer => problem(404, 'not_found', 'no page is served for this URL', 'not_found');

type Lookup =
  | { kind: 'page'; as: 'hit' | 'stale'; page: StoredPage; row: ServingRow }
  | { kind: 'miss'; row: ServingRow | undefined; expired: StoredPage | undefined };

export class PageServing {
  /** Keys whose stale mark is being written on this worker: one write per window, not per request. */
  private readonly marking = new Set<string>();

  constructor(private readonly deps: PageServingDeps) {}

  async serve(req: ServeRequest): Promise<ServeAnswer> {
    const cfg = this.deps.config();
    // Off (no host served) is a 404 for every request, before anything else is looked at.
    if (cfg.serving.hosts.length === 0) return notFound();
    if (req.header(ORIGIN_HEADER) !== null)
      return problem(
        508,
        'loop_detected',
        'this request came from an origin fetch and is not served again',
        'error',
      );
    const target = servedTarget(req.target, cfg.serving.hosts);
    if (!target.ok) {
      if (target.why === 'invalid') return problem(400, 'invalid_url', target.problem, 'error');
      return notFound();
    }
    const device = chooseDevice(req.header(DEVICE_HEADER), deviceTypes(cfg), cfg.serving.defaultDevice);
    const key = servingKey(target.url, device);
    const now = this.deps.now();
    const found = this.lookup(key, now, cfg);
    if (found.kind === 'page') {
      if (found.as === 'stale') this.markStale(key, found.row, now);
      return this.pageAnswer(found.page, found.as, req, now, cfg);
    }
    return this.miss(req, target.url, key, found, now, cfg);
  }

  private lookup(key: string, now: number, cfg: QueueKeeperConfig): Lookup {
    const row = this.deps.readRow(key);
    if (!servable(row)) return { kind: 'miss', row: undefined, expired: undefined };
    const page = this.deps.readPage(key);
    if (page === undefined) return { kind: 'miss', row, expired: undefined };
    const f = freshness(row, now, cfg.serving.staleWhileRevalidate);
    if (f === 'expired') return { kind: 'miss', row, expired: page };
    return { kind: 'page', as: f === 'fresh' ? 'hit' : 'stale', page, row };
  }

  /** A crawler is waiting for this page: its row becomes urgent, once per window. */
  private markStale(key: string, row: ServingRow, now: number): void {
    if (!needsUrgentMark(row) || this.marking.has(key)) return;
    this.marking.add(key);
    this.deps
      .markUrgent(key, now)
      .catch((e: unknown) => this.deps.log.error('serving: marking a stale row urgent failed', e))
      .finally(() => this.marking.delete(key));
  }

  private async miss(
    req: ServeRequest,
    url: string,
    key: string,
    found: Extract<Lookup, { kind: 'miss' }>,
    now: number,
    cfg: QueueKeeperConfig,
  ): Promise<ServeAnswer> {
    const s = cfg.serving;
    const verdict = renderNowVerdict({
      enabled: s.renderNow.enabled,
      token: s.renderNow.token,
      sent: req.header(RENDER_NOW_HEADER),
      hasRow: found.row !== undefined,
    });
    if (verdict === 'render') {
      const rendered = await this.renderNow(key, now, cfg);
      if (rendered !== undefined) return this.pageAnswer(rendered, 'rendered', req, this.deps.now(), cfg);
    }
    if (found.row === undefined && this.deps.readRow(key) === undefined) this.fileDiscovered(url, now, cfg);
    switch (missAnswer(s.onMiss, found.expired !== undefined)) {
      case 'expiredPage':
        return this.pageAnswer(found.expired!, 'stale', req, now, cfg);
      case 'notFound':
        return notFound();
      case 'origin':
        return this.fromOrigin(req, url);
    }
  }

  /** Makes the row due now and urgent, then waits for its page; undefined when it did not land in time. */
  private async renderNow(
    key: string,
    since: number,
    cfg: QueueKeeperConfig,
  ): Promise<StoredPage | undefined> {
    const r = cfg.serving.renderNow;
    const landed = (): StoredPage | undefined => {
      const page = this.deps.readPage(key);
      return page !== undefined && (page.renderedAt ?? 0) >= since ? page : undefined;
    };
    const outcome = await this.deps.renderNow.wait(key, r.timeoutMs, r.maxWaiting, async () => {
      await this.deps.markUrgent(key, since);
      return landed() !== undefined;
    });
    return outcome === 'ended' ? landed() : undefined;
  }

  private fileDiscovered(url: string, now: number, cfg: QueueKeeperConfig): void {
    if (!this.deps.discoverBudget.take(cfg.serving.discoverPerMinute, now)) return;
    this.deps
      .discover([url], now)
      .catch((e: unknown) => this.deps.log.error('serving: filing a discovered URL failed', e));
  }

  private async fromOrigin(req: ServeRequest, url: string): Promise<ServeAnswer> {
    const r = await this.deps.origin.fetch(url, req.method, req.header);
    if (r.kind === 'busy')
      return problem(503, 'origin_busy', 'too many origin fetches are running; retry shortly', 'error', {
        'retry-after': ORIGIN_BUSY_RETRY_S,
      });
    if (r.kind === 'failed')
      return problem(502, 'origin_failed', 'the page could not be fetched from its origin', 'error');
    return {
      status: r.status,
      headers: { ...r.headers, 'x-prerender': 'origin' },
      body: r.body,
      result: 'origin',
    };
  }

  private async pageAnswer(
    page: StoredPage,
    as: 'hit' | 'stale' | 'rendered',
    req: ServeRequest,
    now: number,
    cfg: QueueKeeperConfig,
  ): Promise<ServeAnswer> {
    const status = page.statusCode ?? 200;
    const compressed = page.gzip !== null || page.br !== null;
    const headers: Record<string, string> = {
      'content-type': page.contentType ?? page.headers['content-type'] ?? 'text/html; charset=utf-8',
    };
    const etag = page.headers.etag ?? null;
    const lastModified = page.headers['last-modified'] ?? null;
    if (etag !== null) headers.etag = etag;
    if (lastModified !== null) headers['last-modified'] = lastModified;
    for (const name of PAGE_HEADERS) if (page.headers[name] !== undefined) headers[name] = page.headers[name];
    const vary = varyOf(page.headers.vary, compressed, deviceTypes(cfg).length > 1);
    if (vary !== '') headers.vary = vary;
    headers.age = String(ageSeconds(page.renderedAt, now));
    headers['x-prerender'] = as;
    const conditions = {
      ifNoneMatch: req.header('if-none-match'),
      ifModifiedSince: req.header('if-modified-since'),
    };
    if (status >= 200 && status < 300 && notModified(conditions, { etag, lastModified })) {
      const kept: Record<string, string> = {};
      for (const name of NOT_MODIFIED_HEADERS) if (headers[name] !== undefined) kept[name] = headers[name];
      return { status: 304, headers: kept, body: null, result: 'not_modified' };
    }
    const coding = chooseCoding(req.header('accept-encoding'), {
      br: page.br !== null,
      gzip: page.gzip !== null,
    });
    const chosen = coding === 'br' ? page.br! : coding === 'gzip' ? page.gzip! : page.body;
    if (coding !== 'identity') headers['content-encoding'] = coding;
    const body = typeof chosen === 'string' ? Buffer.from(chosen, 'utf8') : chosen;
    headers['content-length'] = String(Buffer.isBuffer(body) ? body.length : (body as Blob).size);
    if (req.method === 'HEAD') return { status, headers, body: null, result: as };
    return { status, headers, body: await inlineOrStream(body, cfg.serving.inlineMaxBytes), result: as };
  }
}

/** The page's own Vary, plus what this answer varies by: the coding when copies exist, the device when several. */
function varyOf(stored: string | undefined, byCoding: boolean, byDevice: boolean): string {
  const names = (stored ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const has = (n: string) => names.some((x) => x.toLowerCase() === n.toLowerCase());
  if (byCoding && !has('accept-encoding')) names.push('Accept-Encoding');
  if (byDevice && !has(DEVICE_HEADER)) names.push(DEVICE_HEADER);
  return names.join(', ');
}

/** A body up to `inlineMax` bytes is read whole (one answer, its length known); a larger one streams. */
async function inlineOrStream(body: Buffer | Blob, inlineMax: number): Promise<Buffer | Blob> {
  if (Buffer.isBuffer(body)) return body;
  const blob = body as Blob;
  if (blob.size > inlineMax) return blob;
  return Buffer.from(await blob.arrayBuffer());
}
