// The persistent channel for fleets (docs/fleets.md, "Persistent channel"): a WebSocket at /render_queue/channel that a fleet opens once. It sends credits (jobs it can
// take) and results; the server pushes jobs while credits last. Nothing here decides a grant or a
// result: every result goes through reportBatch (as job_results), every grant through ClaimService.claim
// (as claim), in that order, on the same lease table, so idempotency and exclusivity are theirs.
//
// Harper 4.7 upgrades first and authenticates after: `server.ws(listener, {runFirst})` hands us the
// socket and a promise of the upgrade request's pass through the HTTP chain, which is where Basic and
// token auth set `request.user`. So the checks run on that promise, before any message is read: no
// user, 3000 (Harper's own close code for 401); no fleet role, another site's page, a revoked fleet,
// 3003 (its 403). Each refusal sends one `{error, code}` frame first.
import { HttpError } from '../../runtime/httpError.js';
import { checkEnvelope, type ChannelEnvelope } from '../../../util/channel/envelope.js';
import { ChannelWaits, type EmptyClaim, type WaitView } from '../../../util/channel/wait.js';
import type { DutyHandle, DutyScheduler } from '../../../util/duties/scheduler.js';
import { nameHash } from '../../../util/leases/token.js';
import { callerOf, type Caller } from '../../leases/caller.js';
import type { ClaimService } from '../../leases/claims.js';
import type { FleetScope } from '../../leases/fleetScope.js';
import type { ResultService } from '../../results/service.js';
import type { QueueKeeperConfig } from '../../../util/config/schema.js';
import { log, server, type HarperUser } from '../../runtime/harper.js';
import type { MetricName } from '../../metrics/values.js';
import { orRefuse } from '../problems.js';
import { crossSiteProblem, parseJsonBody } from '../requestChecks.js';
import { type ApiResponse, authorize, reply, type Router, type RouteEntry } from '../router.js';
import { MAX_BATCH, reportBatch } from './queue.js';

export const CHANNEL_PATH = '/render_queue/channel';

/** Harper's close codes for a refused socket (REST maps 401 and 403 to these; IANA's 3000 and 3003). */
const CLOSE_UNAUTHENTICATED = 3000;
const CLOSE_FORBIDDEN = 3003;
/** RFC 6455: a message too big to process. */
const CLOSE_TOO_BIG = 1009;
/** RFC 6455: the server met a condition it did not expect (our fault, logged). */
const CLOSE_INTERNAL = 1011;

/**
 * How often a waiting socket's worker looks at the ready set's generation: a few atomic loads, so a
 * publish reaches held credits within this; the duty is armed only while some socket waits. Who is
 * claimed for again, and the slow safety claim, are util/channel/wait.ts's.
 */
export const CHANNEL_POLL_MS = 5;
/** Messages read ahead of the one being applied; past this the socket is paused (TCP backpressure). */
const MAX_QUEUED_MESSAGES = 16;

/** The parts of the `ws` socket Harper hands over that we use. */
interface ChannelSocket {
  readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  on(event: 'message', fn: (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => void): void;
  on(event: 'close', fn: () => void): void;
  on(event: 'error', fn: (e: Error) => void): void;
  pause?(): void;
  resume?(): void;
  /** ws's receiver: its cap refuses an oversized frame from its header, before buffering the payload. */
  _receiver?: { _maxPayload?: number };
}

/** The upgrade request as Harper's chain left it (user set by its auth layer). */
interface ChannelRequest {
  url?: string;
  user?: HarperUser | null;
  headers?: { get?(name: string): string | null | undefined };
}

type WsListener = (
  ws: ChannelSocket,
  request: ChannelRequest,
  chainDone: Promise<unknown>,
  next: (ws: ChannelSocket, request: ChannelRequest, chainDone: Promise<unknown>) => unknown,
) => unknown;

export interface ChannelDeps {
  claims: Pick<ClaimService, 'claim'>;
  results: ResultService;
  scope: Pick<FleetScope, 'claimScope' | 'checkReporter'>;
  /** This worker's duty scheduler: the wait for a publish is a duty on it. */
  scheduler: Pick<DutyScheduler, 'add'>;
  /** What the wait reads of the node's ready set (a getter: sized at first use). */
  ready: () => WaitView;
  /** Counts into the node's metrics; every claim made is `channel_claims`. */
  count: (name: MetricName, n: number) => void;
  /** The effective config: the frame limit, credits, claim size and fleet roles are read per use. */
  config: () => Pick<QueueKeeperConfig, 'render' | 'queue'>;
  /** Harper's `server.ws` (default: the runtime's). */
  ws?: (listener: WsListener, opts: Record<string, unknown>) => void;
}

const OPEN = 1;

/** One fleet's socket: its credits, its scope, its queue of messages, applied one at a time in order. */
class ChannelSession {
  credits = 0;
  /** The socket's `queues` narrowing (undefined: every queue the user may claim from). */
  private queues: string[] | undefined;
  private readonly caller: Caller;
  private chain: Promise<void> = Promise.resolve();
  private queued = 0;
  private pumpQueued = false;
  private lastStatus: string | null = null;
  closed = false;

