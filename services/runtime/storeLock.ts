// A process-wide lock on an lmdb store key (lmdb-js, under Harper's table store): attemptLock, then a fresh
// read snapshot, then the caller's transaction, committed before unlock. Harper has no compare-and-set and
// its transactions re-apply a conflicting write instead of re-running the callback, so read-decide-write
// sequences that must not interleave (a stall charge, a hook's health write against a rotate) run under this.
// It spans the worker threads of one process — and so a briefly overlapping second worker 0 — not other
// nodes.
import type { RawStore } from './harper.js';

type LockingStore = RawStore & Required<Pick<RawStore, 'attemptLock' | 'unlock' | 'resetReadTxn'>>;

function locking(store: RawStore, what: string): LockingStore {
  if (!store.attemptLock || !store.unlock || !store.resetReadTxn)
    // Without the lock these writes are plain read-then-write; refuse loudly rather than race quietly.
    throw new Error(`the ${what} store has no lmdb lock (Harper 4.7 / lmdb is required)`);
  return store as LockingStore;
}

function acquire(store: LockingStore, key: string, deadline: number): Promise<boolean> {
  return new Promise((resolve) => {
    const attempt = (): void => {
      let settled = false;
      // A per-call deadline, cleared when the lock comes, kept local like a request timeout (and ref'd, so
      // a caller awaiting the lock keeps the process up); nothing repeats here.
      const timer = setTimeout(
        () => {
          settled = true;
          resolve(false);
        },
        Math.max(0, deadline - Date.now()),
      );
      // The callback runs once the holder unlocks; then we race for the lock again.
      const got = store.attemptLock(key, 0, () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        attempt();
      });
      if (got) {
        settled = true;
        clearTimeout(timer);
        resolve(true);
      }
    };
    attempt();
  });
}

/**
 * Runs `fn` holding `key`'s lock after refreshing this thread's read snapshot, so `fn` sees every commit
 * made before the lock was ours. `fn` must commit its own transaction before it returns. A holder that
 * died mid-section leaves an lmdb lock held for the life of the process, so waiting gives up after
 * `waitMs`: the answer is then `{ locked: false }` and nothing ran.
 */
export async function withStoreLock<T>(
  store: RawStore,
  what: string,
  key: string,
  waitMs: number,
  fn: () => Promise<T>,
): Promise<{ locked: true; value: T } | { locked: false }> {
  const s = locking(store, what);
  if (!(await acquire(s, key, Date.now() + waitMs))) return { locked: false };
  try {
    s.resetReadTxn();
    return { locked: true, value: await fn() };
  } finally {
    s.unlock(key, 0);
  }
}

/**
 * Runs `fn` holding the locks of every key in `keys` (per-key atomic read-modify-write):
 * distinct keys are locked in one global order, so two callers never hold one key each while waiting
 * for the other's; then this thread's read snapshot is refreshed and `fn` runs (committing before it
 * returns). A key still locked after `waitMs` (its holder died mid-section, or a very long write) gives
 * up: every lock taken so far is released and the answer is `{ locked: false }` with nothing run.
 */
export async function withKeyLocks<T>(
  store: RawStore,
  what: string,
  keys: readonly string[],
  waitMs: number,
  fn: () => Promise<T>,
): Promise<{ locked: true; value: T } | { locked: false }> {
  const s = locking(store, what);
  const ordered = [...new Set(keys)].sort();
  const deadline = Date.now() + waitMs;
  const held: string[] = [];
  try {
    for (const key of ordered) {
      // Uncontended keys are taken without a promise; only a held key waits for its unlock callback.
      if (!s.attemptLock(key, 0, noop)) {
        if (!(await acquire(s, key, deadline))) return { locked: false };
      }
      held.push(key);
    }
    s.resetReadTxn();
    return { locked: true, value: await fn() };
  } finally {
    for (const key of held) s.unlock(key, 0);
  }
}

const noop = (): void => undefined;
