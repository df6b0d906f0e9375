// The claim loop of a render fleet: claim with `/render_queue/next`, render under each job's lease,
// report each result to the node that granted its lease (in the next round trip when that is the
// configured URL), back off while the queue has nothing, wake early on a webhook or MQTT, and stop
// cleanly. The renders in flight are ./renders.ts, the results waiting for an answer (and the raw-bytes
// pages) ./resultOutbox.ts, where each result goes ./resultRoutes.ts, the webhook, MQTT and signal
// edges ./wakeEdges.ts.
import { backoffDelay, type BackoffPolicy } from './backoff.js';
import { CircuitBreaker } from './breaker.js';
import { systemClock, Waker, type Clock, type Timer } from './clock.js';
import {
  FleetRefusedError,
  zeroCounters,
  type FleetClientOptions,
  type FleetSnapshot,
  type FleetState,
} from './fleetOptions.js';
import { Renders, type ExtendAnswer } from './renders.js';
import { ResultOutbox, type Pending } from './resultOutbox.js';
import { resultOrigin, type ResultRoute } from './resultRoutes.js';
import { ChannelLink } from './channelLink.js';
import { describeError, Transport, type Answer } from './transport.js';
import {
  consoleLogger,
  type Job,
  type Logger,
  type QueueStatus,
  type ResultAnswer,
  type WireResult,
} from './types.js';
import { WakeEdges } from './wakeEdges.js';
import type { AddressInfo } from 'node:net';

