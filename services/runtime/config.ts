// The effective configuration on this worker: schema defaults ← the component's options in the
// host app's config.yaml ← runtime overrides from the replicated QueueConfigOverride table. Every worker
// subscribes to the override table, so a POST on any worker (or node) applies everywhere, and the row
// outlives restarts. The state lives on the one RuntimeConfig resources.ts builds per worker, which hands
// `current` (or a narrower getter) to every service and route module that reads a setting.
import { existsSync, readFileSync } from 'node:fs';
import { join, sep } from 'node:path';
import { componentDir } from './componentDir.js';
import { parse as parseYaml } from 'yaml';
import { leaseLimitsProblem } from '../../util/config/leaseLimits.js';
import {
  applyValues,
  changedPaths,
  checkPartial,
  CONFIG_KEYS,
  configWarnings,
  defaultConfig,
  mergePartials,
  type QueueKeeperConfig,
} from '../../util/config/schema.js';
import type { DutyScheduler } from '../../util/duties/scheduler.js';
import { quotedCut } from '../../util/text.js';
import { log, table, transaction, workerIndex } from './harper.js';
import { withStoreLock } from './storeLock.js';
import { TableFollower, type TableSubscription } from './tableFollower.js';

export const COMPONENT_KEY = 'queue-keeper';
const OVERRIDE_ID = 'overrides';

export { componentDir } from './componentDir.js';

export type ConfigListener = (next: QueueKeeperConfig, prev: QueueKeeperConfig, changed: string[]) => void;

// Unknown keys come from callers: the set that makes each warning appear once is bounded, and a key is
// logged as a bounded JSON string, so neither memory nor the log follows what a caller sends.
const MAX_WARNED_UNKNOWN = 1000;
const MAX_LOGGED_KEY_CHARS = 200;
/** A closed or refused override subscription is opened again after this wait. */
export const CONFIG_RESUBSCRIBE_MS = 5000;

/**
 * A caller's key fit for a log line: as is when it is plain (letters, digits, `_.-[]`, at most 200),
 * otherwise cut to 200 characters and JSON-quoted, so no newline can forge a line.
 */
export function loggableKey(path: string): string {
  if (path.length <= MAX_LOGGED_KEY_CHARS && /^[\w.[\]-]+$/.test(path)) return path;
  return quotedCut(path, MAX_LOGGED_KEY_CHARS);
}

/** Keys of a host app's `queue-keeper:` section that tell Harper how to load the package; not ours. */
const HARPER_LOADING_KEYS: readonly string[] = ['package', 'install'];

function readYamlSection(file: string): Record<string, unknown> {
  if (!existsSync(file)) return {};
  const doc = parseYaml(readFileSync(file, 'utf8')) as Record<string, unknown> | null;
  const section = doc?.[COMPONENT_KEY];
  if (typeof section !== 'object' || section === null) return {};
  return Object.fromEntries(
    Object.entries(section as Record<string, unknown>).filter(([k]) => !HARPER_LOADING_KEYS.includes(k)),
  );
}

/**
 * Options come from our own config.yaml and, when queue-keeper is installed as a package inside a host
 * app (…/app/node_modules/queue-keeper), from the app's config.yaml, which wins.
 */
export function loadFileOptions(dir = componentDir): Record<string, unknown> {
  let opts = readYamlSection(join(dir, 'config.yaml'));
  const marker = `${sep}node_modules${sep}`;
  const at = dir.lastIndexOf(marker);
  if (at >= 0) opts = mergePartials(opts, readYamlSection(join(dir.slice(0, at), 'config.yaml')));
  return opts;
}

function overrideTable() {
  return table('render_queue', 'QueueConfigOverride');
}

/* eslint-disable @typescript-eslint/no-explicit-any */
async function readOverrides(txn?: any): Promise<Record<string, unknown>> {
  const row = await overrideTable().get(OVERRIDE_ID, txn);
  if (!row || typeof row.overrides !== 'string') return {};
  try {
    const v = JSON.parse(row.overrides) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    log.error('stored configuration overrides are not valid JSON; ignoring them');
    return {};
  }
}
/* eslint-enable @typescript-eslint/no-explicit-any */

export interface ConfigUpdate {
  config: QueueKeeperConfig;
  /** Unknown paths of the request, at most MAX_REPORTED_IGNORED of them. */
  ignored: string[];
  /** How many unknown paths the request had in all. */
  ignoredCount: number;
  restartRequired: string[];
}

/** The answer names this many ignored keys at most (their total count is always given). */
export const MAX_REPORTED_IGNORED = 20;

