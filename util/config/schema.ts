// The one configuration schema (SPEC §8): every key with its default, range and effect. Validation,
// defaults, the README table and the "unknown key" warning all come from this list.
import { parseAllowList } from '../notify/addressPolicy.js';
import { MAX_QUEUE_NAME_CHARS, QUEUE_NAME } from '../notify/wakeBody.js';

/** What a change to the key does at runtime. */
export type ConfigEffect = 'live' | 'timers' | 'reclassify' | 'restart';

type Kind = 'int' | 'number' | 'boolean' | 'roles' | 'durations' | 'routes' | 'cidrs';

export interface ConfigKey {
  path: string;
  kind: Kind;
  default: unknown;
  min?: number;
  max?: number;
  /** 0 is allowed besides the range (e.g. verifyInterval: 0 = off). */
  zeroAllowed?: boolean;
  effect: ConfigEffect;
  description: string;
}

export interface RouteConfig {
  name: string;
  match: 'exact' | 'prefix';
  path: string;
  renderInterval?: number;
}

export interface QueueKeeperConfig {
  queue: {
    keeper: { publishInterval: number; stateInterval: number; verifyInterval: number };
    ready: { capacity: number; sitemapBoost: number; urgentHeadStart: number; changedHeadStart: number };
    jobLeaseTime: number;
    maxClaimLimit: number;
    maxLeases: number;
    statusSyncInterval: number;
    fleetRoles: string[];
    feederRoles: string[];
    discoverRoles: string[];
  };
  render: {
    defaultInterval: number;
    routes: RouteConfig[];
    failureRetry: {
      fastRetries: number;
      backoffFactor: number;
      maxBackoff: number;
      nonSitemapPenalty: number;
    };
    maxBodyBytes: number;
    maxBatchBytes: number;
  };
  notify: {
    allowHttp: boolean;
    allowCidrs: string[];
    attemptTimeout: number;
    maxAttempts: number;
    maxHooksPerFleet: number;
    disableAfterFailures: number;
    ratePerMinute: number;
    edgeCooldown: number;
  };
  stall: { after: number; backoff: number[]; maxNudges: number; sweepLimit: number };
  maintenance: { tickInterval: number };
}

const MINUTE = 60_000;
const DAY = 86_400_000;

