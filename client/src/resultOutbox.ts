// The results a fleet has finished and not yet had answered: they wait a short flush delay to share a
// round trip, go at most 100 (fewer after a 413) and `maxBatchBytes` to a call, and are dropped once
// their lease ended. Pages go as raw bytes (docs/fleets.md, `x-metadata-size`), each its own request,
// until the server refuses the framing with a 415; the rest ride the next claim as JSON.
import type { Clock } from './clock.js';
import type { FleetCounters } from './fleetOptions.js';
import { describeError, type Answer, type Transport } from './transport.js';
import type { Logger, ResultAnswer, WireResult } from './types.js';
import { singleAnswer } from './wireResults.js';

export interface Pending {
  wire: WireResult;
  localExpiry: number;
  bytes: number;
}

/** How the framed requests of one round trip went (their answers are settled already). */
export interface FramedRound {
  /** The clock when the last of them was answered. */
  now: number;
  /** Requests that failed on the network, with 5xx or 429, and what the last of them said. */
  failures: number;
  failure: string;
  /** A 401 or 403 among them. */
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
}

const MAX_RESULTS_PER_CALL = 100;

export class ResultOutbox {
  private pending: Pending[] = [];
  /** The pending results go out at this instant at the latest. */
  private flushAt = Infinity;
  /** Results per call after a 413 (halved until they fit). */
  private batchCap = MAX_RESULTS_PER_CALL;
  /** Pages go as raw bytes; false from the start by option, or after the server refused the framing. */
  private rawPages: boolean;

  constructor(private readonly deps: ResultOutboxDeps) {
    this.rawPages = deps.rawPages;
  }

  get size(): number {
    return this.pending.length;
  }

  /** A finished result joins the outbox; the first of a batch waits the flush delay for company. */
  add(wire: WireResult, localExpiry: number, now: number): void {
    // A framed page costs its bytes plus a small metadata part; JSON pays its escaping too.
    const bytes =
      this.rawPages && wire.body !== null
        ? Buffer.byteLength(wire.body) + 512
        : Buffer.byteLength(JSON.stringify(wire));
    if (this.pending.length === 0) this.flushAt = now + this.deps.flushDelayMs;
    this.pending.push({ wire, localExpiry, bytes });
  }

  /** Results are pending and their flush time came, or a full call's worth waits. */
  flushDue(now: number): boolean {
    return this.pending.length > 0 && (now >= this.flushAt || this.pending.length >= this.batchCap);
  }

  /** With results pending: when the loop must look again (their flush, or the first lease to end). */
  wakeAt(): number {
    let at = this.flushAt;
    for (const p of this.pending) at = Math.min(at, p.localExpiry);
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
  }

  /** The next call's results: pages to go framed, and those for the JSON call. */
  take(): { framed: Pending[]; batch: Pending[] } {
    let bytes = 0;
    let n = 0;
    while (n < this.pending.length && n < this.batchCap) {
      const b = this.pending[n]!.bytes;
      if (n > 0 && bytes + b > this.deps.maxBatchBytes) break;
      bytes += b;
      n++;
    }
    const taken = this.pending.slice(0, n);
    const framed = this.rawPages ? taken.filter((p) => p.wire.body !== null) : [];
    const batch = framed.length > 0 ? taken.filter((p) => p.wire.body === null) : taken;
    return { framed, batch };
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
   * Sends each page as raw bytes to `job_result`, all at once, and settles what was answered. A request
   * that failed (network, 5xx, 429) or was refused leaves its result pending; the caller applies the
   * breaker, the backoff and the refusal from the round's answer.
   */
  async sendFramed(framed: Pending[]): Promise<FramedRound> {
    const { count, transport } = this.deps;
    count.requests += framed.length;
    count.rawPagesSent += framed.length;
    const outcomes = await Promise.all(
      framed.map(async (p): Promise<Answer | { error: string }> => {
        const { body, ...metadata } = p.wire;
        try {
          return await transport.postFramed('/render_queue/job_result', metadata, body ?? '');
        } catch (e) {
          return { error: describeError(e) };
        }
      }),
    );
    const round: FramedRound = {
      now: this.deps.clock.now(),
      failures: 0,
      failure: '',
      refusal: null,
      unsupported: false,
    };
    const settled: Pending[] = [];
    const answers: ResultAnswer[] = [];
    for (const [i, a] of outcomes.entries()) {
      if ('error' in a || a.status >= 500 || a.status === 429) {
        round.failure = 'error' in a ? a.error : `HTTP ${a.status}`;
        round.failures++;
      } else if (a.status === 415) round.unsupported = true;
      else if (a.status === 401 || a.status === 403) round.refusal = a;
      else {
        settled.push(framed[i]!);
        answers.push(singleAnswer(framed[i]!.wire.id, a));
      }
    }
    this.settle(settled, answers);
    if (round.unsupported) {
      this.rawPages = false;
      this.deps.log.warn('the server refused raw-bytes results (415): pages go as JSON from now on', {
        where: transport.where(),
      });
      this.flushAt = round.now;
    }
    return round;
  }
}
