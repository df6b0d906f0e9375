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

export interface FilingDeps {
  /** The schedule owner's writes (services/schedule/store.ts). */
  fileTargets: (targets: readonly TargetInput[], now: number) => Promise<number>;
  deleteTargets: (urls: readonly string[]) => Promise<number>;
  revalidate: (url: string, now: number) => Promise<ScheduleRow | undefined>;
  /** The page store's delete (services/pages/store.ts): a row's page goes with it. */
  deletePages: (urls: string[]) => Promise<number>;
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
  nextRenderTime: number;
  urgentAt: number | null;
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

  /** `DELETE /render_queue/targets`: `{urls}` → `{deleted, rejected?}`; each row's page goes too. */
  async deleteTargets(body: unknown): Promise<DeletedAnswer> {
    const { urls, rejected } = orRefuse(checkUrlList(body));
    const deleted = await this.deps.deleteTargets(urls.map((u) => u.url));
    // The page sweep removes any page a racing result stores after this.
    await this.deps.deletePages(urls.map((u) => u.url));
    return rejected.length ? { deleted, rejected } : { deleted };
  }

  /** `POST /prerender_admin/revalidate`: `{url}` → due now and urgent; 404 `not_found` without a row. */
  async revalidate(body: unknown, now = Date.now()): Promise<RevalidatedAnswer> {
    const url = orRefuse(checkSingleUrl(body, TARGET_SHAPES.revalidate));
    const row = await this.deps.revalidate(url, now);
    if (!row) throw new HttpError(404, 'not_found', 'no row for that url');
    return { url, nextRenderTime: row.nextRenderTime, urgentAt: row.urgentAt };
  }
}
