// The wire shapes of the fleet API (claim and report) as the client sees them, and the renderer's
// contract. `Job` is the one declaration of a granted job: the server (services/leases/claims.ts) and
// the integration tests (test/api.ts) import this type, so the three cannot drift apart.

/** One job under an exclusive lease, as `claim`, `/render_queue/next` and the channel hand it out. */
export interface Job {
  /** The row key, `<url>|<deviceType>`: send it back unchanged. */
  id: string;
  url: string;
  /** The queue (route) the row belongs to. */
  queue: string;
  isFromSitemap: boolean;
  /** When the lease ends, epoch ms on the server's clock; the client corrects for skew. */
  expiresAt: number;
  /** Opaque to a fleet: sent back with the result, never interpreted. */
  leaseToken: string;
  /**
   * The origin (`scheme://host[:port]`) of the node that granted the lease: the result goes there. The
   * client checks the value it receives and falls back to the configured URL when it is not usable.
   */
  callbackOrigin: string;
  /**
   * The device to render as (one the server is configured with, e.g. `mobile`); the built-in renderers
   * look its profile up in deviceProfiles.ts. A renderer may ignore it.
   */
  deviceType: string;
}

export type Outcome = 'rendered' | 'failed' | 'redirected' | 'non-indexable';

/** What a renderer returns for one job. */
export interface RenderResult {
  outcome: Outcome;
  /** The page's HTTP status (the origin's answer, not the renderer's). */
  statusCode?: number | null;
  contentType?: string | null;
  /** The rendered page; stored only for `rendered`, up to the server's render.maxBodyBytes (5 MiB). */
  body?: string | null;
  /** Only with `failed`: why. A renderer that throws gets this filled from the error. */
  error?: { name: string; message: string } | null;
}

/**
 * Renders one job. `signal` aborts when the render would outlive its lease (or on a forced stop): stop
 * work and return or throw promptly; the client reports the job `failed` at that moment either way.
 */
export type RenderFn = (job: Job, signal: AbortSignal) => Promise<RenderResult>;

/** A result as `/render_queue/next` and `/render_queue/job_results` accept it. */
export interface WireResult {
  id: string;
  leaseToken: string;
  outcome: Outcome;
  statusCode: number | null;
  renderTimeMs: number;
  contentType: string | null;
  body: string | null;
  error?: { name: string; message: string };
}

/** One entry of the `results` answer, in the order the results were sent. */
export type ResultAnswer =
  /** `nextRenderTime` is null when the result retired the row (a render verdict). */
  | { id: string | null; accepted: true; nextRenderTime: number | null; duplicate?: true }
  | {
      id: string | null;
      accepted: false;
      code: 'superseded' | 'unknown_job' | 'invalid' | string;
      error?: string;
      duplicate?: true;
    };

/** The node's status header (`x-queue-status`). */
export type QueueStatus = 'empty' | 'queued' | 'paused' | 'unready';

export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** The default logger: one line per call on stderr, fields as compact JSON. */
export const consoleLogger: Logger = {
  info: (m, f) => console.error(`[fleet] ${m}${f ? ' ' + JSON.stringify(f) : ''}`),
  warn: (m, f) => console.error(`[fleet] warn: ${m}${f ? ' ' + JSON.stringify(f) : ''}`),
  error: (m, f) => console.error(`[fleet] error: ${m}${f ? ' ' + JSON.stringify(f) : ''}`),
};

/** A logger that drops everything (tests, embedding). */
export const silentLogger: Logger = { info: () => {}, warn: () => {}, error: () => {} };