  constructor(
    private readonly hub: ChannelHub,
    private readonly ws: ChannelSocket,
    private readonly user: HarperUser,
  ) {
    this.caller = callerOf(user);
  }

  send(frame: unknown): void {
    if (this.ws.readyState === OPEN) this.ws.send(JSON.stringify(frame));
  }

  /** `{error, code}` (with the message's ref); a refusal of the fleet itself also closes the socket. */
  sendError(e: unknown, ref?: string | number): void {
    if (!(e instanceof HttpError)) {
      log.error('channel message failed', e);
      this.send({ error: 'internal error; see the Harper log', code: 'internal' });
      this.ws.close(CLOSE_INTERNAL, 'internal error');
      return;
    }
    this.send({ error: e.message, code: e.code, ...(ref !== undefined ? { ref } : {}) });
    if (e.status === 401) this.ws.close(CLOSE_UNAUTHENTICATED, e.code);
    else if (e.status === 403) this.ws.close(CLOSE_FORBIDDEN, e.code);
  }

  received(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): void {
    if (this.closed) return;
    const raw = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    const limit = this.hub.deps.config().render.maxBatchBytes;
    if (raw.length > limit) {
      // The frame cap (set at open) catches this first; a limit lowered since lands here.
      this.send({ error: `the message is larger than ${limit} bytes`, code: 'payload_too_large' });
      this.ws.close(CLOSE_TOO_BIG, 'payload_too_large');
      return;
    }
    if (++this.queued > MAX_QUEUED_MESSAGES) this.ws.pause?.();
    this.enqueue(async () => {
      try {
        await this.apply(raw, isBinary);
      } finally {
        if (--this.queued === MAX_QUEUED_MESSAGES) this.ws.resume?.();
      }
    });
  }

  /** Claims again (the wait duty saw a publish or its retry time); at most one pump is queued. */
  schedulePump(): void {
    if (this.pumpQueued || this.closed) return;
    this.pumpQueued = true;
    this.enqueue(async () => {
      this.pumpQueued = false;
      await this.pump();
    });
  }

  private enqueue(step: () => Promise<void>): void {
    this.chain = this.chain.then(step).catch((e: unknown) => this.sendError(e));
  }

  /** One message: checked whole (nothing applied when it is bad), then results, then credits, then a pump. */
  private async apply(raw: Buffer, isBinary: boolean): Promise<void> {
    if (this.closed) return;
    let env: ChannelEnvelope;
    let queues: string[] | null | undefined;
    try {
      if (isBinary) throw new HttpError(400, 'invalid_body', 'the channel takes JSON text messages only');
      env = orRefuse(
        checkEnvelope(parseJsonBody(raw), this.credits, {
          maxResults: MAX_BATCH,
          maxCredits: this.hub.deps.config().queue.maxLeases,
        }),
      );
      queues = env.queues;
      // As on HTTP: a revoked fleet reports nothing, a queue outside the fleet's scope is refused.
      if (queues) await this.hub.deps.scope.claimScope(this.user.username, queues);
      if (env.results.length > 0) await this.hub.deps.scope.checkReporter(this.user.username);
    } catch (e) {
      const ref = refOf(e, raw);
      this.sendError(e, ref);
      return;
    }
    const answered =
      env.results.length > 0 ? await reportBatch(this.hub.deps.results, env.results, this.caller) : [];
    this.credits = env.withdraw ? 0 : this.credits + env.credits;
    if (queues !== undefined) this.queues = queues ?? undefined;
    this.send({
      type: 'ack',
      ...(env.ref !== undefined ? { ref: env.ref } : {}),
      results: answered,
      credits: this.credits,
    });
    await this.pump();
  }

