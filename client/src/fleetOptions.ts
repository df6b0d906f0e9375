// What a FleetClient is given and what it tells: its options, its state, its counters, and the error
// start() rejects with when the server refuses the fleet.
import type { Dispatcher } from 'undici';
import type { BackoffPolicy } from './backoff.js';
import type { BreakerOptions } from './breaker.js';
import type { Clock } from './clock.js';
import type { MqttWakeOptions } from './mqttWake.js';
import type { Logger, RenderFn } from './types.js';
import type { WebhookReceiverOptions } from './webhookReceiver.js';

export interface FleetClientOptions {
  /** The queue-keeper HTTP base, e.g. `http://127.0.0.1:9926`. */
  url: string;
  /** A Harper user with the fleet role (or a fleet's bound user, which claims only its queues). */
  username: string;
  password: string;
  render: RenderFn;
  /** Renders at once; default 8. */
  concurrency?: number;
  /** Narrow the claim to these queues (must lie in the fleet's scope); default all it may claim. */
  queues?: string[];
  /** Jobs asked for per round trip at most; default 25 (the server's queue.maxClaimLimit). */
  claimLimit?: number;
  /**
   * A finished result waits this long for others to share its round trip; default 50 ms. It never waits
   * longer, even while claiming is backing off.
   */
  flushDelayMs?: number;
  /** Backoff while the node answers `empty` or `paused`; default 1 s doubling to 30 s, with jitter. */
  idleBackoff?: Partial<BackoffPolicy>;
  /** Wait while the node answers `unready` (its keeper is loading); default 2 s. */
  unreadyWaitMs?: number;
  /** Backoff between failed requests before the breaker opens; default 250 ms doubling to 5 s. */
  errorBackoff?: Partial<BackoffPolicy>;
  /** Default: opens after 3 failures in a row, for 5 s, doubling to 60 s while probes fail. */
  breaker?: Partial<BreakerOptions>;
  /**
   * A render is aborted this long before its lease ends, so the `failed` report still lands inside the
   * lease; default 10 s, and never more than a quarter of the lease.
   */
  leaseMarginMs?: number;
  /**
   * A render still running at half its lease asks the node for a longer one (`/render_queue/extend`),
   * again at half of each new one; default true. The node caps how long a lease may last.
   */
  extendLeases?: boolean;
  /** Per request (headers and body each); default 30 s. */
  requestTimeoutMs?: number;
  /** Results per round trip are also capped by their size on the wire; default 32 MiB. */
  maxBatchBytes?: number;
  /**
   * Send each result that carries a page as raw bytes (job_result with `x-metadata-size`): the page
   * is neither JSON-escaped here nor JSON-parsed by the server. Results without a page still ride the
   * next claim as JSON. Default true; a server that answers 415 to the framing gets JSON from then on.
   */
  rawPages?: boolean;
  /**
   * Round trips over one persistent WebSocket (`/render_queue/channel`) instead of HTTP: results and
   * free slots go as credits, and the server pushes jobs as they come due, so an idle fleet never polls.
   * Pages in the raw-bytes framing still go to `job_result` over HTTP. Default false.
   */
  channel?: boolean;
  /** Run a Standard Webhooks receiver that wakes the loop. */
  webhook?: WebhookReceiverOptions;
  /** Subscribe to `queue_status/#` and wake when a node turns `queued`. */
  mqtt?: MqttWakeOptions;
  /** `true` = SIGTERM and SIGINT call stop(); or list the signals. Default none. */
  handleSignals?: boolean | NodeJS.Signals[];
  logger?: Logger;
  /** Injected for tests. */
  clock?: Clock;
  random?: () => number;
  dispatcher?: Dispatcher;
}

export type FleetState =
  'new' | 'starting' | 'running' | 'idle' | 'waiting' | 'circuit-open' | 'refused' | 'stopping' | 'stopped';

export interface FleetCounters {
  /** Jobs handed to this client. */
  claimed: number;
  /** Results by outcome, as the renderer (or an abort) produced them. */
  rendered: number;
  failed: number;
  redirected: number;
  nonIndexable: number;
  /** Renders aborted because they would have outlived their lease (counted in `failed` too). */
  abortedAtLease: number;
  /** Results the server accepted (a duplicate answer counts once, here and in `duplicates`). */
  reported: number;
  duplicates: number;
  /** Results the server refused as superseded (another grant owns the key): dropped, never retried. */
  superseded: number;
  /** Results refused as `unknown_job` (row deleted) or `invalid`: dropped. */
  dropped: number;
  /** Pages sent in the raw-bytes framing (each one its own `job_result` request, retries included). */
  rawPagesSent: number;
  /** Results given up because their lease ended before the server answered them. */
  unreported: number;
  /**
   * Jobs whose `callbackOrigin` was not used (not an http(s) origin, or plain http under an https
   * URL): their results went to the configured URL.
   */
  originsIgnored: number;
  /** Claims answered `empty` or `paused` (each one starts a backoff wait). */
  idleWaits: number;
  /** Claims answered `unready`. */
  unreadyWaits: number;
  /** Round trips sent, and those that failed (network error, timeout, 5xx, 429). */
  requests: number;
  requestErrors: number;
  /** Answers 400/401/403 (bad credentials, revoked fleet, queues outside the scope). */
  refusals: number;
  circuitOpens: number;
  webhookWakes: number;
  webhookRejected: number;
  mqttWakes: number;
}

export interface FleetSnapshot extends FleetCounters {
  state: FleetState;
  inFlight: number;
  pendingResults: number;
}

/** start() rejects with this when the server refuses the fleet outright (401/403/400). */
export class FleetRefusedError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'FleetRefusedError';
  }
}

export function zeroCounters(): FleetCounters {
  return {
    claimed: 0,
    rendered: 0,
    failed: 0,
    redirected: 0,
    nonIndexable: 0,
    abortedAtLease: 0,
    reported: 0,
    duplicates: 0,
    superseded: 0,
    dropped: 0,
    rawPagesSent: 0,
    unreported: 0,
    originsIgnored: 0,
    idleWaits: 0,
    unreadyWaits: 0,
    requests: 0,
    requestErrors: 0,
    refusals: 0,
    circuitOpens: 0,
    webhookWakes: 0,
    webhookRejected: 0,
    mqttWakes: 0,
  };
}
