// The sealing key of hook secrets (QUEUE_KEEPER_SECRET_KEY, docs/installing.md), read and judged once per
// worker.
// Without a usable key hooks answer 503 and nothing is dispatched (fail closed).
import { parseSealKey } from '../../util/notify/secretSeal.js';

export interface SealKeyDeps {
  /** The raw setting (the environment variable). */
  read: () => string | undefined;
  log: { error: (...args: unknown[]) => void };
}

export class SealKey {
  private state: { key: Buffer | null; problem: string | null } | undefined;

  constructor(private readonly deps: SealKeyDeps) {}

  private judged(): { key: Buffer | null; problem: string | null } {
    if (this.state) return this.state;
    let state: { key: Buffer | null; problem: string | null };
    try {
      const key = parseSealKey(this.deps.read());
      state = {
        key,
        problem: key
          ? null
          : 'QUEUE_KEEPER_SECRET_KEY is not set, so hook secrets cannot be sealed or opened',
      };
    } catch (e) {
      state = { key: null, problem: (e as Error).message };
    }
    this.state = state;
    if (state.problem) this.deps.log.error(`notify hooks are unavailable: ${state.problem}`);
    return state;
  }

  /** The AES key for hook secrets, or null (hooks then answer 503 and nothing is dispatched). */
  key(): Buffer | null {
    return this.judged().key;
  }

  /** Why hooks are unavailable, for the 503 message; null when the key is fine. */
  problem(): string | null {
    return this.judged().problem;
  }
}
