// The claim loop of a render fleet (API.md "Fleets: claim and report"): claim with
// `/render_queue/next`, render under each job's lease, carry the results in the next round trip, back
// off while the queue has nothing, wake early on a webhook or MQTT, and stop cleanly.
import { backoffDelay, type BackoffPolicy } from './backoff.js';
import { CircuitBreaker, type BreakerOptions } from './breaker.js';
import { systemClock, Waker, type Clock, type Timer } from './clock.js';
import { MqttWake, type MqttWakeOptions } from './mqttWake.js';
import { Transport, type Answer } from './transport.js';
import {
  consoleLogger,
  type Job,
  type Logger,
  type Outcome,
  type QueueStatus,
  type RenderFn,
  type RenderResult,
  type ResultAnswer,
  type WireResult,
} from './types.js';
import { WebhookReceiver, type WebhookReceiverOptions } from './webhookReceiver.js';
import type { Dispatcher } from 'undici';
import type { AddressInfo } from 'node:net';

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
  /** Per request (headers and body each); default 30 s. */
  requestTimeoutMs?: number;
  /** Results per round trip are also capped by their size on the wire; default 32 MiB. */
  maxBatchBytes?: number;
  /**
   * Send each result that carries a page as raw bytes (API.md job_result, `x-metadata-size`): the page
   * is neither JSON-escaped here nor JSON-parsed by the server. Results without a page still ride the
   * next claim as JSON. Default true; a server that answers 415 to the framing gets JSON from then on.
   */
  rawPages?: boolean;
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

interface Running {
  job: Job;
  controller: AbortController;
  startedAt: number;
  /** The lease end on our clock. */
  localExpiry: number;
  timer: Timer;
  settled: boolean;
}

interface Pending {
  wire: WireResult;
  localExpiry: number;
  bytes: number;
}

const MAX_RESULTS_PER_CALL = 100;
/** A Date header has 1 s resolution: below this, an apparent skew is rounding, not a wrong clock. */
const SKEW_NOISE_MS = 2_000;
/** A message this long says all there is; the server caps what it stores anyway. */
const MAX_ERROR_MESSAGE = 1_000;
const STATUSES: readonly string[] = ['empty', 'queued', 'paused', 'unready'];