// Read-modify-write of the one override row runs under a process-wide lmdb lock, so two
// POSTs on different keys through two workers both land; without it the later put carries the earlier
// snapshot and drops the other's key. Nodes of a cluster still race each other (last writer wins).
const OVERRIDE_LOCK = 'config:overrides';
const OVERRIDE_LOCK_WAIT_MS = 10_000;

/** Nested partial from flattened known paths. */
function nest(values: Map<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [path, v] of values) {
    const parts = path.split('.');
    let o = out;
    for (let i = 0; i < parts.length - 1; i++) o = (o[parts[i]!] ??= {}) as Record<string, unknown>;
    o[parts[parts.length - 1]!] = v;
  }
  return out;
}

export interface RuntimeConfigDeps {
  /** Runs the resubscribe duty. */
  scheduler: DutyScheduler;
  /**
   * Awaited inside an update's store lock, between reading the override row and writing it. Absent in
   * production; the composition root hands one in only when its environment asks for a hold, so a test
   * can overlap two updates deterministically (docs/development.md).
   */
  holdInsideUpdate?: () => Promise<void>;
  /**
   * True the first time any worker of this node asks about a text (util/config/warnedOnce.ts over a
   * shared buffer), so a warning appears once per node, not once per worker. Without it, worker 0 speaks
   * for stored sources and the worker that took the request for a request.
   */
  firstWarning?: (text: string) => boolean;
}

/**
 * This worker's effective configuration: the file options, the stored overrides, the listeners, and the
 * subscription that follows the override table (reopened CONFIG_RESUBSCRIBE_MS after it closes).
 */
export class RuntimeConfig {
  private fileOptions: Record<string, unknown> = {};
  private overrides: Record<string, unknown> = {};
  private currentConfig: QueueKeeperConfig = defaultConfig();
  private readonly listeners: ConfigListener[] = [];
  private readonly warnedUnknown = new Set<string>();
  private warnedOverflow = false;
  private readonly warnedSettings = new Set<string>();
  private started = false;
  private readonly follower: TableFollower<unknown>;

  constructor(private readonly deps: RuntimeConfigDeps) {
    this.follower = new TableFollower<unknown>({
      name: 'configuration override',
      scheduler: deps.scheduler,
      retryMs: CONFIG_RESUBSCRIBE_MS,
      reload: () => this.reload(),
      subscribe: async () =>
        (await overrideTable().subscribe({
          id: OVERRIDE_ID,
          omitCurrent: true,
        })) as TableSubscription<unknown>,
      // Any event on the row: read it whole again (the event's value is the stored JSON string).
      onEvent: () => this.reload(),
      log,
    });
  }

  private async reload(): Promise<void> {
    this.overrides = await readOverrides();
    this.setCurrent(this.compute());
  }

  current(): QueueKeeperConfig {
    return this.currentConfig;
  }

  /** Calls `l` after every change with the changed schema paths; answers the unsubscribe function. */
  onChange(l: ConfigListener): () => void {
    this.listeners.push(l);
    return () => {
      const i = this.listeners.indexOf(l);
      if (i >= 0) this.listeners.splice(i, 1);
    };
  }

  /** Loads options and overrides, then follows the override table for changes made anywhere. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    this.fileOptions = loadFileOptions();
    await this.follower.start();
  }

  /** Closes the subscription and stops the resubscribe duty. */
  async stop(): Promise<void> {
    await this.follower.stop();
  }

  private warnUnknown(paths: string[], source: string): void {
    for (const p of paths) {
      if (this.warnedUnknown.has(p)) continue;
      if (this.warnedUnknown.size >= MAX_WARNED_UNKNOWN) {
        if (!this.warnedOverflow && this.firstOnNode('\u0000overflow', source))
          log.warn(
            `Unknown configuration keys keep arriving (from ${source}); ${MAX_WARNED_UNKNOWN} named so far, no more are logged`,
          );
        this.warnedOverflow = true;
        return;
      }
      this.warnedUnknown.add(p);
      if (this.firstOnNode(p, source))
        log.warn(`Unknown configuration key ${loggableKey(p)} (from ${source}); ignored`);
    }
  }

  /** Logs each configWarnings entry once per node while it holds. */
  private warnSettings(cfg: QueueKeeperConfig): void {
    for (const w of configWarnings(cfg)) {
      if (this.warnedSettings.has(w)) continue;
      this.warnedSettings.add(w);
      if (this.firstOnNode(w, 'config')) log.warn(`configuration: ${w}`);
    }
  }

