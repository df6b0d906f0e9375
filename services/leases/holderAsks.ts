// The holders of a node's leases by name, whichever worker thread granted them. Each worker notes its own
// grants (util/leases/holders.ts); a worker listing rows answers from its own notes and asks the other
// workers over the thread ports for the rest, waiting at most HOLDER_ASK_TIMEOUT_MS (a worker that does
// not answer in time leaves its holders unnamed, never the page unanswered).
import type { GrantHolders, Holder } from '../../util/leases/holders.js';
import { threads } from '../runtime/harper.js';

const HOLDER_ASK = 'queue-keeper:holder-ask';
const HOLDER_REPLY = 'queue-keeper:holder-reply';
export const HOLDER_ASK_TIMEOUT_MS = 500;
/** Pairs one ask carries at most (a rows page holds at most 500). */
const MAX_ASK_PAIRS = 1000;

interface Ask {
  found: Map<string, Holder>;
  waiting: number;
  done: () => void;
}

type Pair = [key: string, token: string];

export class HolderDirectory {
  private readonly asks = new Map<number, Ask>();
  private seq = 0;
  private listening = false;

  constructor(
    private readonly local: Pick<GrantHolders, 'of'>,
    private readonly sleep: (ms: number) => Promise<void>,
  ) {}

  /** Every worker: answers the others' asks from its own notes, and takes the replies to its own. */
  listen(): void {
    if (this.listening) return;
    this.listening = true;
    const ports = threads();
    ports.onMessageByType?.(HOLDER_ASK, (msg: { id?: unknown; pairs?: unknown }, port) => {
      if (typeof msg.id !== 'number' || !Array.isArray(msg.pairs)) return;
      const found: Array<[string, Holder]> = [];
      for (const p of msg.pairs.slice(0, MAX_ASK_PAIRS) as unknown[]) {
        if (!Array.isArray(p) || typeof p[0] !== 'string' || typeof p[1] !== 'string') continue;
        const h = this.local.of(p[0], p[1]);
        if (h) found.push([p[0], h]);
      }
      port?.postMessage({ type: HOLDER_REPLY, id: msg.id, found });
    });
    ports.onMessageByType?.(HOLDER_REPLY, (msg: { id?: unknown; found?: unknown }) => {
      const ask = typeof msg.id === 'number' ? this.asks.get(msg.id) : undefined;
      if (!ask) return;
      if (Array.isArray(msg.found))
        for (const [key, h] of msg.found as Array<[string, Holder]>) ask.found.set(key, h);
      if (--ask.waiting <= 0) ask.done();
    });
  }

  /** The holders of these grants (key and token) that some worker of this node noted, by key. */
  async holdersOf(pairs: readonly Pair[]): Promise<Map<string, Holder>> {
    const found = new Map<string, Holder>();
    const missing: Pair[] = [];
    for (const [key, token] of pairs) {
      const h = this.local.of(key, token);
      if (h) found.set(key, h);
      else missing.push([key, token]);
    }
    // The main thread (no threadId) runs no worker of ours and never answers.
    const workers = threads().filter((p) => p.threadId !== undefined);
    if (missing.length === 0 || workers.length === 0) return found;
    this.listen();
    const id = ++this.seq;
    await new Promise<void>((resolve) => {
      const finish = () => {
        if (this.asks.delete(id)) resolve();
      };
      this.asks.set(id, { found, waiting: workers.length, done: finish });
      // A one-shot timeout, not a duty: whichever comes first, the last reply or the wait, answers.
      void this.sleep(HOLDER_ASK_TIMEOUT_MS).then(finish);
      for (const port of workers)
        port.postMessage({ type: HOLDER_ASK, id, pairs: missing.slice(0, MAX_ASK_PAIRS) });
    });
    return found;
  }
}
