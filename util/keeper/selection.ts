// The keeper's publish selection: the best due rows by score, read as a heap merge
// over the class heads, and the per-queue extras a publish adds for the ready set's sections. Reads the
// held rows (util/keeper/heldRows.ts) and classes (util/keeper/classSet.ts) that KeeperCore keeps; never
// changes them. Pure: the clock is an argument.
import { CHUNK, HeldRows } from './heldRows.js';
import type { Bucket, KeeperClass } from './keeperClass.js';
import { HeadHeap, type KeeperClasses } from './classSet.js';
import type { FlowLedger } from './flow.js';
import type { HeldClass, PublishSink, PublishWalk, TopSkip, TopVisitor, TopWalk } from './types.js';
import { type QueueShare, sectionQuotas } from './sections.js';
import { MINUTE_MS, minuteOf } from '../time.js';

/**
 * The longest a publish passes a leased row on the lease table's earlier answer. A lease normally ends by
 * its result (which changes the row, and any change clears the park) or at its end (the park's end); a
 * grant given back after a conflict ends it with no change the park sees, and the row then waits at most
 * this long to be offered again.
 */
export const PARK_MAX_MS = 30_000;

/** The score every row of a class's minute bucket shares at `now` (with the keeper's current options). */
export type BucketScore = (cls: KeeperClass, minute: number, now: number) => number;

export class TopSelection {
  constructor(
    private readonly rows: HeldRows<Bucket>,
    private readonly classes: KeeperClasses,
    private readonly flow: FlowLedger,
    private readonly score: BucketScore,
  ) {}

  /**
   * What one publish writes, handed to `sink` as the ready set's writer takes them (no entry objects):
   * the best `k` due rows by score to `sink.top`, best first, then up to `extraBudget` more rows for the
   * queues the top under-represents to `sink.extra`, each queue's next best rows after its rows of the
   * top (shares: util/keeper/sections.ts). `skip` (leased rows) costs no place.
   *
   * Within a class an earlier minute never scores lower, so each class is read front to back and the
   * classes are merged by the score of their current bucket: no row is scored, nothing is sorted. Each
   * queue's extras come from a merge of its own class heads, resumed where the top's walk stopped, so no
   * row is read twice and no row is left out of the middle of a queue's order. The cost is bounded by
   * k + extraBudget rows plus one pass over the classes. `sink` and `skip` must not change the keeper. A
   * walk for a later instant (a staged publish) passes `countFlow` false, so no minute's flow is counted
   * early.
   */
  publishWalk(
    k: number,
    extraBudget: number,
    now: number,
    sink: PublishSink,
    skip?: TopSkip,
    countFlow = true,
  ): PublishWalk {
    const completeQueues = new Set<string>();
    const nowMinute = minuteOf(now);
    if (!Number.isFinite(nowMinute))
      return { complete: true, skipped: 0, skipEndsAt: Infinity, completeQueues };
    // Rows of the top per queue, counted per run of one class (rows of a bucket come together).
    const have = new Map<string, number>();
    let runClass: HeldClass | null = null;
    let run = 0;
    const endRun = () => {
      if (runClass !== null) have.set(runClass.route, (have.get(runClass.route) ?? 0) + run);
    };
    const heads = this.dueHeads(now);
    const top = this.walkHeap(
      heads,
      k,
      now,
      (slot, score, dueMs, held) => {
        if (held !== runClass) {
          endRun();
          runClass = held;
          run = 0;
        }
        run++;
        sink.top(slot, score, dueMs, held);
      },
      skip,
    );
    endRun();
    let skipped = top.skipped;
    let skipEndsAt = top.skipEndsAt;
    // Every class still in the heap has due rows left; the others were walked to their end.
    const rest = new Map<string, HeadHeap>();
    heads.forEach((cls, at, score, offset) => {
      let heap = rest.get(cls.route);
      if (heap === undefined) rest.set(cls.route, (heap = new HeadHeap()));
      heap.push(cls, at, score, offset);
    });
    for (const route of have.keys()) if (!rest.has(route)) completeQueues.add(route);
    if (rest.size > 0 && extraBudget > 0) {
      this.classes.syncDue(now, this.flow, countFlow);
      const shares = new Map<string, QueueShare>();
      for (const cls of this.classes.list) {
        if (!rest.has(cls.route)) continue;
        const share = shares.get(cls.route) ?? { due: 0, have: have.get(cls.route) ?? 0 };
        share.due += cls.dueRows;
        shares.set(cls.route, share);
      }
      const extra: TopVisitor = (slot, score, dueMs, held) => sink.extra(slot, score, dueMs, held);
      for (const [route, quota] of sectionQuotas(shares, extraBudget)) {
        const walk = this.walkHeap(rest.get(route)!, quota, now, extra, skip);
        skipped += walk.skipped;
        skipEndsAt = Math.min(skipEndsAt, walk.skipEndsAt);
        if (walk.complete) completeQueues.add(route);
      }
    }
    return { complete: top.complete, skipped, skipEndsAt, completeQueues };
  }

