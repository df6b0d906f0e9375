// The results a fleet has finished and not yet had answered. Each goes to the node that granted its
// lease (./resultRoutes.ts): the configured URL, a node's own origin, or the channel socket its job came
// on. They wait a short flush delay to share a round trip, go at most 100 (fewer after a 413) and
// `maxBatchBytes` to a call, and are dropped once their lease ended. Pages go as raw bytes (job_result
// with `x-metadata-size`), each its own request, until the server refuses the framing with a 415.
//
// Results that do not ride the claim go "aside" before it: framed pages, and JSON batches to
// `/render_queue/job_results` at each other destination, one batch per origin. A failure at the configured
// URL belongs to the round trip (the caller's breaker and backoff); a failure at a node's origin holds
// only that origin's results, with a growing wait, while claims and the other results go on.
import type { Clock } from './clock.js';
import type { FleetCounters } from './fleetOptions.js';
import type { ResultRoute } from './resultRoutes.js';
import { describeError, type Answer, type Transport } from './transport.js';
import type { Logger, ResultAnswer, WireResult } from './types.js';
import { singleAnswer } from './wireResults.js';

export interface Pending {
  wire: WireResult;
  localExpiry: number;
  bytes: number;
  route: ResultRoute;
}

/** How the requests sent aside in one round went (their answers are settled already). */
export interface AsideRound {
  /** The clock when the last of them was answered. */
  now: number;
  /** Requests to the configured URL that failed on the network, with 5xx or 429, and the last reason. */
  failures: number;
  failure: string;
  /** A request to the configured URL was answered (the server is there). */
  baseAnswered: boolean;
  /** A refusal of the fleet (401, 403, or a JSON batch the configured URL would not take). */
  refusal: Answer | null;
  /** The server answered 415: pages go as JSON from now on. */
  unsupported: boolean;
}

export interface ResultOutboxDeps {
  clock: Clock;
  transport: Transport;
  count: FleetCounters;
  log: Logger;
  flushDelayMs: number;
  maxBatchBytes: number;
  rawPages: boolean;
  /** How long a node's origin is left alone after its nth failure in a row (n from 1). */
  holdMs: (failures: number) => number;
}

const MAX_RESULTS_PER_CALL = 100;

/** A node origin whose last delivery failed: its results wait until `until`. */
interface Hold {
  failures: number;
  until: number;
}

/** One request sent aside: a framed page, or a JSON batch to one destination. */
type Aside = { kind: 'framed'; p: Pending } | { kind: 'batch'; origin: string | null; ps: Pending[] };

export class ResultOutbox {
  private pending: Pending[] = [];
  /** The pending results go out at this instant at the latest. */
  private flushAt = Infinity;
  /** Results per call after a 413 (halved until they fit). */
  private batchCap = MAX_RESULTS_PER_CALL;
  /** Pages go as raw bytes; false from the start by option, or after the server refused the framing. */
  private rawPages: boolean;
  private readonly holds = new Map<string, Hold>();

  constructor(private readonly deps: ResultOutboxDeps) {
    this.rawPages = deps.rawPages;
  }

  get size(): number {
    return this.pending.length;
  }

  /** A finished result joins the outbox; the first of a batch waits the flush delay for company. */
  add(wire: WireResult, localExpiry: number, now: number, route: ResultRoute = { origin: null }): void {
    // A framed page costs its bytes plus a small metadata part; JSON pays its escaping too.
    const bytes =
      this.rawPages && wire.body !== null
        ? Buffer.byteLength(wire.body) + 512
        : Buffer.byteLength(JSON.stringify(wire));
    if (this.ready(now).length === 0) this.flushAt = now + this.deps.flushDelayMs;
    this.pending.push({ wire, localExpiry, bytes, route });
  }

  /** The pending results that may go now: all but those for a node origin that is held. */
  ready(now: number): Pending[] {
    if (this.holds.size === 0) return this.pending;
    return this.pending.filter((p) => this.heldUntil(p) <= now);
  }