function zeroCounters(): FleetCounters {
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

export class FleetClient {
  private readonly opts: FleetClientOptions;
  private readonly clock: Clock;
  private readonly random: () => number;
  private readonly log: Logger;
  private readonly transport: Transport;
  private readonly breaker: CircuitBreaker;
  private readonly waker: Waker;
  private readonly concurrency: number;
  private readonly claimLimit: number;
  private readonly flushDelayMs: number;
  private readonly idle: BackoffPolicy;
  private readonly errors: BackoffPolicy;
  private readonly unreadyWaitMs: number;
  private readonly leaseMarginMs: number;
  private readonly maxBatchBytes: number;
  /** Pages go as raw bytes; false from the start by option, or after the server refused the framing. */
  private rawPages: boolean;

  private readonly running = new Map<string, Running>();
  private pending: Pending[] = [];
  private readonly count = zeroCounters();
  private stateNow: FleetState = 'new';
  private stateDetail = '';

  /** No claim before this instant (idle backoff, unready wait, error backoff). */
  private claimAt = 0;
  /** The pending results go out at this instant at the latest. */
  private flushAt = Infinity;
  private idleAttempt = 0;
  /** Results per call after a 413 (halved until they fit). */
  private batchCap = MAX_RESULTS_PER_CALL;

  private stopping = false;
  private halted = false;
  private loopDone: Promise<void> | null = null;
  private stopPromise: Promise<void> | null = null;
  private firstAnswer: { resolve: () => void; reject: (e: Error) => void } | null = null;
  private webhook: WebhookReceiver | null = null;
  private mqtt: MqttWake | null = null;
  private mqttNote = '';
  private signalHandler: (() => void) | null = null;
  private signals: NodeJS.Signals[] = [];
  private drainTimer: Timer | null = null;
  private edgesClosed = false;

  constructor(opts: FleetClientOptions) {
    if (typeof opts.render !== 'function') throw new TypeError('render must be a function');
    this.opts = opts;
    this.clock = opts.clock ?? systemClock;
    this.random = opts.random ?? Math.random;
    this.log = opts.logger ?? consoleLogger;
    this.concurrency = positiveInt(opts.concurrency ?? 8, 'concurrency');
    this.claimLimit = positiveInt(opts.claimLimit ?? 25, 'claimLimit');
    this.flushDelayMs = Math.max(0, opts.flushDelayMs ?? 50);
    this.idle = { baseMs: 1_000, capMs: 30_000, ...opts.idleBackoff };
    this.errors = { baseMs: 250, capMs: 5_000, ...opts.errorBackoff };
    this.unreadyWaitMs = Math.max(0, opts.unreadyWaitMs ?? 2_000);
    this.leaseMarginMs = Math.max(0, opts.leaseMarginMs ?? 10_000);
    this.maxBatchBytes = Math.max(1, opts.maxBatchBytes ?? 32 << 20);
    this.rawPages = opts.rawPages ?? true;
    if (opts.queues !== undefined && (!Array.isArray(opts.queues) || opts.queues.length === 0))
      throw new TypeError('queues must be a non-empty array of queue names (omit it for all)');
    this.transport = new Transport({
      url: opts.url,
      username: opts.username,
      password: opts.password,
      requestTimeoutMs: opts.requestTimeoutMs ?? 30_000,
      dispatcher: opts.dispatcher,
    });
    this.breaker = new CircuitBreaker({
      failureThreshold: 3,
      openMs: 5_000,
      maxOpenMs: 60_000,
      ...opts.breaker,
    });
    this.waker = new Waker(this.clock);
  }

  /** Where the client claims from (the base URL). */
  get where(): string {
    return this.transport.where();
  }

  get state(): FleetState {
    return this.stateNow;
  }

  /** A copy of the counters with the state and the in-flight and unreported-result gauges. */
  get counters(): FleetSnapshot {
    return {
      ...this.count,
      state: this.stateNow,
      inFlight: this.running.size,
      pendingResults: this.pending.length,
    };
  }

  /** The webhook receiver's bound address (when one is configured and listening). */
  get webhookAddress(): AddressInfo | null {
    return this.webhook?.address() ?? null;
  }

  /**
   * Starts the receivers and the claim loop; resolves after the first round trip was answered (or
   * failed on the network, which the loop keeps retrying). Rejects with FleetRefusedError when the
   * server refuses the credentials, the role, the fleet or its queues.
   */
  async start(): Promise<void> {
    if (this.stateNow !== 'new') throw new Error('a FleetClient starts once');
    this.setState('starting');
    try {
      if (this.opts.webhook) {
        this.webhook = new WebhookReceiver(
          this.opts.webhook,
          {
            onDelivery: () => {
              this.count.webhookWakes++;
              this.wakeUp();
            },
            onRejected: () => {
              this.count.webhookRejected++;
            },
          },
          this.clock,
        );
        await this.webhook.listen();
      }
      if (this.opts.mqtt) {
        this.mqtt = new MqttWake(
          {
            topic: 'queue_status/#',
            username: this.opts.username,
            password: this.opts.password,
            ...this.opts.mqtt,
          },
          {
            onStatus: (_host, status) => {
              if (status !== 'queued') return;
              this.count.mqttWakes++;
              this.wakeUp();
            },
            onConnection: (up, error) => {
              const note = up ? 'mqtt connected' : `mqtt disconnected${error ? `: ${error}` : ''}`;
              if (note === this.mqttNote) return;
              this.mqttNote = note;
              (up ? this.log.info : this.log.warn)(note, { url: this.opts.mqtt!.url });
            },
          },
        );
        this.mqtt.start();
      }
    } catch (e) {
      await this.closeEdges();
      this.setState('stopped');
      throw e;
    }
    this.installSignals();
    const first = new Promise<void>((resolve, reject) => (this.firstAnswer = { resolve, reject }));
    this.loopDone = this.loop().catch((e: unknown) => {
      // The loop catches everything it expects; this is a bug, and the fleet must not go silent.
      this.log.error('claim loop crashed', { error: String(e) });
      this.settleFirst(e instanceof Error ? e : new Error(String(e)));
    });
    try {
      await first;
    } catch (e) {
      await this.loopDone;
      await this.closeEdges();
      this.setState('stopped', e instanceof Error ? e.message : String(e));
      throw e;
    }
  }

  /**
   * Stops claiming, lets in-flight renders finish (each is aborted at its lease deadline, or at
   * `drainTimeoutMs` when given), reports their results, closes the receivers and resolves.
   */
  stop(opts: { drainTimeoutMs?: number } = {}): Promise<void> {
    if (this.stopPromise) return this.stopPromise;
    if (this.stateNow === 'new' || this.stateNow === 'stopped') {
      this.setState('stopped');
      return (this.stopPromise = Promise.resolve());
    }
    this.setState('stopping', `${this.running.size} in flight, ${this.pending.length} to report`);
    this.stopping = true;
    if (opts.drainTimeoutMs !== undefined)
      this.drainTimer = this.clock.setTimer(() => {
        for (const r of [...this.running.values()])
          this.abortRun(r, 'FleetStopping', 'the fleet stopped before the render finished');
      }, opts.drainTimeoutMs);
    this.waker.wake();
    this.stopPromise = (async () => {
      await this.loopDone;
      this.drainTimer?.cancel();
      await this.closeEdges();
      this.setState('stopped', this.summary());
    })();
    return this.stopPromise;
  }

  // ---- the loop -------------------------------------------------------------------------------------

  private async loop(): Promise<void> {
    while (!this.halted) {
      const now = this.clock.now();
      this.dropExpired(now);
      if (this.stopping && this.running.size === 0 && this.pending.length === 0) break;
      if (this.breaker.state(now) === 'open') {
        this.setState('circuit-open', `retry in ${this.breaker.retryAt() - now} ms`);
        await this.waker.wait(this.breaker.retryAt() - now);
        continue;
      }
      const free = this.stopping ? 0 : Math.min(this.claimLimit, this.concurrency - this.running.size);
      const claimDue = free > 0 && now >= this.claimAt;
      const full = this.pending.length >= this.batchCap;
      // A pending result waits its short flush delay so finishing renders share one round trip; a claim
      // that is due waits with it rather than going out alone just before them.
      const flushDue = this.pending.length > 0 && (now >= this.flushAt || full);
      if (flushDue || (claimDue && this.pending.length === 0)) {
        await this.exchange(free > 0 ? free : 0);
        continue;
      }
      // With results pending, a due claim waits for their flush (above); otherwise for its own time.
      let until = this.pending.length > 0 ? this.flushAt : free > 0 ? this.claimAt : Infinity;
      for (const p of this.pending) until = Math.min(until, p.localExpiry);
      await this.waker.wait(Math.max(0, until - now));
    }
    this.settleFirst();
  }

  /**
   * One round trip: results (if any) and a claim for `limit` jobs (0 = results only). Pages in the
   * raw-bytes framing go first, each its own request and all at once; the rest (and the claim) follow
   * only when every one of them was answered.
   */
  private async exchange(limit: number): Promise<void> {
    const taken = this.takeBatch();
    const framed = this.rawPages ? taken.filter((p) => p.wire.body !== null) : [];
    const batch = framed.length > 0 ? taken.filter((p) => p.wire.body === null) : taken;
    if (framed.length > 0 && !(await this.sendFramed(framed))) return;
    const claiming = limit > 0;
    // Every result went framed and nothing is to be claimed: there is no JSON call to make.
    if (!claiming && batch.length === 0) return;
    const wire = batch.map((p) => p.wire);
    const path = claiming ? '/render_queue/next' : '/render_queue/job_results';
    const body = claiming
      ? { results: wire, limit, ...(this.opts.queues ? { queues: this.opts.queues } : {}) }
      : { results: wire };
    const sentAt = this.clock.now();
    this.count.requests++;
    let answer: Answer;
    try {
      answer = await this.transport.post(path, body);
    } catch (e) {
      this.failed(sentAt, describeError(e));
      return;
    }
    const now = this.clock.now();
    if (answer.status >= 500 || answer.status === 429) {
      this.failed(now, `HTTP ${answer.status}`);
      return;
    }
    if (this.breaker.success()) this.log.info('circuit closed', { where: this.where });
    if (answer.status === 413 && batch.length > 1) {
      this.batchCap = Math.max(1, Math.floor(batch.length / 2));
      return;
    }
    if (answer.status !== 200) {
      this.refused(now, answer, batch);
      return;
    }
    const json = (answer.json ?? {}) as { results?: ResultAnswer[]; jobs?: Job[] };
    this.settle(batch, Array.isArray(json.results) ? json.results : []);
    if (!claiming) {
      this.settleFirst();
      return;
    }
    const jobs = Array.isArray(json.jobs) ? json.jobs : [];
    const skew = serverSkew(answer.headers.date, sentAt, now);
    for (const job of jobs) this.startRender(job, skew, now);
    const header = answer.headers['x-queue-status'];
    const status = (
      typeof header === 'string' && STATUSES.includes(header) ? header : 'empty'
    ) as QueueStatus;
    if (status === 'unready') {
      this.count.unreadyWaits++;
      this.claimAt = now + this.unreadyWaitMs;
      this.setState('waiting', 'the node is unready');
    } else if (jobs.length > 0) {
      // `queued` with jobs: claim again at once while slots are free.
      this.idleAttempt = 0;
      this.claimAt = now;
      this.setState('running');
    } else {
      // `empty`, `paused` (or `queued` that gave nothing, which must not spin).
      this.count.idleWaits++;
      this.claimAt = now + backoffDelay(this.idle, this.idleAttempt++, this.random);
      this.setState('idle', status === 'paused' ? 'the node is paused' : 'nothing due');
    }
    this.settleFirst();
  }

  /**
   * Sends each page as raw bytes to `job_result` and settles what was answered. Answers false when
   * the round trip must end here: a network error, 5xx or 429 (those results stay pending, the
   * breaker and the error backoff apply as for any call), a refusal of the fleet, or a 415.
   */
  private async sendFramed(framed: Pending[]): Promise<boolean> {
    this.count.requests += framed.length;
    this.count.rawPagesSent += framed.length;
    const outcomes = await Promise.all(
      framed.map(async (p): Promise<Answer | { error: string }> => {
        const { body, ...metadata } = p.wire;
        try {
          return await this.transport.postFramed('/render_queue/job_result', metadata, body ?? '');
        } catch (e) {
          return { error: describeError(e) };
        }
      }),
    );
    const now = this.clock.now();
    const settled: Pending[] = [];
    const answers: ResultAnswer[] = [];
    let failure = '';
    let failures = 0;
    let refusal: Answer | null = null;
    let unsupported = false;
    for (const [i, a] of outcomes.entries()) {
      if ('error' in a || a.status >= 500 || a.status === 429) {
        failure = 'error' in a ? a.error : `HTTP ${a.status}`;
        failures++;
      } else if (a.status === 415) unsupported = true;
      else if (a.status === 401 || a.status === 403) refusal = a;
      else {
        settled.push(framed[i]!);
        answers.push(singleAnswer(framed[i]!.wire.id, a));
      }
    }
    this.settle(settled, answers);
    if (unsupported) {
      this.rawPages = false;
      this.log.warn('the server refused raw-bytes results (415): pages go as JSON from now on', {
        where: this.where,
      });
      this.flushAt = now;
    }
    if (failures > 0) {
      // One step of the breaker and the backoff for the round trip, however many of its requests failed.
      this.count.requestErrors += failures - 1;
      this.failed(now, failure);
      return false;
    }
    if (this.breaker.success()) this.log.info('circuit closed', { where: this.where });
    if (refusal) {
      this.refused(now, refusal, []);
      return false;
    }
    return !unsupported;
  }

  private takeBatch(): Pending[] {
    let bytes = 0;
    let n = 0;
    while (n < this.pending.length && n < this.batchCap) {
      const b = this.pending[n]!.bytes;
      if (n > 0 && bytes + b > this.maxBatchBytes) break;
      bytes += b;
      n++;
    }
    return this.pending.slice(0, n);
  }

  /** Applies the answers to the batch just sent and removes it from the pending list. */
  private settle(batch: Pending[], answers: ResultAnswer[]): void {
    if (batch.length === 0) return;
    const sent = new Set(batch);
    this.pending = this.pending.filter((p) => !sent.has(p));
    this.batchCap = MAX_RESULTS_PER_CALL;
    batch.forEach((_p, i) => {
      const a = answers[i];
      if (!a) this.count.dropped++;
      else if (a.accepted) {
        this.count.reported++;
        if (a.duplicate) this.count.duplicates++;
      } else if (a.code === 'superseded') this.count.superseded++;
      else this.count.dropped++;
    });
    this.flushAt = this.pending.length > 0 ? this.clock.now() : Infinity;
  }

  /** A network error, timeout, 5xx or 429: the batch stays pending (results are idempotent). */
  private failed(now: number, why: string): void {
    this.count.requestErrors++;
    if (this.breaker.failure(now)) {
      this.count.circuitOpens++;
      this.setState('circuit-open', why);
    } else {
      const wait = backoffDelay(this.errors, this.breaker.consecutiveFailures() - 1, this.random);
      this.claimAt = now + wait;
      if (this.pending.length > 0) this.flushAt = now + wait;
    }
    this.settleFirst();
  }

  private refused(now: number, answer: Answer, batch: Pending[]): void {
    this.count.refusals++;
    const j = (answer.json ?? {}) as { code?: unknown; error?: unknown };
    const code = typeof j.code === 'string' ? j.code : `http_${answer.status}`;
    const message = typeof j.error === 'string' ? j.error : `HTTP ${answer.status}`;
    if (answer.status === 413) {
      // One result alone is too large for the server: it can never be reported.
      this.settle(batch, []);
    }
    if (this.firstAnswer) {
      this.halted = true;
      this.settleFirst(new FleetRefusedError(answer.status, code, `${message} (${code})`));
      return;
    }
    // Credentials, role or scope changed under a running fleet: keep its results, retry slowly.
    this.claimAt = now + this.idle.capMs;
    if (this.pending.length > 0) this.flushAt = now + this.idle.capMs;
    this.setState('refused', `${answer.status} ${code}: ${message}`);
  }

  private settleFirst(error?: Error): void {
    const f = this.firstAnswer;
    if (!f) return;
    this.firstAnswer = null;
    if (error) f.reject(error);
    else f.resolve();
  }

  private dropExpired(now: number): void {
    if (this.pending.length === 0) return;
    const keep = this.pending.filter((p) => p.localExpiry > now);
    this.count.unreported += this.pending.length - keep.length;
    this.pending = keep;
    if (keep.length === 0) this.flushAt = Infinity;
  }

  private wakeUp(): void {
    if (this.stopping) return;
    this.idleAttempt = 0;
    this.claimAt = this.clock.now();
    this.waker.wake();
  }

  // ---- rendering ------------------------------------------------------------------------------------

  private startRender(job: Job, skewMs: number, now: number): void {
    if (typeof job?.leaseToken !== 'string' || typeof job.id !== 'string') return;
    this.count.claimed++;
    const localExpiry = (typeof job.expiresAt === 'number' ? job.expiresAt : now) - skewMs;
    const lease = Math.max(0, localExpiry - now);
    const abortAt = localExpiry - Math.min(this.leaseMarginMs, lease / 4);
    const run: Running = {
      job,
      controller: new AbortController(),
      startedAt: now,
      localExpiry,
      timer: { cancel: () => {} },
      settled: false,
    };
    this.running.set(job.leaseToken, run);
    run.timer = this.clock.setTimer(
      () => this.abortRun(run, 'LeaseExpired', 'the render would have outlived its lease'),
      abortAt - now,
    );
    let p: Promise<RenderResult>;
    try {
      p = Promise.resolve(this.opts.render(job, run.controller.signal));
    } catch (e) {
      p = Promise.reject(e);
    }
    p.then(
      (r) => this.finish(run, r),
      (e: unknown) => this.finish(run, { outcome: 'failed', error: errorOf(e) }),
    );
  }

  private abortRun(run: Running, name: string, message: string): void {
    if (run.settled) return;
    run.controller.abort(Object.assign(new Error(message), { name }));
    if (name === 'LeaseExpired') this.count.abortedAtLease++;
    // Reported now, whether or not the renderer honours the signal: the lease will not wait for it.
    this.finish(run, { outcome: 'failed', error: { name, message } });
  }

  private finish(run: Running, r: RenderResult): void {
    if (run.settled) return;
    run.settled = true;
    run.timer.cancel();
    this.running.delete(run.job.leaseToken);
    const now = this.clock.now();
    const wire = toWire(run.job, r, now - run.startedAt);
    this.countOutcome(wire.outcome);
    // A framed page costs its bytes plus a small metadata part; JSON pays its escaping too.
    const bytes =
      this.rawPages && wire.body !== null
        ? Buffer.byteLength(wire.body) + 512
        : Buffer.byteLength(JSON.stringify(wire));
    if (this.pending.length === 0) this.flushAt = now + this.flushDelayMs;
    this.pending.push({ wire, localExpiry: run.localExpiry, bytes });
    this.waker.wake();
  }

  private countOutcome(o: Outcome): void {
    if (o === 'rendered') this.count.rendered++;
    else if (o === 'failed') this.count.failed++;
    else if (o === 'redirected') this.count.redirected++;
    else this.count.nonIndexable++;
  }

  // ---- edges ----------------------------------------------------------------------------------------

  private setState(s: FleetState, detail = ''): void {
    if (s === this.stateNow && detail === this.stateDetail) return;
    // Once stopping, a claim that was already on the wire does not make the fleet look running again.
    if (this.stopping && s !== 'stopped' && s !== 'circuit-open') return;
    const changed = s !== this.stateNow;
    this.stateNow = s;
    this.stateDetail = detail;
    // One line per state change; a new detail within the same state (the next retry) stays quiet.
    if (!changed) return;
    const line = `${s}${detail ? `: ${detail}` : ''}`;
    if (s === 'circuit-open' || s === 'refused') this.log.warn(line, { where: this.where });
    else this.log.info(line, s === 'running' || s === 'starting' ? { where: this.where } : undefined);
  }

  private summary(): string {
    const c = this.count;
    return `claimed ${c.claimed}, reported ${c.reported}, failed ${c.failed}, superseded ${c.superseded}, unreported ${c.unreported}`;
  }

  private installSignals(): void {
    const h = this.opts.handleSignals;
    if (!h) return;
    this.signals = h === true ? ['SIGTERM', 'SIGINT'] : h;
    this.signalHandler = () => void this.stop();
    for (const s of this.signals) process.once(s, this.signalHandler);
  }

  private async closeEdges(): Promise<void> {
    if (this.edgesClosed) return;
    this.edgesClosed = true;
    if (this.signalHandler) for (const s of this.signals) process.off(s, this.signalHandler);
    this.signalHandler = null;
    await this.webhook?.close();
    await this.mqtt?.stop();
    await this.transport.close();
  }
}

/** The `job_result` answer to one framed result, in the shape of one `results` entry. */
function singleAnswer(id: string, a: Answer): ResultAnswer {
  const j = (a.json ?? {}) as Record<string, unknown>;
  const dup = j.duplicate === true ? { duplicate: true as const } : {};
  if (a.status === 200 && j.accepted === true)
    return { id, accepted: true, nextRenderTime: Number(j.nextRenderTime), ...dup };
  const code = a.status === 409 ? 'superseded' : typeof j.code === 'string' ? j.code : `http_${a.status}`;
  return { id, accepted: false, code, error: typeof j.error === 'string' ? j.error : undefined, ...dup };
}

function positiveInt(v: number, name: string): number {
  if (!Number.isInteger(v) || v < 1) throw new TypeError(`${name} must be a positive integer`);
  return v;
}

/** Server clock minus ours, from the answer's Date header; 0 when within the header's rounding. */
export function serverSkew(date: unknown, sentAt: number, receivedAt: number): number {
  if (typeof date !== 'string') return 0;
  const server = Date.parse(date);
  if (Number.isNaN(server)) return 0;
  // The header truncates to the second: its instant is, on average, half a second early.
  const skew = server + 500 - (sentAt + receivedAt) / 2;
  return Math.abs(skew) < SKEW_NOISE_MS ? 0 : skew;
}

function errorOf(e: unknown): { name: string; message: string } {
  if (e instanceof Error)
    return { name: e.name || 'Error', message: (e.message || String(e)).slice(0, MAX_ERROR_MESSAGE) };
  return { name: 'Error', message: String(e).slice(0, MAX_ERROR_MESSAGE) };
}

function describeError(e: unknown): string {
  const code = (e as { code?: unknown })?.code;
  return typeof code === 'string' ? code : e instanceof Error ? e.message : String(e);
}

const OUTCOMES: readonly string[] = ['rendered', 'failed', 'redirected', 'non-indexable'];

/** The wire form of a renderer's answer; anything malformed becomes a `failed` saying why. */
export function toWire(job: Job, r: RenderResult, renderTimeMs: number): WireResult {
  const base = {
    id: job.id,
    leaseToken: job.leaseToken,
    renderTimeMs: Math.max(0, Math.round(renderTimeMs)),
  };
  const bad = (message: string): WireResult => ({
    ...base,
    outcome: 'failed',
    statusCode: null,
    contentType: null,
    body: null,
    error: { name: 'InvalidRenderResult', message },
  });
  if (typeof r !== 'object' || r === null) return bad('render returned no result object');
  if (!OUTCOMES.includes(r.outcome)) return bad(`render returned outcome ${JSON.stringify(r.outcome)}`);
  const status = r.statusCode ?? null;
  if (status !== null && !(Number.isInteger(status) && status >= 0 && status <= 999))
    return bad('render returned a statusCode that is not an integer HTTP status');
  if (r.body != null && typeof r.body !== 'string') return bad('render returned a body that is not a string');
  if (r.contentType != null && typeof r.contentType !== 'string')
    return bad('render returned a contentType that is not a string');
  const wire: WireResult = {
    ...base,
    outcome: r.outcome,
    statusCode: status,
    contentType: r.contentType ?? null,
    body: r.body ?? null,
  };
  if (r.outcome === 'failed' && r.error)
    wire.error = {
      name: String(r.error.name ?? 'Error').slice(0, 200),
      message: String(r.error.message ?? '').slice(0, MAX_ERROR_MESSAGE),
    };
  return wire;
}
