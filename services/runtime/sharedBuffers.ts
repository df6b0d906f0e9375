// Process-wide shared buffers (Harper's getUserSharedBuffer): every worker gets the same memory for a key
// from the node-local NodeLocal table's store. The first caller fixes a buffer's size, so a later caller
// asking for a different size gets the original; callers compare and log loudly. resources.ts builds the
// one SharedBuffers of its thread and hands it (or `get`) to what lays structures over the buffers.
import { log, table, workerIndex, type RawStore } from './harper.js';

export interface SharedBuffer {
  buffer: ArrayBuffer;
  /** Runs the listeners of this key on every thread (this one included). */
  notify: () => void;
  /** Runs `fn` on this thread whenever any thread notifies this key; answers the undo. */
  listen: (fn: () => void) => () => void;
}

/** This thread's handles on the node's shared buffers, and the registry of workers that loaded. */
export class SharedBuffers {
  private store: RawStore | undefined;
  /** This thread's handle on each shared buffer it has obtained, by key. */
  private readonly obtained = new Map<string, SharedBuffer>();

  private localStore(): RawStore {
    this.store ??= table('queue_local', 'NodeLocal').primaryStore;
    return this.store;
  }

  /**
   * The shared buffer for `key`, at least `bytes` long if this process is the first to ask. Harper runs a
   * buffer's callback on every thread when any thread calls notify(); each registration adds another
   * callback, so a thread registers one (on its first listen) that runs this thread's listeners.
   */
  get(key: string, bytes: number): SharedBuffer {
    const have = this.obtained.get(key);
    if (have) return have;
    const name = `queue-keeper:${key}`;
    const store = this.localStore();
    const buf = store.getUserSharedBuffer(name, new ArrayBuffer(bytes));
    if (buf.byteLength !== bytes)
      log.warn(
        `shared buffer ${key} keeps its first size ${buf.byteLength} bytes; ${bytes} were asked for (a restart-only setting changed?)`,
      );
    const listeners = new Set<() => void>();
    let registered = false;
    const sb: SharedBuffer = {
      buffer: buf,
      notify: () => buf.notify?.(),
      listen: (fn) => {
        if (!registered) {
          registered = true;
          store.getUserSharedBuffer(name, new ArrayBuffer(bytes), {
            callback: () => {
              for (const l of listeners) l();
            },
          });
        }
        const own = () => fn();
        listeners.add(own);
        return () => listeners.delete(own);
      },
    };
    this.obtained.set(key, sb);
    return sb;
  }

  // Worker registry: bit i set once worker i has loaded the component (readiness for tests and health).
  private registry(): Int32Array {
    return new Int32Array(this.get('workers', 64).buffer);
  }

  registerWorker(): void {
    const i = workerIndex();
    if (i === undefined || i > 30) return;
    Atomics.or(this.registry(), 0, 1 << i);
  }

  workersReady(): number {
    let bits = Atomics.load(this.registry(), 0);
    let n = 0;
    while (bits) {
      n += bits & 1;
      bits >>>= 1;
    }
    return n;
  }
}