  /**
   * Claims for the credits outstanding, at most maxClaimLimit per claim, and pushes what it grants. A
   * claim that grants nothing ends the pump: the credits are held and the socket waits for a publish.
   */
  private async pump(): Promise<void> {
    const { deps } = this.hub;
    this.hub.waits.delete(this);
    while (this.credits > 0 && !this.closed) {
      let scope;
      try {
        scope = await deps.scope.claimScope(this.user.username, this.queues);
      } catch (e) {
        this.sendError(e);
        return;
      }
      if (this.closed) return;
      const limit = Math.min(this.credits, this.hub.deps.config().queue.maxClaimLimit);
      // Read before the claim: a publish landing while it runs still wakes this socket.
      const generation = this.hub.waits.generation();
      const r = deps.claims.claim(limit, this.caller, scope);
      this.hub.count('channel_claims', 1);
      if (r.jobs.length === 0) {
        if (r.status !== this.lastStatus) this.send({ type: 'status', status: r.status });
        this.lastStatus = r.status;
        // A paused or unready claim returns before it takes anything off the set.
        const took = r.status !== 'paused' && r.status !== 'unready';
        this.hub.wait(this, { generation, scope: scope ? [...scope].map(nameHash) : null, took });
        return;
      }
      this.credits -= r.jobs.length;
      this.lastStatus = r.status;
      // `now` lets a fleet read the leases' expiresAt on its own clock (HTTP fleets use the Date header).
      this.send({ type: 'jobs', jobs: r.jobs, status: r.status, credits: this.credits, now: Date.now() });
    }
  }
}

/** The `ref` of a message refused before its envelope was admitted, when it can be read safely. */
function refOf(e: unknown, raw: Buffer): string | number | undefined {
  if (!(e instanceof HttpError) || e.code === 'invalid_json' || raw.length > 1 << 20) return undefined;
  try {
    const ref = (JSON.parse(raw.toString('utf8')) as { ref?: unknown } | null)?.ref;
    if (
      (typeof ref === 'string' && ref.length <= 200) ||
      (typeof ref === 'number' && Number.isSafeInteger(ref))
    )
      return ref;
  } catch {
    // not JSON after all: no ref
  }
  return undefined;
}

/** This worker's channel sockets and the duty that wakes the waiting ones when the ready set changes. */
export class ChannelHub {
  readonly waits: ChannelWaits;
  private readonly duty: DutyHandle;
  readonly count: (name: MetricName, n: number) => void;

  constructor(readonly deps: ChannelDeps) {
    this.count = deps.count;
    this.waits = new ChannelWaits(deps.ready);
    this.duty = deps.scheduler.add(
      { name: 'channel-wait', runOnce: (now) => this.waits.runOnce(now) },
      {
        next: () => (this.waits.size > 0 ? CHANNEL_POLL_MS : null),
        wake: () => CHANNEL_POLL_MS,
      },
    );
  }

  /** A socket's claim granted nothing: it waits until the set may have something for it. */
  wait(s: ChannelSession, claim: EmptyClaim): void {
    this.waits.add(s, claim, Date.now());
    this.duty.wake();
  }