/** A Date header has 1 s resolution: below this, an apparent skew is rounding, not a wrong clock. */
const SKEW_NOISE_MS = 2_000;
const STATUSES: readonly string[] = ['empty', 'queued', 'paused', 'unready'];
/** Distinct unusable callbackOrigin values logged at most (one line each). */
const MAX_ORIGIN_WARNINGS = 20;

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
  private readonly idle: BackoffPolicy;
  private readonly errors: BackoffPolicy;
  private readonly unreadyWaitMs: number;

  private readonly renders: Renders;
  private readonly outbox: ResultOutbox;
  /** Channel mode: round trips over the persistent WebSocket (null: over HTTP). */
  private readonly link: ChannelLink | null;
  private readonly count = zeroCounters();
  private stateNow: FleetState = 'new';
  private stateDetail = '';

  /** No claim before this instant (idle backoff, unready wait, error backoff). */
  private claimAt = 0;
  private idleAttempt = 0;

  private stopping = false;
  private halted = false;
  private loopDone: Promise<void> | null = null;
  private stopPromise: Promise<void> | null = null;
  private firstAnswer: { resolve: () => void; reject: (e: Error) => void } | null = null;
  private readonly edges: WakeEdges;
  private drainTimer: Timer | null = null;
  private edgesClosed = false;
  /** The configured URL, against which each job's callbackOrigin is checked. */
  private readonly base: URL;
  /** callbackOrigin values already logged as unusable. */
  private readonly originWarned = new Set<string>();

  constructor(opts: FleetClientOptions) {
    if (typeof opts.render !== 'function') throw new TypeError('render must be a function');
    this.opts = opts;
    this.clock = opts.clock ?? systemClock;
    this.random = opts.random ?? Math.random;
    this.log = opts.logger ?? consoleLogger;
    this.concurrency = positiveInt(opts.concurrency ?? 8, 'concurrency');
    this.claimLimit = positiveInt(opts.claimLimit ?? 25, 'claimLimit');
    const flushDelayMs = Math.max(0, opts.flushDelayMs ?? 50);
    this.idle = { baseMs: 1_000, capMs: 30_000, ...opts.idleBackoff };
    this.errors = { baseMs: 250, capMs: 5_000, ...opts.errorBackoff };
    this.unreadyWaitMs = Math.max(0, opts.unreadyWaitMs ?? 2_000);
    const leaseMarginMs = Math.max(0, opts.leaseMarginMs ?? 10_000);
    const maxBatchBytes = Math.max(1, opts.maxBatchBytes ?? 32 << 20);
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
    this.base = this.transport.baseUrl;
    this.waker = new Waker(this.clock);
    this.outbox = new ResultOutbox({
      clock: this.clock,
      transport: this.transport,
      count: this.count,
      log: this.log,
      flushDelayMs,
      maxBatchBytes,
      rawPages: opts.rawPages ?? true,
      holdMs: (failures) => backoffDelay(this.errors, failures - 1, this.random),
    });
    this.edges = new WakeEdges({
      opts,
      clock: this.clock,
      log: this.log,
      count: this.count,
      wake: () => this.wakeUp(),
      stop: () => void this.stop(),
    });
    this.link = opts.channel
      ? new ChannelLink({
          options: { ...opts, openTimeoutMs: opts.requestTimeoutMs ?? 30_000 },
          onJobs: (jobs, skew, socket) => {
            for (const job of jobs)
              this.renders.start(job, skew, this.clock.now(), { ...this.routeOf(job), socket });
            this.setState('running');
            this.waker.wake();
          },
          onStatus: (s) =>
            s === 'unready'
              ? this.setState('waiting', 'the node is unready')
              : this.setState('idle', s === 'paused' ? 'the node is paused' : 'nothing due'),
          onClose: () => this.waker.wake(),
        })
      : null;
    this.renders = new Renders({
      clock: this.clock,
      render: opts.render,
      leaseMarginMs,
      count: this.count,
      onResult: (wire, localExpiry, now, route) => {
        this.outbox.add(wire, localExpiry, now, route);
        this.waker.wake();
      },
      extend:
        opts.extendLeases === false ? undefined : (job, byMs, route) => this.extendLease(job, byMs, route),
    });
  }

  /** One extension of a running render's lease, at the node its result goes to (docs/fleets.md). */
  private async extendLease(job: Job, byMs: number, route: ResultRoute): Promise<ExtendAnswer> {
    try {
      const a = await this.transport.post(
        '/render_queue/extend',
        { id: job.id, leaseToken: job.leaseToken, byMs: Math.max(1, Math.round(byMs)) },
        route.origin,
      );
      const expiresAt = (a.json as { expiresAt?: unknown } | undefined)?.expiresAt;
      if (a.status === 200 && typeof expiresAt === 'number') return expiresAt;
      if (a.status === 409) return 'refused';
      this.log.warn(`extending the lease of ${job.id} answered ${a.status}`);
      return 'failed';
    } catch (e) {
      this.log.warn(`extending the lease of ${job.id} failed: ${describeError(e)}`);
      return 'failed';
    }
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
      inFlight: this.renders.size,
      pendingResults: this.outbox.size,
    };
  }

  /** The webhook receiver's bound address (when one is configured and listening). */
  get webhookAddress(): AddressInfo | null {
    return this.edges.webhookAddress;
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
      await this.edges.open();
    } catch (e) {
      await this.closeEdges();
      this.setState('stopped');
      throw e;
    }
    this.edges.installSignals();
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
    this.setState('stopping', `${this.renders.size} in flight, ${this.outbox.size} to report`);
    this.stopping = true;
    this.link?.withdraw();
    if (opts.drainTimeoutMs !== undefined)
      this.drainTimer = this.clock.setTimer(() => {
        this.renders.abortAll('FleetStopping', 'the fleet stopped before the render finished');
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
      this.outbox.dropExpired(now);
      if (this.stopping && this.renders.size === 0 && this.outbox.size === 0) break;
      if (this.breaker.state(now) === 'open') {
        this.setState('circuit-open', `retry in ${this.breaker.retryAt() - now} ms`);
        await this.waker.wait(this.breaker.retryAt() - now);
        continue;
      }
      // Channel mode: slots already credited are spoken for by jobs the server will push.
      const busy = this.renders.size + (this.link?.owed ?? 0);
      const free = this.stopping ? 0 : Math.min(this.claimLimit, this.concurrency - busy);
      const claimDue = free > 0 && now >= this.claimAt;
      // Results held for a node that failed do not hold the claim back.
      const ready = this.outbox.ready(now).length;
      // A pending result waits its short flush delay so finishing renders share one round trip; a claim
      // that is due waits with it rather than going out alone just before them.
      if (this.outbox.flushDue(now) || (claimDue && ready === 0)) {
        await this.exchange(free > 0 ? free : 0);
        continue;
      }
      // With results ready, a due claim waits for their flush (above); otherwise for its own time.
      const until = Math.min(this.outbox.wakeAt(), ready === 0 && free > 0 ? this.claimAt : Infinity);
      await this.waker.wait(Math.max(0, until - now));
    }
    this.settleFirst();
  }

  /** Where a job's result goes: its callbackOrigin when that is usable, else the configured URL. */
  private routeOf(job: Job): ResultRoute {
    const check = resultOrigin(job.callbackOrigin, this.base);
    if ('problem' in check) {
      this.count.originsIgnored++;
      const value = String(job.callbackOrigin).slice(0, 200);
      if (this.originWarned.size < MAX_ORIGIN_WARNINGS && !this.originWarned.has(value)) {
        this.originWarned.add(value);
        this.log.warn(`a job's callbackOrigin ${check.problem}: its result goes to the configured URL`, {
          callbackOrigin: value,
          where: this.where,
        });
      }
    }
    return { origin: check.origin };
  }

  /**
   * One round trip: results (if any) and a claim for `limit` jobs (0 = results only). Pages in the
   * raw-bytes framing, and results for any other node than the configured URL's, go first, all at
   * once; the rest (and the claim) follow only when the configured URL answered every one of those sent
   * to it (a node's own origin that fails holds only its results).
   */
  private async exchange(limit: number): Promise<void> {
    const link = this.link;
    const { framed, aside, riding } = this.outbox.take(
      this.clock.now(),
      link ? (p) => link.carries(p.route.socket) : (p) => p.route.origin === null,
    );
    if ((framed.length > 0 || aside.length > 0) && !(await this.sendAside(framed, aside))) return;
    const claiming = limit > 0;
    const batch = riding;
    // Every result went aside and nothing is to be claimed: there is no call to make.
    if (!claiming && batch.length === 0) return;
    const wire = batch.map((p) => p.wire);
    if (this.link) return this.linkExchange(batch, wire, limit);
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
      this.outbox.shrink(batch.length);
      return;
    }
    if (answer.status !== 200) {
      this.refused(now, answer, batch);
      return;
    }
    const json = (answer.json ?? {}) as { results?: ResultAnswer[]; jobs?: Job[] };
    this.outbox.settle(batch, Array.isArray(json.results) ? json.results : []);
    if (!claiming) {
      this.settleFirst();
      return;
    }
    const jobs = Array.isArray(json.jobs) ? json.jobs : [];
    const skew = serverSkew(answer.headers.date, sentAt, now);
    for (const job of jobs) this.renders.start(job, skew, now, this.routeOf(job));
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

  /** A round trip over the channel: the same outcomes as HTTP's, without a claim answer (jobs are pushed). */
  private async linkExchange(batch: Pending[], wire: WireResult[], credits: number): Promise<void> {
    this.count.requests++;
    const r = await this.link!.exchange(wire, credits);
    const now = this.clock.now();
    if ('failure' in r) return this.failed(now, r.failure);
    if (this.breaker.success()) this.log.info('circuit closed', { where: this.where });
    if ('refused' in r)
      return this.refused(now, { status: r.refused.status, headers: {}, json: r.refused }, batch);
    this.outbox.settle(batch, r.answers);
    this.idleAttempt = 0;
    this.claimAt = now;
    this.settleFirst();
  }

  /**
   * Sends each page as raw bytes to `job_result` and the results for other destinations to their
   * `job_results`, and settles what was answered. Answers false when the round trip must end here: a
   * network error, 5xx or 429 at the configured URL (those results stay pending, the breaker and the
   * error backoff apply as for any call), a refusal of the fleet, or a 415.
   */
  private async sendAside(framed: Pending[], aside: Pending[]): Promise<boolean> {
    const round = await this.outbox.sendAside(framed, aside);
    if (round.failures > 0) {
      // One step of the breaker and the backoff for the round trip, however many of its requests failed.
      this.count.requestErrors += round.failures - 1;
      this.failed(round.now, round.failure);
      return false;
    }
    if (round.baseAnswered && this.breaker.success()) this.log.info('circuit closed', { where: this.where });
    if (round.refusal) {
      this.refused(round.now, round.refusal, []);
      return false;
    }
    return !round.unsupported;
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
      this.outbox.deferFlush(now + wait);
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
      this.outbox.settle(batch, []);
    }
    if (this.firstAnswer) {
      this.halted = true;
      this.settleFirst(new FleetRefusedError(answer.status, code, `${message} (${code})`));
      return;
    }
    // Credentials, role or scope changed under a running fleet: keep its results, retry slowly.
    this.claimAt = now + this.idle.capMs;
    this.outbox.deferFlush(now + this.idle.capMs);
    this.setState('refused', `${answer.status} ${code}: ${message}`);
  }

  private settleFirst(error?: Error): void {
    const f = this.firstAnswer;
    if (!f) return;
    this.firstAnswer = null;
    if (error) f.reject(error);
    else f.resolve();
  }

  private wakeUp(): void {
    if (this.stopping) return;
    this.idleAttempt = 0;
    this.claimAt = this.clock.now();
    this.waker.wake();
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

  private async closeEdges(): Promise<void> {
    if (this.edgesClosed) return;
    this.edgesClosed = true;
    await this.edges.close();
    this.link?.close();
    await this.transport.close();
  }
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
