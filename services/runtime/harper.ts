// Typed wrappers for the parts of the harperdb 4.7.29 runtime we use. The shipped typings have gaps
// (workerIndex, transaction, threads; logger methods optional) and `import { transaction }` throws in
// ESM, so everything comes through the default export here and nowhere else.
import type { IncomingMessage } from 'node:http';
import harperdb from 'harperdb';

// Every member is `unknown` until a typed export below says what we rely on of it.
const runtime = harperdb as unknown as {
  /** The transaction handle is opaque to us: it is only ever passed back to table calls. */
  transaction: {
    <T>(fn: (txn: unknown) => T | Promise<T>): Promise<T>;
    <T>(context: { timestamp: number }, fn: (txn: unknown) => T | Promise<T>): Promise<T>;
  };
  server: unknown;
  databases: Record<string, Record<string, unknown>>;
  logger?: { withTag?: (tag: string) => unknown };
  threads?: unknown;
};

export interface HarperTable {
  get(id: string, txn?: unknown): Promise<Record<string, unknown> | undefined>;
  put(id: string, record: Record<string, unknown>, txn?: unknown): Promise<void>;
  patch(id: string, record: Record<string, unknown>, txn?: unknown): Promise<void>;
  delete(id: string, txn?: unknown): Promise<boolean>;
  search(query: Record<string, unknown>, txn?: unknown): AsyncIterable<Record<string, unknown>>;
  subscribe(
    opts: Record<string, unknown>,
  ): Promise<AsyncIterable<SubscriptionEvent> & { end?: () => void; return?: () => void }>;
  publish?(id: string, msg: unknown): Promise<void>;
  primaryStore: RawStore;
}

export interface RawStore {
  get(key: string): unknown;
  /** The stored entry: the version (its transaction's time, the same on every node) and the value. */
  getEntry?(key: string): { version?: number; value?: unknown } | undefined;
  getRange(opts: Record<string, unknown>): Iterable<{ key: unknown; value: unknown }>;
  getKeys(opts: Record<string, unknown>): Iterable<unknown>;
  getUserSharedBuffer(
    key: string,
    init: ArrayBuffer,
    opts?: { callback?: () => void },
  ): ArrayBuffer & { notify?: () => void };
  attemptLock?(key: string, version: number, cb: () => void): boolean;
  unlock?(key: string, version: number): boolean;
  resetReadTxn?(): void;
}

export interface SubscriptionEvent {
  id: string;
  type: string;
  value?: Record<string, unknown>;
  version?: number;
  localTime?: number;
}

export interface HarperUser {
  username?: string;
  role?: { role?: string; permission?: { super_user?: boolean } };
}

/** What our middleware reads of Harper's request; the rest goes on untouched through `next`. */
export interface HarperHttpRequest {
  url?: string;
  method?: string;
  headers?: { get?(name: string): string | null | undefined };
  user?: HarperUser | null;
  _nodeRequest: IncomingMessage;
}

/** A response on Harper's middleware chain: a status object whose headers Harper's auth layer may set. */
export interface HarperHttpResponse {
  status?: number;
  headers?: Headers;
  body?: unknown;
}

export type HarperMiddleware = (
  request: HarperHttpRequest,
  next: (request: HarperHttpRequest) => Promise<HarperHttpResponse | undefined>,
) => Promise<HarperHttpResponse | undefined>;

export const transaction = <T>(fn: (txn: unknown) => T | Promise<T>): Promise<T> => runtime.transaction(fn);
/**
 * A transaction stamped with `timestamp` instead of the clock (Harper takes the context's timestamp as
 * the transaction's time, as replication does): its writes carry that version, and a node holding a
 * newer version of a record keeps its own. Only replica repair uses it, always with a version read from
 * a stored record, never a clock reading.
 */
export const transactionAt = <T>(timestamp: number, fn: (txn: unknown) => T | Promise<T>): Promise<T> =>
  runtime.transaction({ timestamp }, fn);
export const server = runtime.server as {
  workerIndex?: number;
  workerCount?: number;
  config?: unknown;
  hostname?: string;
  http: (fn: HarperMiddleware, opts?: Record<string, unknown>) => void;
  recordAnalytics?: (value: number, metric: string, path?: string, method?: string, type?: string) => void;
  /** Runs an operations-API operation in-process (services/cluster/connections.ts reads cluster_status). */
  operation?: (
    operation: Record<string, unknown>,
    context?: unknown,
    authorize?: boolean,
  ) => Promise<unknown>;
};

export function table(database: string, name: string): HarperTable {
  const t = runtime.databases[database]?.[name];
  if (!t) throw new Error(`table ${database}.${name} is not defined; is schema.graphql loaded?`);
  return t as HarperTable;
}

type LogFn = (...args: unknown[]) => void;
const base = runtime.logger;
const tagged = (typeof base?.withTag === 'function' ? base.withTag('queue-keeper') : base) as Record<
  string,
  LogFn | undefined
>;
export const log = {
  debug: (...a: unknown[]) => tagged.debug?.(...a),
  info: (...a: unknown[]) => tagged.info?.(...a),
  warn: (...a: unknown[]) => tagged.warn?.(...a),
  error: (...a: unknown[]) => tagged.error?.(...a),
};

export function workerIndex(): number | undefined {
  return server.workerIndex;
}

export interface ThreadPorts extends Array<{ postMessage(msg: unknown): void; threadId?: number }> {
  /** `M` is the shape the listener expects of its message type; nothing checks it on the way in. */
  onMessageByType?<M>(type: string, fn: (msg: M, port?: { postMessage(msg: unknown): void }) => void): void;
}

/** MessagePorts to the other threads of this process (Harper's `threads`); empty outside Harper. */
export function threads(): ThreadPorts {
  return (runtime.threads ?? (globalThis as { threads?: unknown }).threads ?? []) as ThreadPorts;
}
