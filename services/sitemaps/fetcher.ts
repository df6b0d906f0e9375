// How a sitemap file is fetched (docs/sitemaps.md "Where a sitemap may point"): through the address
// policy webhooks use (util/notify/addressPolicy.ts) with the sitemap settings of its own
// (sitemaps.allowHttp, sitemaps.allowCidrs), over the pinned agent of services/notify/transport.ts (each
// connection resolves once, checks every address, and dials only those), conditional on the last walk's
// validators, following at most sitemaps.maxRedirects redirects, each on an allowed host, within
// sitemaps.requestTimeout for the whole exchange, body included.
import type { Agent } from 'undici';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { SchedulerTimer } from '../../util/duties/scheduler.js';
import {
  checkHookUrlShape,
  parseAllowList,
  validateHookHost,
  type HookUrlPolicy,
} from '../../util/notify/addressPolicy.js';
import { boundedText, type BodyText } from '../../util/sitemaps/body.js';
import { onAllowedHost } from '../../util/sitemaps/entries.js';
import type { WalkProblem } from '../../util/sitemaps/walkPlan.js';
import {
  AddressRefusedError,
  createPinnedAgent,
  localAddresses,
  systemResolve,
  TransientResolveError,
} from '../notify/transport.js';

/** The sitemap address policy as configured now: the hook policy's rules, the sitemap settings. */
export function sitemapPolicy(cfg: QueueKeeperConfig): HookUrlPolicy {
  return {
    allowHttp: cfg.sitemaps.allowHttp,
    allowList: parseAllowList(cfg.sitemaps.allowCidrs),
    selfAddresses: localAddresses(),
    resolve: systemResolve,
  };
}

/** One agent for every sitemap fetch of this worker; each new connection is checked as configured then. */
export function sitemapAgent(config: () => QueueKeeperConfig): () => Agent {
  let agent: Agent | undefined;
  return () =>
    (agent ??= createPinnedAgent({
      validate: (host) => validateHookHost(host, sitemapPolicy(config())),
      connectTimeoutMs: () => config().sitemaps.requestTimeout,
    }));
}

export interface Validators {
  etag: string | null;
  lastModified: string | null;
}

export type Fetched =
  | { kind: 'notModified' }
  | {
      kind: 'body';
      validators: Validators;
      body: BodyText;
      /** Ends the exchange (its deadline and connection); call once the body was read or given up. */
      done: () => void;
    }
  | { kind: 'failed'; problem: WalkProblem; reason: string };

export interface FetcherDeps {
  config: () => QueueKeeperConfig;
  agent: () => Agent;
  /** The request deadline's one-shot timer (resources.ts: realTimer). */
  timer: SchedulerTimer;
  userAgent: string;
}

const REDIRECTS: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);

function failed(problem: WalkProblem, reason: string): Fetched {
  return { kind: 'failed', problem, reason };
}

/** A failure as a problem and a phrase that names no address (node's messages may). */
function failureOf(err: unknown, timedOut: boolean): Fetched {
  if (err instanceof AddressRefusedError) return failed('address_refused', `the host ${err.phrase}`);
  if (err instanceof TransientResolveError) return failed('network', `the host ${err.phrase}`);
  if (timedOut) return failed('timeout', 'the fetch took longer than sitemaps.requestTimeout');
  const code = (err as NodeJS.ErrnoException | null)?.code ?? '';
  if (code === 'ECONNREFUSED') return failed('network', 'connection refused');
  if (code === 'ENOTFOUND') return failed('network', 'the host does not resolve');
  return failed('network', code ? `network error (${code})` : 'network error');
}

/** Fetches one file of the sitemap whose host is `rootHost`. Never throws. */
export async function fetchSitemapFile(
  url: string,
  rootHost: string,
  validators: Validators | undefined,
  deps: FetcherDeps,
): Promise<Fetched> {
  const cfg = deps.config().sitemaps;
  const abort = new AbortController();
  const deadline = deps.timer.set(() => abort.abort(), cfg.requestTimeout);
  const done = () => {
    deps.timer.clear(deadline);
    abort.abort();
  };
  let at = url;
  // Every answer but a body ends the exchange here; a body's reader ends it with `done`.
  let handedOver = false;
  try {
    for (let hop = 0; ; hop++) {
      const shape = checkHookUrlShape(at, { allowHttp: cfg.allowHttp });
      if (!shape.ok) {
        const scheme = shape.phrase.startsWith('must use');
        return failed(
          scheme ? 'http_refused' : 'network',
          `the URL ${shape.phrase}${scheme ? ' (sitemaps.allowHttp)' : ''}`,
        );
      }
      if (!onAllowedHost(at, rootHost, deps.config().sitemaps.allowHosts))
        return failed('off_host', "the file is not on the sitemap's host (sitemaps.allowHosts)");
      const headers: Record<string, string> = {
        'user-agent': deps.userAgent,
        accept: 'application/xml, text/xml, text/plain;q=0.9, */*;q=0.5',
        'accept-encoding': 'gzip',
      };
      if (hop === 0 && validators?.etag) headers['if-none-match'] = validators.etag;
      if (hop === 0 && validators?.lastModified) headers['if-modified-since'] = validators.lastModified;
      const res = await deps.agent().request({
        origin: shape.url.origin,
        path: shape.url.pathname + shape.url.search,
        method: 'GET',
        headers,
        signal: abort.signal,
      });
      if (REDIRECTS.has(res.statusCode)) {
        await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
        const location = res.headers.location;
        const loc = Array.isArray(location) ? location[0] : location;
        if (loc === undefined) return failed('http_status', `HTTP ${res.statusCode} without a location`);
        if (hop >= cfg.maxRedirects)
          return failed(
            'too_many_redirects',
            `more than ${cfg.maxRedirects} redirects (sitemaps.maxRedirects)`,
          );
        try {
          at = new URL(loc, shape.url).href;
        } catch {
          return failed('http_status', 'a redirect to something that is not a URL');
        }
        continue;
      }
      if (res.statusCode === 304) {
        await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
        return validators
          ? { kind: 'notModified' }
          : failed('http_status', 'HTTP 304 to an unconditional fetch');
      }
      if (res.statusCode !== 200) {
        await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
        return failed('http_status', `HTTP ${res.statusCode}`);
      }
      const one = (v: string | string[] | undefined) => (Array.isArray(v) ? (v[0] ?? null) : (v ?? null));
      handedOver = true;
      return {
        kind: 'body',
        validators: { etag: one(res.headers.etag), lastModified: one(res.headers['last-modified']) },
        body: boundedText(res.body, cfg.maxFileBytes),
        done: () => {
          done();
          res.body.destroy();
        },
      };
    }
  } catch (err) {
    return failureOf(err, abort.signal.aborted);
  } finally {
    if (!handedOver) done();
  }
}

/** A body read that broke: the walk reports it like a failed fetch. */
export function bodyFailure(err: unknown, timedOut: boolean): { problem: WalkProblem; reason: string } {
  const f = failureOf(err, timedOut);
  return f.kind === 'failed'
    ? { problem: f.problem, reason: f.reason }
    : { problem: 'network', reason: 'network error' };
}