export const CONFIG_KEYS: readonly ConfigKey[] = [
  {
    path: 'queue.keeper.publishInterval',
    kind: 'int',
    default: 1000,
    min: 100,
    max: 60000,
    effect: 'timers',
    description: 'How often worker 0 publishes the ready set and heartbeat (ms).',
  },
  {
    path: 'queue.keeper.stateInterval',
    kind: 'int',
    default: 5000,
    min: 1000,
    max: 600000,
    effect: 'timers',
    description: 'How often the queue-state document is recomputed (ms).',
  },
  {
    path: 'queue.keeper.verifyInterval',
    kind: 'int',
    default: 3600000,
    min: 10000,
    max: 7 * DAY,
    zeroAllowed: true,
    effect: 'timers',
    description: 'Verification walk period (ms); 0 turns it off.',
  },
  {
    path: 'queue.ready.capacity',
    kind: 'int',
    default: 5000,
    min: 1,
    max: 100000,
    effect: 'restart',
    description: 'Rows in one published ready set; fixed at first allocation.',
  },
  {
    path: 'queue.ready.sitemapBoost',
    kind: 'number',
    default: 2,
    min: 1,
    max: 1000,
    effect: 'reclassify',
    description: 'Score multiplier for sitemap rows.',
  },
  {
    path: 'queue.ready.urgentHeadStart',
    kind: 'number',
    default: 1,
    min: 0,
    max: 1000,
    effect: 'reclassify',
    description: 'Score head start (in cadences) of an urgent row.',
  },
  {
    path: 'queue.ready.changedHeadStart',
    kind: 'number',
    default: 1,
    min: 0,
    max: 1000,
    effect: 'reclassify',
    description: 'Score head start (in cadences) of a changed row.',
  },
  {
    path: 'queue.jobLeaseTime',
    kind: 'int',
    default: 600000,
    min: 5000,
    max: DAY,
    effect: 'live',
    description: 'Lease length of a claimed job (ms).',
  },
  {
    path: 'queue.maxClaimLimit',
    kind: 'int',
    default: 25,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Largest claim; bigger limits are clamped.',
  },
  {
    path: 'queue.maxLeases',
    kind: 'int',
    default: 4096,
    min: 64,
    max: 1048576,
    effect: 'restart',
    description: 'Lease table slots; fixed at first allocation.',
  },
  {
    path: 'queue.statusSyncInterval',
    kind: 'int',
    default: 60000,
    min: 250,
    max: 600000,
    effect: 'timers',
    description: 'Status sync and lease-gauge reconcile period (ms).',
  },
  {
    path: 'queue.fleetRoles',
    kind: 'roles',
    default: ['render_fleet'],
    effect: 'live',
    description: 'Roles that may claim and report.',
  },
  {
    path: 'queue.feederRoles',
    kind: 'roles',
    default: ['render_feeder'],
    effect: 'live',
    description: 'Roles that may file and delete targets.',
  },
  {
    path: 'queue.discoverRoles',
    kind: 'roles',
    default: ['render_discover'],
    effect: 'live',
    description: 'Roles that may file unverified URLs.',
  },
  {
    path: 'render.defaultInterval',
    kind: 'int',
    default: DAY,
    min: MINUTE,
    max: 365 * DAY,
    effect: 'reclassify',
    description: 'Cadence when neither a route nor the row gives one (ms).',
  },
  {
    path: 'render.routes',
    kind: 'routes',
    default: [],
    effect: 'reclassify',
    description:
      'Routes `{name, match: exact|prefix, path, renderInterval?}`, first match wins; the name is the queue.',
  },
  {
    path: 'render.failureRetry.fastRetries',
    kind: 'int',
    default: 2,
    min: 0,
    max: 100,
    effect: 'live',
    description: 'Failures retried on the lease alone before backoff.',
  },
  {
    path: 'render.failureRetry.backoffFactor',
    kind: 'number',
    default: 2,
    min: 1,
    max: 100,
    effect: 'live',
    description: 'Backoff growth per failure.',
  },
  {
    path: 'render.failureRetry.maxBackoff',
    kind: 'int',
    default: 7 * DAY,
    min: MINUTE,
    max: 365 * DAY,
    effect: 'live',
    description: 'Longest backoff (ms); never below the cadence.',
  },
  {
    path: 'render.failureRetry.nonSitemapPenalty',
    kind: 'number',
    default: 4,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Extra backoff factor for non-sitemap rows once k > 0.',
  },
  {
    path: 'render.maxBodyBytes',
    kind: 'int',
    default: 5242880,
    min: 1024,
    max: 64 * 1048576,
    effect: 'live',
    description: 'Largest stored page body (bytes); larger results are 413.',
  },
  {
    path: 'render.maxBatchBytes',
    kind: 'int',
    default: 64 * 1048576,
    min: 1048576,
    max: 256 * 1048576,
    effect: 'live',
    description:
      'Largest whole request body of `job_results` and `next` (bytes), checked before buffering; larger is 413.',
  },
  {
    path: 'notify.allowHttp',
    kind: 'boolean',
    default: false,
    effect: 'live',
    description: 'Allow plain-http hook URLs.',
  },
  {
    path: 'notify.allowCidrs',
    kind: 'cidrs',
    default: [],
    effect: 'live',
    description:
      'Addresses or CIDRs hooks may reach; only exact entries open loopback, link-local or this server.',
  },
  {
    path: 'notify.attemptTimeout',
    kind: 'int',
    default: 5000,
    min: 100,
    max: 60000,
    effect: 'live',
    description: 'Time limit of one delivery attempt (ms).',
  },
  {
    path: 'notify.maxAttempts',
    kind: 'int',
    default: 3,
    min: 1,
    max: 10,
    effect: 'live',
    description: 'Attempts per delivery.',
  },
  {
    path: 'notify.maxHooksPerFleet',
    kind: 'int',
    default: 5,
    min: 0,
    max: 100,
    effect: 'live',
    description: 'Hooks per fleet; 0 is a kill switch: no hooks created, nothing sent.',
  },
  {
    path: 'notify.disableAfterFailures',
    kind: 'int',
    default: 10,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Failed deliveries in a row that auto-disable a hook.',
  },
  {
    path: 'notify.ratePerMinute',
    kind: 'int',
    default: 120,
    min: 1,
    max: 100000,
    effect: 'live',
    description: 'Deliveries per minute per hook.',
  },
  {
    path: 'notify.edgeCooldown',
    kind: 'int',
    default: 60000,
    min: 1000,
    max: 3600000,
    effect: 'live',
    description: 'Pacing of created/requeued wakes per queue (ms).',
  },
  {
    path: 'stall.after',
    kind: 'int',
    default: 120000,
    min: 1000,
    max: 7 * DAY,
    effect: 'live',
    description: 'Age of the oldest due row before a queue counts as stalled (ms).',
  },
  {
    path: 'stall.backoff',
    kind: 'durations',
    default: [300000, 1200000, 3600000, 21600000],
    min: 1000,
    max: 7 * DAY,
    effect: 'live',
    description: 'Waits between nudges of one pair (ms); the last step repeats.',
  },
  {
    path: 'stall.maxNudges',
    kind: 'int',
    default: 5,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Nudges without progress before a pair goes quiet.',
  },
  {
    path: 'stall.sweepLimit',
    kind: 'int',
    default: 4,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Pairs nudged per tick at most, least-nudged first.',
  },
  {
    path: 'maintenance.tickInterval',
    kind: 'int',
    default: 30000,
    min: 250,
    max: 600000,
    effect: 'timers',
    description: "Worker 0's maintenance tick (stall sweep, secret cleanup, page sweep) (ms).",
  },
];

