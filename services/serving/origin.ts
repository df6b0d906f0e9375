// Where a miss fetches the page from its origin (docs/serving.md "Miss"): through the webhooks' address
// policy with serving's own settings (`serving.allowHttp`, `serving.allowCidrs`) and the pinned-DNS agent
// of services/notify/transport.ts, so a URL whose host resolves to loopback, a private network or this
// server is refused unless allow-listed, and a DNS answer cannot change between the check and the dial.
// Every fetch carries ORIGIN_HEADER, which the route refuses (508), so a CDN that sends the fetch back to
// /p/ cannot loop; at most `serving.originMaxConcurrent` run at once per node.
import type { Readable } from 'node:stream';
import type { Agent } from 'undici';
import type { ServingConfig } from '../../util/config/shape.js';
import type { SchedulerTimer } from '../../util/duties/scheduler.js';
import {
  checkHookUrlShape,
  parseAllowList,
  validateHookHost,
  type HostPolicy,
} from '../../util/notify/addressPolicy.js';
import type { NodeSlots } from '../../util/serving/nodeCounters.js';
import { createPinnedAgent, localAddresses, systemResolve } from '../notify/transport.js';

/** Sent on every origin fetch; a /p/ request carrying it is refused without a fetch. */
export const ORIGIN_HEADER = 'x-queue-keeper-origin';

/** The origin's response headers passed on to the crawler; hop-by-hop and cookies never are. */
const PASSED_HEADERS: readonly string[] = [
  'content-type',
  'content-length',
  'content-language',
  'cache-control',
  'etag',
  'last-modified',
  'expires',
  'link',
  'location',
  'vary',
  'x-robots-tag',
];

/** The crawler's request headers the origin sees, so it answers as it would answer the crawler. */
const FORWARDED_HEADERS: readonly string[] = ['user-agent', 'accept', 'accept-language'];

export type OriginResult =
  | { kind: 'answer'; status: number; headers: Record<string, string>; body: Readable | null }
  /** Every slot taken: 503 with Retry-After. */
  | { kind: 'busy' }
  /** Refused by the address policy, unreachable, timed out or broken: 502, with nothing more said. */
  | { kind: 'failed' };

export interface OriginFetchDeps {
  config: () => ServingConfig;
  /** The node's origin-fetch slots (a word of shared memory, resources.ts). */
  slots: NodeSlots;
  /** The deadline of one fetch's response head (a one-shot, cleared when the head arrives). */
  timer: SchedulerTimer;
  /** The resolver behind the policy (the platform's unless a test hands in its own). */
  resolve?: (host: string) => Promise<string[]>;
}

/** The serving address policy as configured now. */
function originPolicy(cfg: ServingConfig, resolve: (host: string) => Promise<string[]>): HostPolicy {
  return { allowList: parseAllowList(cfg.allowCidrs), selfAddresses: localAddresses(), resolve };
}

export class OriginFetch {
  private agent: Agent | undefined;

  constructor(private readonly deps: OriginFetchDeps) {}

  private pinnedAgent(): Agent {
    const resolve = this.deps.resolve ?? systemResolve;
    return (this.agent ??= createPinnedAgent({
      validate: (host) => validateHookHost(host, originPolicy(this.deps.config(), resolve)),
      connectTimeoutMs: () => this.deps.config().originTimeout,
    }));
  }

  /** Fetches `url` for a crawler's GET or HEAD; the answer's body releases the slot when it ends. */
  async fetch(
    url: string,
    method: 'GET' | 'HEAD',
    crawler: (name: string) => string | null,
  ): Promise<OriginResult> {
    const cfg = this.deps.config();
    const shape = checkHookUrlShape(url, { allowHttp: cfg.allowHttp });
    if (!shape.ok) return { kind: 'failed' };
    if (!this.deps.slots.take(cfg.originMaxConcurrent)) return { kind: 'busy' };
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.deps.slots.release();
    };
    const headers: Record<string, string> = { [ORIGIN_HEADER]: '1', 'accept-encoding': 'identity' };
    for (const name of FORWARDED_HEADERS) {
      const v = crawler(name);
      if (v !== null) headers[name] = v;
    }
    const abort = new AbortController();
    const deadline = this.deps.timer.set(() => abort.abort(), cfg.originTimeout);
    try {
      const res = await this.pinnedAgent().request({
        origin: shape.url.origin,
        path: shape.url.pathname + shape.url.search,
        method,
        headers,
        signal: abort.signal,
        headersTimeout: cfg.originTimeout,
        bodyTimeout: cfg.originTimeout,
      });
      this.deps.timer.clear(deadline);
      const passed: Record<string, string> = {};
      for (const name of PASSED_HEADERS) {
        const v = res.headers[name];
        if (typeof v === 'string') passed[name] = v;
        else if (Array.isArray(v)) passed[name] = v.join(', ');
      }
      const body = res.body as unknown as Readable;
      if (method === 'HEAD') {
        body.destroy();
        release();
        return { kind: 'answer', status: res.statusCode, headers: passed, body: null };
      }
      body.once('close', release);
      body.once('error', release);
      return { kind: 'answer', status: res.statusCode, headers: passed, body };
    } catch {
      this.deps.timer.clear(deadline);
      release();
      return { kind: 'failed' };
    }
  }
}
