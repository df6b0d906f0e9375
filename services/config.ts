// The effective configuration on this worker: schema defaults ← the component's options in the
// host app's config.yaml ← runtime overrides from the replicated QueueConfigOverride table. Every worker
// subscribes to the override table, so a POST on any worker (or node) applies everywhere, and the row
// outlives restarts.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import {
  applyValues,
  changedPaths,
  checkPartial,
  CONFIG_KEYS,
  ConfigError,
  defaultConfig,
  mergePartials,
  type QueueKeeperConfig,
} from '../util/configSchema.js';
import { log, table, transaction, workerIndex } from './harper.js';

export const COMPONENT_KEY = 'queue-keeper';
const OVERRIDE_ID = 'overrides';

/** The component's own directory (this file compiles to dist/services/config.js). */
export const componentDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

type Listener = (next: QueueKeeperConfig, prev: QueueKeeperConfig, changed: string[]) => void;

let fileOptions: Record<string, unknown> = {};
let overrides: Record<string, unknown> = {};
let current: QueueKeeperConfig = defaultConfig();
const listeners: Listener[] = [];
const warnedUnknown = new Set<string>();

function warnUnknown(paths: string[], source: string): void {
  for (const p of paths) {
    if (warnedUnknown.has(p)) continue;
    warnedUnknown.add(p);
    // Worker 0 speaks for the node about file and stored options so the line appears once.
    if (source === 'request' || workerIndex() === 0 || workerIndex() === undefined)
      log.warn(`Unknown configuration key ${p} (from ${source}); ignored`);
  }
}

/** Keys of a host app's `queue-keeper:` section that tell Harper how to load the package; not ours. */
const HARPER_LOADING_KEYS = ['package', 'install'];

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

/** Computes the effective config from file options and overrides; bad values fall back with an error log. */
function compute(): QueueKeeperConfig {
  let cfg = defaultConfig();
  for (const [source, partial] of [
    ['config.yaml', fileOptions],
    ['stored overrides', overrides],
  ] as const) {
    try {
      const checked = checkPartial(partial);
      warnUnknown(checked.unknown, source);
      cfg = applyValues(cfg, checked.values);
    } catch (e) {
      if (e instanceof ConfigError)
        log.error(`invalid ${COMPONENT_KEY} configuration in ${source}: ${e.message}; ignoring that source`);
      else throw e;
    }
  }
  return cfg;
}

function setCurrent(next: QueueKeeperConfig): void {
  const prev = current;
  const changed = changedPaths(prev, next);
  current = next;
  if (changed.length === 0) return;
  for (const l of listeners) {
    try {
      l(next, prev, changed);
    } catch (e) {
      log.error('config listener failed', e);
    }
  }
}

export function config(): QueueKeeperConfig {
  return current;
}

export function onConfigChange(l: Listener): () => void {
  listeners.push(l);
  return () => {
    const i = listeners.indexOf(l);
    if (i >= 0) listeners.splice(i, 1);
  };
}

function overrideTable() {
  return table('render_queue', 'QueueConfigOverride');
}

async function readOverrides(): Promise<Record<string, unknown>> {
  const row = await overrideTable().get(OVERRIDE_ID);
  if (!row || typeof row.overrides !== 'string') return {};
  try {
    const v = JSON.parse(row.overrides) as unknown;
    return typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
  } catch {
    log.error('stored configuration overrides are not valid JSON; ignoring them');
    return {};
  }
}

let started = false;

/** Loads options and overrides, then follows the override table for changes made anywhere. */
export async function startConfig(): Promise<void> {
  if (started) return;
  started = true;
  fileOptions = loadFileOptions();
  overrides = await readOverrides();
  setCurrent(compute());
  void (async () => {
    for (;;) {
      try {
        const sub = await overrideTable().subscribe({ id: OVERRIDE_ID, omitCurrent: true });
        for await (const _ev of sub) {
          overrides = await readOverrides();
          setCurrent(compute());
        }
      } catch (e) {
        log.error('configuration override subscription failed; retrying in 5 s', e);
      }
      await new Promise((r) => setTimeout(r, 5000));
      overrides = await readOverrides();
      setCurrent(compute());
    }
  })();
}

export interface ConfigUpdate {
  config: QueueKeeperConfig;
  ignored: string[];
  restartRequired: string[];
}

/**
 * Validates a nested partial against the schema, persists it merged into the stored overrides, and
 * applies it here at once (other workers follow through their subscription). Throws ConfigError.
 */
export async function updateConfig(partial: unknown): Promise<ConfigUpdate> {
  const checked = checkPartial(partial);
  warnUnknown(checked.unknown, 'request');
  // Keep only known paths in what we store, so an ignored key is not resurrected later.
  const known: Record<string, unknown> = {};
  for (const [path, v] of checked.values) {
    const parts = path.split('.');
    let o = known;
    for (let i = 0; i < parts.length - 1; i++) o = (o[parts[i]!] ??= {}) as Record<string, unknown>;
    o[parts[parts.length - 1]!] = v;
  }
  const nextOverrides = mergePartials(await readOverrides(), known);
  // Validate the merged result as a whole before storing anything.
  const merged = applyValues(
    applyValues(defaultConfig(), checkPartial(fileOptions).values),
    checkPartial(nextOverrides).values,
  );
  await transaction(async (txn) => {
    await overrideTable().put(
      OVERRIDE_ID,
      { id: OVERRIDE_ID, overrides: JSON.stringify(nextOverrides), updatedAt: Date.now() },
      txn,
    );
  });
  overrides = nextOverrides;
  const prev = current;
  setCurrent(merged);
  const restartRequired = CONFIG_KEYS.filter((k) => k.effect === 'restart' && checked.values.has(k.path)).map(
    (k) => k.path,
  );
  void prev;
  return { config: merged, ignored: checked.unknown, restartRequired };
}

/** Test hook: replace the effective config without Harper (unit tests of services). */
export function setConfigForTests(cfg: QueueKeeperConfig): void {
  setCurrent(cfg);
}