const KEY_BY_PATH = new Map(CONFIG_KEYS.map((k) => [k.path, k]));

function clone<T>(v: T): T {
  return v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T);
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.split('.');
  let obj = target;
  for (let i = 0; i < parts.length - 1; i++) {
    const p = parts[i]!;
    if (typeof obj[p] !== 'object' || obj[p] === null) obj[p] = {};
    obj = obj[p] as Record<string, unknown>;
  }
  obj[parts[parts.length - 1]!] = value;
}

export function getPath(source: unknown, path: string): unknown {
  let obj = source;
  for (const p of path.split('.')) {
    if (typeof obj !== 'object' || obj === null) return undefined;
    obj = (obj as Record<string, unknown>)[p];
  }
  return obj;
}

export function defaultConfig(): QueueKeeperConfig {
  const out: Record<string, unknown> = {};
  for (const k of CONFIG_KEYS) setPath(out, k.path, clone(k.default));
  return out as unknown as QueueKeeperConfig;
}

export class ConfigError extends Error {
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(message);
  }
}

function checkRange(k: ConfigKey, n: number, label = k.path): void {
  if (k.zeroAllowed && n === 0) return;
  if (k.min !== undefined && n < k.min)
    throw new ConfigError(label, `${label} must be at least ${k.min}${k.zeroAllowed ? ' (or 0)' : ''}`);
  if (k.max !== undefined && n > k.max) throw new ConfigError(label, `${label} must be at most ${k.max}`);
}

const ROUTE_FIELDS = new Set(['name', 'match', 'path', 'renderInterval']);
/** Role names, CIDR entries and routes are lists an operator types; these bounds only stop abuse. */
const MAX_LIST = 1000;
const MAX_ROUTE_PATH_CHARS = 1900;

