// Sitemaps as the routes and the duties see them (docs/sitemaps.md): register, list, read, refresh and
// forget, each walk started in the background under the sitemap's walk lease (two walks of one sitemap
// never run at once: services/sitemaps/store.ts claimWalk), the daily refresh on `sitemaps.refresh`, and
// the resume of a walk whose holder stopped beating (a restart): it is walked again from its root, which
// files nothing twice (a row already filed reads as unchanged).
import { createHash, randomBytes } from 'node:crypto';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { Counts, Duty } from '../../util/duties/scheduler.js';
import { HttpError } from '../runtime/httpError.js';
import { nextRefreshAt } from '../../util/sitemaps/refreshPlan.js';
import { emptyFigures, finishFigures, type WalkFigures } from '../../util/sitemaps/walkPlan.js';
import type { HostVerdict } from '../../util/notify/addressPolicy.js';
import type { RegisterRequest } from '../../util/sitemaps/requests.js';
import { unpackUrls } from '../../util/sitemaps/urlList.js';
import {
  beatWalk,
  claimWalk,
  dropFileEntries,
  endWalk,
  fileEntriesOf,
  forgetSitemap,
  putFileEntry,
  readFileEntry,
  readSitemap,
  registerSitemap,
  sitemapsFrom,
  type SitemapRecord,
} from './store.js';
import { SitemapWalk, type WalkDeps } from './walk.js';

/** A walk's lease: a holder that has not beaten for this long (or 3 request timeouts) is taken to be gone. */
const MIN_WALK_LEASE_MS = 60_000;
/** The refresh duty wakes at least this often to look at the cron again (a timer cannot wait for months). */
const MAX_REFRESH_WAIT_MS = 6 * 3_600_000;

export type WalkDepsFor = Omit<
  WalkDeps,
  'beat' | 'holds' | 'readFileEntry' | 'putFileEntry' | 'fileEntriesOf'
>;

export interface SitemapServiceDeps {
  config: () => QueueKeeperConfig;
  now: () => number;
  /** This worker's walk holder name (node, process and thread), unique while it runs. */
  holder: string;
  walk: WalkDepsFor;
  /** The registration's address check (sitemaps.allowCidrs): a refused host is a 400, nothing is stored. */
  checkHost: (hostname: string) => Promise<HostVerdict>;
  /** Whether this node refreshes the sitemap (one node of a cluster: rendezvous over the nodes). */
  ownsSitemap: (id: string) => boolean;
  /** The walk's duration, for the metrics. */
  recordWalk: (figures: WalkFigures) => void;
  log: { info: (...a: unknown[]) => void; warn: (...a: unknown[]) => void; error: (...a: unknown[]) => void };
}

export interface SitemapView {
  id: string;
  url: string;
  owner: string;
  cadenceMs: number | null;
  deleteRemoved: boolean;
  state: SitemapRecord['state'];
  createdAt: number;
  urlCount: number;
  progress: WalkFigures | null;
  lastWalk: WalkFigures | null;
}

/** queue-state's sitemap section: counts, each sitemap's state and last walk, a warning per failed one. */
export interface SitemapSummary {
  total: number;
  walking: number;
  failed: number;
  warnings: string[];
  sitemaps: Array<{
    id: string;
    url: string;
    state: SitemapRecord['state'];
    urlCount: number;
    lastWalkAt: number | null;
    reason: string | null;
  }>;
}

/** queue-state lists this many sitemaps at most (the list route pages through all of them). */
const SUMMARY_LIST = 100;

export function viewOf(r: SitemapRecord): SitemapView {
  return {
    id: r.id,
    url: r.url,
    owner: r.owner,
    cadenceMs: r.cadenceMs,
    deleteRemoved: r.deleteRemoved,
    state: r.state,
    createdAt: r.createdAt,
    urlCount: r.urlCount,
    progress: r.state === 'walking' ? r.progress : null,
    lastWalk: r.lastWalk,
  };
}

/** A sitemap's id: a hash of its URL, so registering the same URL twice finds the same row. */
export function sitemapIdOf(url: string): string {
  return createHash('sha256').update(url).digest('hex').slice(0, 24);
}

export class SitemapService {
  /** The refresh instant the refresh duty is armed for. */
  private plannedRefresh: number | null = null;

  constructor(private readonly deps: SitemapServiceDeps) {}

  private leaseMs(): number {
    return Math.max(MIN_WALK_LEASE_MS, 3 * this.deps.config().sitemaps.requestTimeout);
  }