  /** A socket Harper upgraded on our path: refused unless its upgrade request passes the fleet checks. */
  async open(ws: ChannelSocket, request: ChannelRequest, chainDone: Promise<unknown>): Promise<void> {
    // Messages that arrive before the checks are done wait for them (in order), never run ahead.
    const early: Array<[Buffer | ArrayBuffer | Buffer[], boolean]> = [];
    let session: ChannelSession | null = null;
    let refused = false;
    ws.on('message', (data, isBinary) => {
      if (session) session.received(data, isBinary);
      else if (!refused && early.length < MAX_QUEUED_MESSAGES) early.push([data, isBinary]);
    });
    ws.on('close', () => {
      refused = true;
      if (session) {
        // Its leases are not released: they expire after queue.jobLeaseTime and the keeper requeues them.
        session.closed = true;
        this.waits.delete(session);
      }
    });
    ws.on('error', (e) => log.debug('channel socket error', e.message));
    const refuse = (code: number, e: HttpError) => {
      refused = true;
      if (ws.readyState === OPEN) ws.send(JSON.stringify({ error: e.message, code: e.code }));
      ws.close(code, e.code);
    };
    try {
      await chainDone;
    } catch {
      // the chain's own failure leaves no user: refused below
    }
    if (refused) return;
    const user = request.user ?? undefined;
    try {
      // Harper refused the credentials sent (it leaves no user): say so, as the HTTP routes do.
      if (!user && request.headers?.get?.('authorization'))
        throw new HttpError(
          401,
          'unauthenticated',
          'authentication failed: the credentials were not accepted',
        );
      authorize(user, 'fleet', this.deps.config().queue);
      const cross = crossSiteProblem((n) => request.headers?.get?.(n));
      if (cross) throw new HttpError(403, 'cross_site', cross);
      await this.deps.scope.claimScope(user!.username, undefined);
    } catch (e) {
      if (!(e instanceof HttpError)) throw e;
      refuse(e.status === 401 ? CLOSE_UNAUTHENTICATED : CLOSE_FORBIDDEN, e);
      return;
    }
    if (refused) return;
    const limit = this.deps.config().render.maxBatchBytes;
    if (ws._receiver && typeof ws._receiver._maxPayload === 'number') ws._receiver._maxPayload = limit;
    session = new ChannelSession(this, ws, user!);
    session.send({
      type: 'ready',
      maxMessageBytes: limit,
      maxResults: MAX_BATCH,
      maxCredits: this.deps.config().queue.maxLeases,
      maxClaimLimit: this.deps.config().queue.maxClaimLimit,
    });
    for (const [data, isBinary] of early) session.received(data, isBinary);
  }
}

/**
 * Serves the channel on this worker. A plain GET of the path (no upgrade) is answered 426 naming the
 * protocol, after the router's usual 401/403.
 */
/** `GET /render_queue/channel` without an upgrade: 426, naming the protocol. */
async function upgradeRequired(): Promise<ApiResponse> {
  return reply(
    { error: 'this path is a WebSocket: send an Upgrade: websocket request', code: 'upgrade_required' },
    426,
    { upgrade: 'websocket' },
  );
}

const CHANNEL_ROUTES: readonly RouteEntry<ChannelDeps>[] = [
  { method: 'GET', path: CHANNEL_PATH, caller: 'fleet', handler: upgradeRequired },
];

export function registerChannel(router: Router, deps: ChannelDeps): ChannelHub {
  const hub = new ChannelHub(deps);
  router.register(CHANNEL_ROUTES, deps);
  const ws = deps.ws ?? harperWs();
  ws(
    (socket, request, chainDone, next) => {
      const url = request.url ?? '';
      const path = url.split('?')[0];
      if (path !== CHANNEL_PATH && path !== CHANNEL_PATH + '/') return next(socket, request, chainDone);
      hub.open(socket, request, chainDone).catch((e: unknown) => {
        log.error('channel open failed', e);
        socket.close(CLOSE_INTERNAL, 'internal error');
      });
    },
    // Ahead of Harper's REST socket handler, which closes every socket whose path names no resource.
    { runFirst: true },
  );
  return hub;
}

function harperWs(): NonNullable<ChannelDeps['ws']> {
  const ws = (server as unknown as { ws?: NonNullable<ChannelDeps['ws']> }).ws;
  if (typeof ws !== 'function') throw new Error('this Harper serves no WebSockets (server.ws is missing)');
  return (listener, opts) => ws.call(server, listener, opts);
}
