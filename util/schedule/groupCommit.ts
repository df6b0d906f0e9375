// Group commit: the result writes that arrive on one worker within a millisecond or
// two run as one batch, so they share one lock round, one transaction and one read-back instead of one
// each. A batch closes when it holds `maxItems` items or `maxWaitMs` after its first item came, and each
// caller's promise settles only when the batch has run: with its own slice of the answers, or with the
// batch's error, so nothing is acknowledged before its commit and a failed commit fails every caller in
// it. Pure: the run and the timer are injected.

/**
 * The environment variable that gives the schedule's group commit another wait for the life of the
 * process (whole ms, 0 to MAX_GROUP_COMMIT_WAIT_MS): resources.ts reads it once, and bench/group-commit.ts
 * boots one Harper per wait with it (bench/README.md).
 */
export const GROUP_COMMIT_WAIT_ENV = 'QUEUE_KEEPER_GROUP_COMMIT_WAIT_MS';

/** The longest wait a group commit may be given: every result in its batch waits up to this long. */
export const MAX_GROUP_COMMIT_WAIT_MS = 1000;

/**
 * A group commit wait given as text (an environment variable): whole milliseconds from 0 to
 * MAX_GROUP_COMMIT_WAIT_MS, blanks around it allowed; null for anything else.
 */
export function parseGroupCommitWait(text: string): number | null {
  const digits = text.trim();
  if (!/^\d{1,4}$/.test(digits)) return null;
  const ms = Number(digits);
  return ms <= MAX_GROUP_COMMIT_WAIT_MS ? ms : null;
}

export interface GroupCommitOptions<I, O> {
  /** Runs one closed batch; answers one output per item, in order. */
  run: (items: readonly I[]) => Promise<O[]>;
  /** A batch closes at this many items; a submission that would overflow it closes it first. */
  maxItems: number;
  /** A batch closes this long after its first item; 0 runs every submission on its own. */
  maxWaitMs: number;
  setTimer: (fn: () => void, ms: number) => unknown;
  clearTimer: (handle: unknown) => void;
}

interface Waiter<I, O> {
  items: readonly I[];
  resolve: (out: O[]) => void;
  reject: (error: unknown) => void;
}

export class GroupCommit<I, O> {
  private waiting: Array<Waiter<I, O>> = [];
  private count = 0;
  private timer: unknown = undefined;
  private readonly closeNow = (): void => this.close();

  constructor(private readonly options: GroupCommitOptions<I, O>) {}

  /** Items waiting for their batch to close. */
  get pending(): number {
    return this.count;
  }

  /** Adds `items` to the open batch; resolves with their outputs once the batch has run. */
  submit(items: readonly I[]): Promise<O[]> {
    const { maxItems, maxWaitMs } = this.options;
    if (items.length === 0) return Promise.resolve([]);
    if (maxWaitMs <= 0) return this.options.run(items);
    if (this.count > 0 && this.count + items.length > maxItems) this.close();
    const done = new Promise<O[]>((resolve, reject) => this.waiting.push({ items, resolve, reject }));
    this.count += items.length;
    if (this.count >= maxItems) this.close();
    else if (this.timer === undefined) this.timer = this.options.setTimer(this.closeNow, maxWaitMs);
    return done;
  }

  /** Closes the open batch now and runs it (no-op when nothing waits). */
  close(): void {
    if (this.timer !== undefined) {
      this.options.clearTimer(this.timer);
      this.timer = undefined;
    }
    const batch = this.waiting;
    if (batch.length === 0) return;
    this.waiting = [];
    this.count = 0;
    const items = batch.length === 1 ? batch[0]!.items : batch.flatMap((w) => w.items);
    let running: Promise<O[]>;
    try {
      running = this.options.run(items);
    } catch (e) {
      running = Promise.reject(e);
    }
    running.then(
      (out) => {
        if (out.length !== items.length) {
          const e = new Error(`group commit: ${out.length} answers for ${items.length} items`);
          for (const w of batch) w.reject(e);
          return;
        }
        let at = 0;
        for (const w of batch) {
          w.resolve(out.slice(at, at + w.items.length));
          at += w.items.length;
        }
      },
      (e: unknown) => {
        for (const w of batch) w.reject(e);
      },
    );
  }
}