  /** Registers a sitemap and starts its first walk; the same URL again answers the existing one. */
  async register(user: string, req: RegisterRequest): Promise<{ created: boolean; view: SitemapView }> {
    const url = new URL(req.url);
    const cfg = this.deps.config().sitemaps;
    if (url.protocol === 'http:' && !cfg.allowHttp)
      throw new HttpError(400, 'invalid_url', 'url must use https (sitemaps.allowHttp is off)');
    const id = sitemapIdOf(url.href);
    const existing = readSitemap(id);
    if (existing) return { created: false, view: viewOf(existing) };
    const verdict = await this.deps.checkHost(url.hostname);
    if (!verdict.ok)
      throw new HttpError(
        400,
        verdict.transient ? 'address_unresolved' : 'address_refused',
        `the sitemap's host ${verdict.phrase}${verdict.transient ? '' : ' (sitemaps.allowCidrs)'}`,
      );
    const r = await registerSitemap(
      {
        id,
        url: url.href,
        owner: user,
        cadenceMs: req.cadenceMs,
        deleteRemoved: req.deleteRemoved,
        state: 'idle',
        createdAt: this.deps.now(),
        walkId: null,
        walkHolder: null,
        walkBeatAt: null,
        allowLargeRemoval: false,
        committedWalk: null,
        urlCount: 0,
        lastWalk: null,
        progress: null,
      },
      cfg.maxPerUser,
    );
    if ('tooMany' in r)
      throw new HttpError(
        409,
        'too_many_sitemaps',
        `a user may register at most ${cfg.maxPerUser} sitemaps (sitemaps.maxPerUser)`,
      );
    if (!r.created) return { created: false, view: viewOf(r.record) };
    const started = await this.startWalk(id, false);
    return { created: true, view: viewOf(started ?? r.record) };
  }

  list(limit: number, cursor: string | undefined): { sitemaps: SitemapView[]; cursor: string | null } {
    const out: SitemapView[] = [];
    let more = false;
    for (const r of sitemapsFrom(cursor)) {
      if (out.length === limit) {
        more = true;
        break;
      }
      out.push(viewOf(r));
    }
    return { sitemaps: out, cursor: more ? out[out.length - 1]!.id : null };
  }

  get(id: string): SitemapView {
    const r = readSitemap(id);
    if (!r) throw new HttpError(404, 'not_found', 'no sitemap has this id');
    return viewOf(r);
  }

  /** queue-state's sitemap section. */
  summary(): SitemapSummary {
    const out: SitemapSummary = { total: 0, walking: 0, failed: 0, warnings: [], sitemaps: [] };
    for (const r of sitemapsFrom()) {
      out.total++;
      if (r.state === 'walking') out.walking++;
      if (r.state === 'failed') {
        out.failed++;
        if (out.warnings.length < SUMMARY_LIST)
          out.warnings.push(`sitemap ${r.url}: its last walk failed: ${r.lastWalk?.reason ?? 'unknown'}`);
      }
      if (out.sitemaps.length < SUMMARY_LIST)
        out.sitemaps.push({
          id: r.id,
          url: r.url,
          state: r.state,
          urlCount: r.urlCount,
          lastWalkAt: r.lastWalk?.finishedAt ?? null,
          reason: r.lastWalk?.reason ?? null,
        });
    }
    return out;
  }

  /** Walks the sitemap now; 409 while a walk of it runs. */
  async refresh(id: string, allowLargeRemoval: boolean): Promise<SitemapView> {
    if (!readSitemap(id)) throw new HttpError(404, 'not_found', 'no sitemap has this id');
    const started = await this.startWalk(id, allowLargeRemoval);
    if (started === null)
      throw new HttpError(409, 'walk_running', 'a walk of this sitemap is running; try again when it ends');
    return viewOf(started);
  }

  /**
   * Forgets the sitemap and unlinks its URLs, or deletes them and their pages (`deleteTargets`). A walk of
   * it still running stops at its next beat.
   */
  async remove(id: string, deleteTargets: boolean): Promise<{ unlinked: number; deleted: number }> {
    const rec = await forgetSitemap(id);
    if (!rec) throw new HttpError(404, 'not_found', 'no sitemap has this id');
    let unlinked = 0;
    let deleted = 0;
    if (rec.committedWalk !== null) {
      for (const { entry } of fileEntriesOf(id, rec.committedWalk)) {
        if (entry.kind !== 'urlset' || entry.urls === null) continue;
        const urls = await unpackUrls(entry.urls);
        for (let i = 0; i < urls.length; i += 1000) {
          const chunk = urls.slice(i, i + 1000);
          if (deleteTargets) {
            const gone = await this.deps.walk.deleteSitemapRows(chunk, id);
            await this.deps.walk.deletePages(gone);
            deleted += gone.length;
          } else unlinked += await this.deps.walk.unlinkFromSitemap(chunk, id);
          await this.deps.walk.yieldLoop();
        }
      }
    }
    await dropFileEntries(id, []);
    return { unlinked, deleted };
  }