/** Checks one value against its key; returns the normalised value or throws ConfigError naming the key. */
function checkValue(k: ConfigKey, v: unknown): unknown {
  switch (k.kind) {
    case 'int':
    case 'number': {
      if (typeof v !== 'number' || !Number.isFinite(v))
        throw new ConfigError(k.path, `${k.path} must be a number`);
      if (k.kind === 'int' && !Number.isInteger(v))
        throw new ConfigError(k.path, `${k.path} must be an integer`);
      checkRange(k, v);
      return v;
    }
    case 'boolean':
      if (typeof v !== 'boolean') throw new ConfigError(k.path, `${k.path} must be true or false`);
      return v;
    case 'roles':
      if (
        !Array.isArray(v) ||
        v.length > MAX_LIST ||
        v.some((r) => typeof r !== 'string' || r.length === 0 || r.length > 200)
      )
        throw new ConfigError(k.path, `${k.path} must be an array of role names`);
      return [...(v as string[])];
    case 'cidrs': {
      if (!Array.isArray(v) || v.length > MAX_LIST)
        throw new ConfigError(k.path, `${k.path} must be an array of addresses or CIDR blocks`);
      // The transport's own parser decides, so a value stored here can never fail there.
      v.forEach((r: unknown, i) => {
        const bad = () =>
          new ConfigError(
            k.path,
            `${k.path}[${i}] must be an IPv4 or IPv6 address, bare or with a prefix length (e.g. 10.0.0.0/8)`,
          );
        if (typeof r !== 'string' || r.length > 100) throw bad();
        try {
          parseAllowList([r]);
        } catch {
          throw bad();
        }
      });
      return [...(v as string[])];
    }
    case 'durations': {
      if (!Array.isArray(v) || v.length === 0 || v.length > 32)
        throw new ConfigError(k.path, `${k.path} must be a non-empty array of durations in ms`);
      v.forEach((d: unknown, i) => {
        if (typeof d !== 'number' || !Number.isInteger(d))
          throw new ConfigError(`${k.path}[${i}]`, `${k.path}[${i}] must be an integer number of ms`);
        checkRange(k, d, `${k.path}[${i}]`);
      });
      return [...(v as number[])];
    }
    case 'routes': {
      if (!Array.isArray(v) || v.length > MAX_LIST)
        throw new ConfigError(k.path, `${k.path} must be an array of routes`);
      const names = new Set<string>();
      return v.map((r: unknown, i) => {
        const at = `${k.path}[${i}]`;
        if (typeof r !== 'object' || r === null || Array.isArray(r))
          throw new ConfigError(at, `${at} must be an object`);
        const route = r as Record<string, unknown>;
        for (const f of Object.keys(route))
          if (!ROUTE_FIELDS.has(f)) {
            // The field name is the caller's: cut and made well-formed before it names anything.
            const shown = `${at}.${(f.slice(0, 100) as unknown as { toWellFormed(): string }).toWellFormed()}`;
            throw new ConfigError(shown, `${shown} is not a route field`);
          }
        // The name is the queue: it appears in every wake body, so it is bounded (util/notify/wakeBody.ts).
        if (typeof route.name !== 'string' || !QUEUE_NAME.test(route.name))
          throw new ConfigError(
            `${at}.name`,
            `${at}.name must be 1-${MAX_QUEUE_NAME_CHARS} letters, digits, '_', '.' or '-'`,
          );
        if (route.name === 'unrouted')
          throw new ConfigError(`${at}.name`, `${at}.name 'unrouted' is reserved`);
        if (names.has(route.name))
          throw new ConfigError(`${at}.name`, `${at}.name '${route.name}' is used twice`);
        names.add(route.name);
        if (route.match !== 'exact' && route.match !== 'prefix')
          throw new ConfigError(`${at}.match`, `${at}.match must be "exact" or "prefix"`);
        if (
          typeof route.path !== 'string' ||
          !route.path.startsWith('/') ||
          route.path.length > MAX_ROUTE_PATH_CHARS
        )
          throw new ConfigError(
            `${at}.path`,
            `${at}.path must be a path starting with / of at most ${MAX_ROUTE_PATH_CHARS} characters`,
          );
        const out: RouteConfig = { name: route.name, match: route.match, path: route.path };
        if (route.renderInterval !== undefined && route.renderInterval !== null) {
          const ri = route.renderInterval;
          if (typeof ri !== 'number' || !Number.isInteger(ri) || ri < MINUTE || ri > 365 * DAY)
            throw new ConfigError(
              `${at}.renderInterval`,
              `${at}.renderInterval must be an integer from ${MINUTE} ms`,
            );
          out.renderInterval = ri;
        }
        return out;
      });
    }
  }
}

