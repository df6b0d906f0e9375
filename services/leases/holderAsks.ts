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
  found: Array<[string, Holder]>;
  waiting: number;
  done: () => void;
}

type Pair = [key: string, token: string];

export class HolderDirectory {
  private readonly asks = new Map<number, Ask>();
  private seq = 0;
  private listening = false;

  constructor(
    private readonly local: Pick<GrantHolders, 'of' | 'entries'>,
    private readonly sleep: (ms: number) => Promise<void>,
  ) {}

  /** Every worker: answers the others' asks from its own notes, and takes the replies to its own. */
  listen(): void {
    if (this.listening) return;
    this.listening = true;
    const ports = threads();
    ports.onMessageByType?.(HOLDER_ASK, (msg: { id?: unknown; pairs?: unknown; all?: unknown }, port) => {
      if (typeof msg.id !== 'number') return;
      if (msg.all === true) {
        port?.postMessage({ type: HOLDER_REPLY, id: msg.id, found: [...this.local.entries()] });
        return;
      }
      if (!Array.isArray(msg.pairs)) return;
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
      if (Array.isArray(msg.found)) for (const e of msg.found as Array<[string, Holder]>) ask.found.push(e);
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
    if (missing.length > 0)
      for (const [key, h] of await this.ask({ pairs: missing.slice(0, MAX_ASK_PAIRS) })) found.set(key, h);
    return found;
  }

  /**
   * Every grant some worker of this node noted lately, with its holder (a key may come twice, from two
   * grants: the lease table says which one is live).
   */
  async allNoted(): Promise<Array<[string, Holder]>> {
    return [...this.local.entries(), ...(await this.ask({ all: true }))];
  }

  /** Asks every other worker; answers what the replies held once all came or the wait is over. */
  private async ask(body: { pairs: Pair[] } | { all: true }): Promise<Array<[string, Holder]>> {
    // The main thread (no threadId) runs no worker of ours and never answers.
    const workers = threads().filter((p) => p.threadId !== undefined);
    const found: Array<[string, Holder]> = [];
    if (workers.length === 0) return found;
    this.listen();
    const id = ++this.seq;
    await new Promise<void>((resolve) => {
      const finish = () => {
        if (this.asks.delete(id)) resolve();
      };
      this.asks.set(id, { found, waiting: workers.length, done: finish });
      // A one-shot timeout, not a duty: whichever comes first, the last reply or the wait, answers.
      void this.sleep(HOLDER_ASK_TIMEOUT_MS).then(finish);
      for (const port of workers) port.postMessage({ type: HOLDER_ASK, id, ...body });
    });
    return found;
  }
}