  /** A heap of every class's first due bucket. */
  private dueHeads(now: number): HeadHeap {
    const nowMinute = minuteOf(now);
    const heap = new HeadHeap();
    for (const cls of this.classes.list) {
      const at = cls.firstLive();
      const order = cls.order;
      if (at < order.length && order[at]!.minute <= nowMinute) {
        heap.push(cls, at, this.score(cls, order[at]!.minute, now));
      }
    }
    return heap;
  }

  /**
   * Merges the heads in `heap` best first, handing up to `k` unskipped rows to `visit`. Stopping early
   * leaves the heap holding every class with rows left, the top one at the row where it stopped, so a
   * later walk over (part of) it resumes exactly there.
   */
  private walkHeap(heap: HeadHeap, k: number, now: number, visit: TopVisitor, skip?: TopSkip): TopWalk {
    let visited = 0;
    let skipped = 0;
    let skipEndsAt = Infinity;
    const nowMinute = minuteOf(now);
    const rows = this.rows;
    while (heap.size > 0) {
      const cls = heap.topClass();
      const at = heap.topAt();
      const value = heap.topScore();
      const bucket = cls.order[at]!;
      const dueMs = bucket.minute * MINUTE_MS;
      let chunk = bucket.head;
      let fill = HeldRows.headFill(bucket);
      let passed = heap.topOffset();
      // Resuming mid-bucket: step over the rows an earlier walk passed, a whole chunk at a time.
      let from = passed;
      while (chunk !== -1 && from >= fill) {
        from -= fill;
        chunk = rows.nextChunk(chunk);
        fill = CHUNK;
      }
      for (; chunk !== -1; fill = CHUNK, from = 0) {
        const base = chunk * CHUNK;
        for (let i = from; i < fill; i++, passed++) {
          const slot = base + i;
          if (skip !== undefined) {
            if (rows.parkedAt(slot, now)) {
              const ends = rows.parkedBlockEnd(slot);
              if (ends > 0) skipEndsAt = Math.min(skipEndsAt, ends);
              skipped++;
              continue;
            }
            const leased = skip(slot, rows.leaseHi(slot), rows.leaseLo(slot));
            if (leased !== false && leased !== 0) {
              // Known leased until then: later walks pass the row without asking (never past PARK_MAX_MS,
              // in case the lease goes early without a change to the row).
              if (leased !== true) {
                // Only a block that ends within the park is an instant the set goes stale: a park cut at
                // PARK_MAX_MS just asks again (and finds the same block), and a report under way
                // (`now + 1`, util/leases/table.ts) ends with a change to the row, itself a trigger.
                const blockEnds = leased <= now + PARK_MAX_MS;
                rows.park(slot, Math.min(leased, now + PARK_MAX_MS), blockEnds);
                if (blockEnds && leased > now + 1) skipEndsAt = Math.min(skipEndsAt, leased);
              }
              skipped++;
              continue;
            }
          }
          if (visited >= k) {
            heap.setTopOffset(passed);
            return { visited, complete: false, skipped, skipEndsAt };
          }
          visit(slot, value, dueMs, cls);
          visited++;
        }
        chunk = rows.nextChunk(chunk);
      }
      const next = cls.nextLive(at + 1);
      if (next < cls.order.length && cls.order[next]!.minute <= nowMinute) {
        heap.replaceTop(next, this.score(cls, cls.order[next]!.minute, now));
      } else {
        heap.pop();
      }
    }
    return { visited, complete: true, skipped, skipEndsAt };
  }
}