export interface PartialCheck {
  /** Flattened known keys with their checked values. */
  values: Map<string, unknown>;
  /** Paths that name no key (ignored, logged once). */
  unknown: string[];
  /** Lenient mode only: the keys refused, each left at its lower layer's value. */
  errors: ConfigError[];
}

/**
 * Walks a nested partial config such as `{stall: {after: 2000}}`. Throws ConfigError naming the first
 * bad key; unknown paths are collected, not fatal. `lenient` (for stored sources: config.yaml and the
 * override row, which were valid under some older rule or were edited by hand) collects bad keys in
 * `errors` instead, so one bad value drops only itself, never the rest of its source.
 */
export function checkPartial(partial: unknown, opts: { lenient?: boolean } = {}): PartialCheck {
  const values = new Map<string, unknown>();
  const unknown: string[] = [];
  const errors: ConfigError[] = [];
  if (partial === undefined || partial === null) return { values, unknown, errors };
  if (typeof partial !== 'object' || Array.isArray(partial)) {
    const e = new ConfigError('(root)', 'the configuration must be an object');
    if (!opts.lenient) throw e;
    return { values, unknown, errors: [e] };
  }
  const walk = (obj: Record<string, unknown>, base: string) => {
    for (const [name, v] of Object.entries(obj)) {
      const path = base ? `${base}.${name}` : name;
      const key = KEY_BY_PATH.get(path);
      if (key) {
        try {
          values.set(path, checkValue(key, v));
        } catch (e) {
          if (!opts.lenient || !(e instanceof ConfigError)) throw e;
          errors.push(e);
        }
      } else if (
        typeof v === 'object' &&
        v !== null &&
        !Array.isArray(v) &&
        CONFIG_KEYS.some((k) => k.path.startsWith(path + '.'))
      ) {
        walk(v as Record<string, unknown>, path);
      } else {
        unknown.push(path);
      }
    }
  };
  walk(partial as Record<string, unknown>, '');
  return { values, unknown, errors };
}

/** Applies checked values on top of a config, returning a new object. */
export function applyValues(base: QueueKeeperConfig, values: Map<string, unknown>): QueueKeeperConfig {
  const out = clone(base) as unknown as Record<string, unknown>;
  for (const [path, v] of values) setPath(out, path, clone(v));
  return out as unknown as QueueKeeperConfig;
}

/** Merges nested partial objects (later wins; arrays replace). Used to persist overrides. */
export function mergePartials(a: unknown, b: unknown): Record<string, unknown> {
  const out: Record<string, unknown> =
    typeof a === 'object' && a !== null && !Array.isArray(a) ? clone(a as Record<string, unknown>) : {};
  if (typeof b !== 'object' || b === null || Array.isArray(b)) return out;
  for (const [k, v] of Object.entries(b as Record<string, unknown>)) {
    const cur = out[k];
    if (
      typeof v === 'object' &&
      v !== null &&
      !Array.isArray(v) &&
      typeof cur === 'object' &&
      cur !== null &&
      !Array.isArray(cur)
    )
      out[k] = mergePartials(cur, v);
    else out[k] = clone(v);
  }
  return out;
}

/** Paths whose value differs between two configs. */
export function changedPaths(a: QueueKeeperConfig, b: QueueKeeperConfig): string[] {
  return CONFIG_KEYS.filter(
    (k) => JSON.stringify(getPath(a, k.path)) !== JSON.stringify(getPath(b, k.path)),
  ).map((k) => k.path);
}

/** The README's configuration table, generated from the schema (a unit test keeps them equal). */
export function configTableMarkdown(): string {
  const rows = CONFIG_KEYS.map((k) => {
    const range =
      k.kind === 'int' || k.kind === 'number' || k.kind === 'durations'
        ? `${k.zeroAllowed ? '0 or ' : ''}${k.min ?? ''}–${k.max ?? ''}`
        : k.kind;
    return `| \`${k.path}\` | \`${JSON.stringify(k.default)}\` | ${range} | ${k.effect} | ${k.description} |`;
  });
  return ['| key | default | range | on change | effect |', '|---|---|---|---|---|', ...rows].join('\n');
}