  /** Results may go and their flush time came, or a full call's worth waits. */
  flushDue(now: number): boolean {
    const n = this.ready(now).length;
    return n > 0 && (now >= this.flushAt || n >= this.batchCap);
  }

  /** With results pending: when the loop must look again (a flush, a hold's end, a lease's end). */
  wakeAt(): number {
    let at = Infinity;
    for (const p of this.pending) at = Math.min(at, p.localExpiry, Math.max(this.flushAt, this.heldUntil(p)));
    return at;
  }

  /** After a failed or refused call: pending results wait until `at` before they go again. */
  deferFlush(at: number): void {
    if (this.pending.length > 0) this.flushAt = at;
  }

  /** Results whose lease ended before the server answered them are given up (counted `unreported`). */
  dropExpired(now: number): void {
    if (this.pending.length === 0) return;
    const keep = this.pending.filter((p) => p.localExpiry > now);
    this.deps.count.unreported += this.pending.length - keep.length;
    this.pending = keep;
    if (keep.length === 0) this.flushAt = Infinity;
    // A hold with nothing left to send is forgotten once it ends.
    for (const [origin, h] of this.holds)
      if (h.until <= now && !keep.some((p) => p.route.origin === origin)) this.holds.delete(origin);
  }

  /**
   * The next call's results, from those that may go now: pages to go framed, JSON results for other
   * destinations (`aside`), and those that ride the call to the configured URL (`rides`).
   */
  take(
    now: number,
    rides: (p: Pending) => boolean,
  ): { framed: Pending[]; aside: Pending[]; riding: Pending[] } {
    const ready = this.ready(now);
    let bytes = 0;
    let n = 0;
    while (n < ready.length && n < this.batchCap) {
      const b = ready[n]!.bytes;
      if (n > 0 && bytes + b > this.deps.maxBatchBytes) break;
      bytes += b;
      n++;
    }
    const framed: Pending[] = [];
    const aside: Pending[] = [];
    const riding: Pending[] = [];
    for (const p of ready.slice(0, n)) {
      if (this.rawPages && p.wire.body !== null) framed.push(p);
      else if (rides(p)) riding.push(p);
      else aside.push(p);
    }
    return { framed, aside, riding };
  }

  /** A 413 to a call of `sent` results: the next calls carry half as many. */
  shrink(sent: number): void {
    this.batchCap = Math.max(1, Math.floor(sent / 2));
  }

  /** Applies the answers to the batch just sent and removes it from the pending list. */
  settle(batch: Pending[], answers: ResultAnswer[]): void {
    if (batch.length === 0) return;
    const { count } = this.deps;
    const sent = new Set(batch);
    this.pending = this.pending.filter((p) => !sent.has(p));
    this.batchCap = MAX_RESULTS_PER_CALL;
    batch.forEach((_p, i) => {
      const a = answers[i];
      if (!a) count.dropped++;
      else if (a.accepted) {
        count.reported++;
        if (a.duplicate) count.duplicates++;
      } else if (a.code === 'superseded') count.superseded++;
      else count.dropped++;
    });
    this.flushAt = this.pending.length > 0 ? this.deps.clock.now() : Infinity;
  }