  /** Whether this worker is the one to log `text` for the node. */
  private firstOnNode(text: string, source: string): boolean {
    if (this.deps.firstWarning) return this.deps.firstWarning(text);
    // Worker 0 speaks for the node about file and stored options, which every worker reads.
    return source === 'request' || workerIndex() === 0 || workerIndex() === undefined;
  }

  /**
   * The checked values of a stored source (config.yaml or the override row). A bad value there is logged
   * and drops only that key, which then keeps its lower layer's value: one hand-edited or legacy entry
   * (say a `notify.allowCidrs` of "10.0.0.0/40" stored before it was checked) cannot break hooks or take
   * the source's other settings with it.
   */
  private storedValues(partial: unknown, source: string): Map<string, unknown> {
    const checked = checkPartial(partial, { lenient: true });
    this.warnUnknown(checked.unknown, source);
    for (const e of checked.errors)
      log.error(`invalid ${COMPONENT_KEY} configuration in ${source}: ${e.message}; ignoring that key`);
    return checked.values;
  }

  /** Computes the effective config from file options and overrides. */
  private compute(): QueueKeeperConfig {
    const cfg = applyValues(
      applyValues(defaultConfig(), this.storedValues(this.fileOptions, 'config.yaml')),
      this.storedValues(this.overrides, 'stored overrides'),
    );
    // Stored sources that disagree (one layer's jobLeaseTime raised past another's maxLeaseTime) keep the
    // node running on the derived limit rather than refusing every lease extension or failing to start.
    const conflict = leaseLimitsProblem(cfg.queue);
    if (conflict === null) return cfg;
    log.error(`invalid ${COMPONENT_KEY} configuration: ${conflict.message}; using its default instead`);
    return { ...cfg, queue: { ...cfg.queue, maxLeaseTime: null } };
  }

  private setCurrent(next: QueueKeeperConfig): void {
    const prev = this.currentConfig;
    const changed = changedPaths(prev, next);
    this.currentConfig = next;
    if (changed.length === 0) return;
    this.warnSettings(next);
    for (const l of this.listeners) {
      try {
        l(next, prev, changed);
      } catch (e) {
        log.error('config listener failed', e);
      }
    }
  }

  /**
   * Validates a nested partial against the schema, persists it merged into the stored overrides, and
   * applies it here at once (other workers follow through their subscription). Throws ConfigError before
   * anything is written; the read, merge and write of the override row are one atomic step per process.
   */
  async update(partial: unknown): Promise<ConfigUpdate> {
    const checked = checkPartial(partial);
    // Keep only known paths in what we store, so an ignored key is not resurrected later.
    const known = nest(checked.values);
    const fileValues = checkPartial(this.fileOptions, { lenient: true }).values;
    const r = await withStoreLock(
      overrideTable().primaryStore,
      'QueueConfigOverride',
      OVERRIDE_LOCK,
      OVERRIDE_LOCK_WAIT_MS,
      () =>
        transaction(async (txn) => {
          // Stored keys that no longer validate are dropped here rather than failing every later update.
          const stored = nest(checkPartial(await readOverrides(txn), { lenient: true }).values);
          if (this.deps.holdInsideUpdate) await this.deps.holdInsideUpdate();
          const nextOverrides = mergePartials(stored, known);
          // Validate the merged result as a whole before storing anything.
          const merged = applyValues(
            applyValues(defaultConfig(), fileValues),
            checkPartial(nextOverrides).values,
          );
          const conflict = leaseLimitsProblem(merged.queue);
          if (conflict !== null) throw conflict;
          await overrideTable().put(
            OVERRIDE_ID,
            { id: OVERRIDE_ID, overrides: JSON.stringify(nextOverrides), updatedAt: Date.now() },
            txn,
          );
          return { nextOverrides, merged };
        }),
    );
    if (!r.locked) throw new Error(`configuration: lock not free after ${OVERRIDE_LOCK_WAIT_MS} ms`);
    const { nextOverrides, merged } = r.value;
    this.warnUnknown(checked.unknown, 'request');
    this.overrides = nextOverrides;
    this.setCurrent(merged);
    const restartRequired = CONFIG_KEYS.filter(
      (k) => k.effect === 'restart' && checked.values.has(k.path),
    ).map((k) => k.path);
    return {
      config: merged,
      ignored: checked.unknown.slice(0, MAX_REPORTED_IGNORED),
      ignoredCount: checked.unknown.length,
      restartRequired,
    };
  }
}