  /**
   * Claims the sitemap's walk and runs it in the background; answers the claimed record, or null when
   * another walk of it holds the lease (or the sitemap is gone).
   */
  async startWalk(id: string, allowLargeRemoval: boolean): Promise<SitemapRecord | null> {
    const now = this.deps.now();
    const walkId = `${now.toString(36)}-${randomBytes(6).toString('hex')}`;
    const holder = `${this.deps.holder}/${walkId}`;
    const claimed = await claimWalk(
      id,
      holder,
      walkId,
      now,
      this.leaseMs(),
      allowLargeRemoval,
      emptyFigures(walkId, now),
    );
    if (claimed === null) return null;
    // In the background: the lease in the sitemap's row, not this worker, keeps two walks of it apart.
    void this.runWalk(claimed, walkId, holder).catch((e: unknown) =>
      this.deps.log.error(`sitemap ${id}: the walk failed`, e),
    );
    return claimed;
  }

  private async runWalk(rec: SitemapRecord, walkId: string, holder: string): Promise<void> {
    const walk = new SitemapWalk(rec, walkId, {
      ...this.deps.walk,
      readFileEntry,
      putFileEntry,
      fileEntriesOf,
      beat: (progress) => beatWalk(rec.id, holder, this.deps.now(), progress),
      holds: () => readSitemap(rec.id)?.walkHolder === holder,
    });
    let end;
    try {
      end = await walk.run();
    } catch (e) {
      end = {
        figures: finishFigures(
          emptyFigures(walkId, this.deps.now()),
          this.deps.now(),
          `the walk broke: ${(e as Error).message}`,
        ),
        committed: null,
      };
    }
    await endWalk(rec.id, holder, end.figures, end.committed);
    // What no walk will read again goes: every walk's entries but the committed walk's and those of a walk
    // that started since (this one's lease has ended, so another may already be staging).
    const now = readSitemap(rec.id);
    const keep = [now?.committedWalk, now?.walkHolder ? now.walkId : null].filter(
      (w): w is string => typeof w === 'string',
    );
    await dropFileEntries(rec.id, keep);
    this.deps.recordWalk(end.figures);
    if (end.figures.state === 'failed')
      this.deps.log.warn(`sitemap ${rec.url}: walk failed: ${end.figures.reason}`);
  }

  /** Worker 0's refresh: every sitemap this node owns, at each `sitemaps.refresh` instant. */
  refreshDuty(): { duty: Duty; next: (now: number) => number } {
    return {
      duty: {
        name: 'sitemap refresh',
        runOnce: async (now: number): Promise<Counts> => {
          const planned = this.plannedRefresh;
          if (planned === null || now < planned) return { started: 0 };
          this.plannedRefresh = null;
          return { started: await this.walkAll((r) => r.state !== 'walking' || this.stale(r, now)) };
        },
      },
      next: (now: number) => {
        const cfg = this.deps.config().sitemaps;
        const at = nextRefreshAt(cfg.refresh, cfg.timezone, now);
        if (at === null) {
          this.plannedRefresh = null;
          return MAX_REFRESH_WAIT_MS;
        }
        const wait = at - now;
        this.plannedRefresh = wait <= MAX_REFRESH_WAIT_MS ? at : null;
        return Math.min(wait, MAX_REFRESH_WAIT_MS);
      },
    };
  }

  /** The maintenance tick's resume: a walk whose holder stopped beating (a restart) is walked again. */
  resumeDuty(): Duty {
    return {
      name: 'sitemap resume',
      runOnce: async (now: number): Promise<Counts> => ({
        resumed: await this.walkAll((r) => r.state === 'walking' && this.stale(r, now)),
      }),
    };
  }

  private stale(r: SitemapRecord, now: number): boolean {
    return r.walkBeatAt === null || now - r.walkBeatAt >= this.leaseMs();
  }

  private async walkAll(pick: (r: SitemapRecord) => boolean): Promise<number> {
    let started = 0;
    for (const r of [...sitemapsFrom()]) {
      if (!pick(r) || !this.deps.ownsSitemap(r.id)) continue;
      if ((await this.startWalk(r.id, false)) !== null) started++;
    }
    return started;
  }
}