  /**
   * Sends every page as raw bytes to `job_result`, and the `aside` results as one `job_results` batch per
   * destination, all at once, and settles what was answered. A request that failed or was refused leaves
   * its results pending: a node origin's failure holds that origin here; the configured URL's failures
   * and any refusal are the caller's, from the round's answer.
   */
  async sendAside(framed: Pending[], aside: Pending[]): Promise<AsideRound> {
    const { count, transport } = this.deps;
    const requests: Aside[] = framed.map((p) => ({ kind: 'framed', p }));
    const byOrigin = new Map<string | null, Pending[]>();
    for (const p of aside) {
      const list = byOrigin.get(p.route.origin);
      if (list) list.push(p);
      else byOrigin.set(p.route.origin, [p]);
    }
    for (const [origin, ps] of byOrigin) requests.push({ kind: 'batch', origin, ps });
    count.requests += requests.length;
    count.rawPagesSent += framed.length;
    const outcomes = await Promise.all(
      requests.map(async (r): Promise<Answer | { error: string }> => {
        try {
          if (r.kind === 'batch')
            return await transport.post(
              '/render_queue/job_results',
              { results: r.ps.map((p) => p.wire) },
              r.origin,
            );
          const { body, ...metadata } = r.p.wire;
          return await transport.postFramed(
            '/render_queue/job_result',
            metadata,
            body ?? '',
            r.p.route.origin,
          );
        } catch (e) {
          return { error: describeError(e) };
        }
      }),
    );
    const round: AsideRound = {
      now: this.deps.clock.now(),
      failures: 0,
      failure: '',
      baseAnswered: false,
      refusal: null,
      unsupported: false,
    };
    const settled: Pending[] = [];
    const answers: ResultAnswer[] = [];
    const reached = new Set<string>();
    const failedAt = new Map<string, string>();
    let tooLarge = 0;
    for (const [i, a] of outcomes.entries()) {
      const r = requests[i]!;
      const origin = r.kind === 'batch' ? r.origin : r.p.route.origin;
      const trouble =
        'error' in a ? a.error : a.status >= 500 || a.status === 429 ? `HTTP ${a.status}` : null;
      if (trouble !== null) {
        if (origin === null) {
          round.failure = trouble;
          round.failures++;
        } else failedAt.set(origin, trouble);
        continue;
      }
      const answer = a as Answer;
      if (origin === null) round.baseAnswered = true;
      else reached.add(origin);
      if (answer.status === 401 || answer.status === 403) {
        round.refusal = answer;
        continue;
      }
      if (r.kind === 'framed') {
        if (answer.status === 415) round.unsupported = true;
        else {
          settled.push(r.p);
          answers.push(singleAnswer(r.p.wire.id, answer));
        }
        continue;
      }
      if (answer.status === 200) {
        const json = (answer.json ?? {}) as { results?: ResultAnswer[] };
        this.settle(r.ps, Array.isArray(json.results) ? json.results : []);
      } else if (answer.status === 413) {
        if (r.ps.length > 1) tooLarge = Math.max(tooLarge, r.ps.length);
        // One result alone is too large for the server: it can never be reported.
        else this.settle(r.ps, []);
      } else if (origin === null) round.refusal = answer;
      else failedAt.set(origin, `HTTP ${answer.status}`);
    }
    this.settle(settled, answers);
    if (tooLarge > 0) this.shrink(tooLarge);
    for (const origin of reached) if (!failedAt.has(origin)) this.release(origin);
    for (const [origin, why] of failedAt) this.hold(origin, why, round.now);
    if (round.unsupported) {
      this.rawPages = false;
      this.deps.log.warn('the server refused raw-bytes results (415): pages go as JSON from now on', {
        where: transport.where(),
      });
      this.flushAt = round.now;
    }
    return round;
  }

  private heldUntil(p: Pending): number {
    return p.route.origin === null ? 0 : (this.holds.get(p.route.origin)?.until ?? 0);
  }

  /** A delivery to a node's origin failed: its results wait, longer after each failure in a row. */
  private hold(origin: string, why: string, now: number): void {
    const failures = (this.holds.get(origin)?.failures ?? 0) + 1;
    this.deps.count.requestErrors++;
    this.holds.set(origin, { failures, until: now + this.deps.holdMs(failures) });
    if (failures === 1)
      this.deps.log.warn('results to the granting node failed; holding them for it', { origin, why });
  }

  private release(origin: string): void {
    const h = this.holds.get(origin);
    if (!h) return;
    this.holds.delete(origin);
    if (h.failures > 0) this.deps.log.info('results reach the granting node again', { origin });
  }
}
