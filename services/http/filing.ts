// Filing, deleting and revalidating targets, as the feeding routes and the in-process API answer them
// (docs/in-process.md): the same body, the same checks (util/schedule/targetChecks.ts), the same schedule owner
// (services/schedule/store.ts ScheduleOwner) and the same answer, so a host app's resource that files
// in process gets exactly what a feeder gets over HTTP. A refusal is an HttpError (status and code); the
// routes turn it into the `{error, code}` answer, the in-process API hands it to its caller.
import { HttpError } from '../runtime/httpError.js';
import {
  TARGET_SHAPES,
  checkSingleUrl,
  checkTargetsBody,
  checkUrlList,
  type Rejection,
} from '../../util/schedule/targetChecks.js';
import { orRefuse } from './problems.js';
import type { ScheduleRow, TargetInput } from '../../util/schedule/rules.js';
import type { UrlsChanged } from '../../util/schedule/writes.js';
import { deviceOfKey } from '../../util/schedule/rowKey.js';

export interface FilingDeps {
  /** The schedule owner's writes (services/schedule/store.ts). */
  fileTargets: (targets: readonly TargetInput[], now: number) => Promise<number>;
  deleteTargets: (urls: readonly string[]) => Promise<UrlsChanged>;
  revalidate: (url: string, now: number) => Promise<ScheduleRow[]>;
  /** The page store's delete (services/pages/store.ts): a row's page goes with it. */
  deletePages: (keys: string[]) => Promise<number>;
  /** The keys of every stored page of a URL, any device (services/pages/store.ts pageKeysOfUrl). */
  pageKeysOfUrl: (url: string) => string[];
}

export interface FiledAnswer {
  upserted: number;
  rejected: Rejection[];
}

export interface DeletedAnswer {
  deleted: number;
  /** Only when some entry was refused. */
  rejected?: Rejection[];
}

export interface RevalidatedAnswer {
  url: string;
  /** The earliest of its rows'. */
  nextRenderTime: number;
  urgentAt: number | null;
  /** Each row of the URL, by device. */
  devices: Array<{ deviceType: string | null; nextRenderTime: number; urgentAt: number | null }>;
}

export class Filing {
  constructor(private readonly deps: FilingDeps) {}

  /** `POST /render_queue/targets`: `{targets}` → `{upserted, rejected}`. */
  async fileTargets(body: unknown, now = Date.now()): Promise<FiledAnswer> {
    const { accepted, rejected } = orRefuse(checkTargetsBody(body, now));
    const upserted = await this.deps.fileTargets(
      accepted.map((a) => a.target),
      now,
    );
    return { upserted, rejected };
  }

  /**
   * `DELETE /render_queue/targets`: `{urls}` → `{deleted, rejected?}`: every device's row of each URL, and
   * each one's page; `deleted` counts the URLs that had a row.
   */
  async deleteTargets(body: unknown): Promise<DeletedAnswer> {
    const { urls, rejected } = orRefuse(checkUrlList(body));
    const deleted = await this.deps.deleteTargets(urls.map((u) => u.url));
    // Pages of devices without a row go too; the page sweep removes any a racing result stores after this.
    const pages = new Set(deleted.keys);
    for (const u of urls) for (const k of this.deps.pageKeysOfUrl(u.url)) pages.add(k);
    await this.deps.deletePages([...pages]);
    return rejected.length ? { deleted: deleted.urls, rejected } : { deleted: deleted.urls };
  }

  /**
   * `POST /prerender_admin/revalidate`: `{url}` → every device's row due now and urgent; 404 `not_found`
   * without a row.
   */
  async revalidate(body: unknown, now = Date.now()): Promise<RevalidatedAnswer> {
    const url = orRefuse(checkSingleUrl(body, TARGET_SHAPES.revalidate));
    const rows = await this.deps.revalidate(url, now);
    if (rows.length === 0) throw new HttpError(404, 'not_found', 'no row for that url');
    const first = rows.reduce((a, b) => (b.nextRenderTime < a.nextRenderTime ? b : a));
    return {
      url,
      nextRenderTime: first.nextRenderTime,
      urgentAt: first.urgentAt,
      devices: rows.map((r) => ({
        deviceType: deviceOfKey(r.cacheKey),
        nextRenderTime: r.nextRenderTime,
        urgentAt: r.urgentAt,
      })),
    };
  }
}
