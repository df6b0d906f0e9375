// Validation, defaults and the README table of the configuration, all read from the key list in
// util/config/keys.ts. Callers import both from here: this module re-exports the list and its types.
import { parseAllowList } from '../notify/addressPolicy.js';
import { MAX_QUEUE_NAME_CHARS, QUEUE_NAME } from '../notify/wakeBody.js';
import { normaliseOrigin } from './origin.js';
import { wellFormed } from '../text.js';
import { cronProblem, timezoneProblem } from './cron.js';
import { deviceListOf, deviceListProblem } from './devices.js';
import { CONFIG_KEYS, DAY, MINUTE } from './keys.js';
import type { ConfigKey, QueueKeeperConfig, RouteConfig } from './shape.js';

export { CONFIG_KEYS } from './keys.js';
export type { ConfigEffect, ConfigKey, QueueKeeperConfig, RouteConfig } from './shape.js';

const KEY_BY_PATH: ReadonlyMap<string, ConfigKey> = new Map(CONFIG_KEYS.map((k) => [k.path, k]));

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

/** A host as URL.host writes it (lower-cased, default port dropped), or null when `h` is not one. */
function hostOf(h: string): string | null {
  if (h.length === 0 || /[/\\?#@\s]/.test(h)) return null;
  try {
    const u = new URL(`http://${h}`);
    return u.host === h.toLowerCase() || u.host === h.toLowerCase().replace(/:80$/, '') ? u.host : null;
  } catch {
    return null;
  }
}

/** A device profile's name as fleets key their profiles (desktop, mobile, …). */
const DEVICE_NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const ROUTE_FIELDS: ReadonlySet<string> = new Set(['name', 'match', 'path', 'renderInterval']);
/** Role names, CIDR entries and routes are lists an operator types; these bounds only stop abuse. */
const MAX_LIST = 1000;
const MAX_ROUTE_PATH_CHARS = 1900;
/** A host as `URL.host` spells it: a name or an address, with an optional port. */

/** A secret is sent in a header: header-safe and bounded. */
const MAX_SECRET_CHARS = 512;

/** Checks one value against its key; returns the normalised value or throws ConfigError naming the key. */
function checkValue(k: ConfigKey, v: unknown): unknown {
  switch (k.kind) {
    case 'int':
    case 'number': {
      // A number whose default is null (queue.maxLeaseTime: derived from another key) may be set back to null.
      if (v === null && k.default === null) return null;
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
    case 'devices': {
      const p = deviceListProblem(v);
      if (p !== null) throw new ConfigError(k.path, `${k.path}${p.startsWith('[') ? '' : ' '}${p}`);
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
    case 'origin': {
      if (v === null) return null;
      if (typeof v !== 'string' || v.length > 300)
        throw new ConfigError(k.path, `${k.path} must be an origin string (scheme://host[:port]) or null`);
      try {
        return normaliseOrigin(v);
      } catch (e) {
        throw new ConfigError(k.path, `${k.path} ${(e as Error).message}`);
      }
    }
    case 'hosts': {
      if (!Array.isArray(v) || v.length > MAX_LIST)
        throw new ConfigError(k.path, `${k.path} must be an array of hosts`);
      return v.map((h: unknown, i) => {
        const host = typeof h === 'string' && h.length <= 300 ? hostOf(h) : null;
        if (host === null)
          throw new ConfigError(
            `${k.path}[${i}]`,
            `${k.path}[${i}] must be a host as a URL writes it (example.com, 127.0.0.1:8080), no scheme or path`,
          );
        return host;
      });
    }
    case 'name':
      // A name whose default is null (serving.defaultDevice) may be set back to null.
      if (v === null && k.default === null) return null;
      if (typeof v !== 'string' || !DEVICE_NAME.test(v))
        throw new ConfigError(k.path, `${k.path} must be 1-64 letters, digits, '_', '.' or '-'`);
      // The deprecated one-device key becomes a device list, so it must name a device once lower-cased.
      if (k.path === 'render.deviceType' && deviceListOf(v) === null)
        throw new ConfigError(
          k.path,
          `${k.path} must be a device name once lower-cased (a letter, then letters, digits or '-'); set render.deviceTypes instead`,
        );
      return v;
    case 'cron': {
      const p = typeof v === 'string' && v.length <= 200 ? cronProblem(v) : 'must be a string';
      if (p !== null) throw new ConfigError(k.path, `${k.path} ${p}`);
      return v;
    }
    case 'timezone': {
      const p = typeof v === 'string' && v.length <= 100 ? timezoneProblem(v) : 'must be a string';
      if (p !== null) throw new ConfigError(k.path, `${k.path} ${p}`);
      return v;
    }
    case 'choice':
      if (typeof v !== 'string' || !(k.choices ?? []).includes(v))
        throw new ConfigError(k.path, `${k.path} must be one of ${(k.choices ?? []).join(', ')}`);
      return v;
    case 'secret':
      if (typeof v !== 'string' || v.length > MAX_SECRET_CHARS || /[\s\x00-\x1f\x7f]/.test(v))
        throw new ConfigError(
          k.path,
          `${k.path} must be a string of at most ${MAX_SECRET_CHARS} characters without spaces or control characters`,
        );
      return v;
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
            const shown = `${at}.${wellFormed(f.slice(0, 100))}`;
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
              `${at}.renderInterval must be an integer from ${MINUTE} to ${365 * DAY} ms (365 days)`,
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
      } else if (CONFIG_KEYS.some((k) => k.path.startsWith(path + '.'))) {
        // A section we know: its keys are checked one by one; anything but an object there is a
        // wrong type for the section (a 400 naming it), not an unknown key to ignore.
        if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
          walk(v as Record<string, unknown>, path);
          continue;
        }
        const e = new ConfigError(
          path,
          `${path} is a section of keys and must be an object, not ${v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v}`,
        );
        if (!opts.lenient) throw e;
        errors.push(e);
      } else {
        unknown.push(path);
      }
    }
  };
  walk(partial as Record<string, unknown>, '');
  return { values, unknown, errors };
}

/**
 * Applies checked values on top of a config, returning a new object. A source that sets the deprecated
 * render.deviceType and not render.deviceTypes sets the list to that one device.
 */
export function applyValues(base: QueueKeeperConfig, values: Map<string, unknown>): QueueKeeperConfig {
  const out = clone(base) as unknown as Record<string, unknown>;
  for (const [path, v] of values) setPath(out, path, clone(v));
  const legacy = values.get('render.deviceType');
  if (typeof legacy === 'string' && !values.has('render.deviceTypes')) {
    const list = deviceListOf(legacy);
    if (list !== null) setPath(out, 'render.deviceTypes', list);
  }
  return out as unknown as QueueKeeperConfig;
}

/**
 * What the config answer shows of a `secret` key that is set: never the value. It has spaces, which a
 * secret may not, so posting an answer back unchanged is refused (400 naming the key) instead of
 * setting the secret to this text.
 */
export const HIDDEN_SECRET = '(set; hidden)';

/** The config as the config answer shows it: every `secret` key that is set reads HIDDEN_SECRET. */
export function withSecretsHidden(cfg: QueueKeeperConfig): QueueKeeperConfig {
  const out = clone(cfg) as unknown as Record<string, unknown>;
  for (const k of CONFIG_KEYS)
    if (k.kind === 'secret' && getPath(out, k.path) !== '') setPath(out, k.path, HIDDEN_SECRET);
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

/**
 * A prerender fleet never starts a job with under this much of its lease left, so a shorter lease is
 * never rendered by one (docs/prerender-fleet.md).
 */
export const FLEET_MIN_LEASE_LEFT_MS = 30_000;
/** Below this lease length a prerender fleet skips most of what it claims. */
export const FLEET_LEASE_WARNING_MS = 60_000;

/**
 * Settings that are valid but probably not what the operator meant: the config answer lists them under
 * `warnings`, and the node logs each once.
 */
export function configWarnings(cfg: QueueKeeperConfig): string[] {
  const out: string[] = [];
  if (cfg.render.deviceType !== null)
    out.push(
      `render.deviceType is deprecated: it reads as render.deviceTypes ${JSON.stringify(cfg.render.deviceTypes)} ` +
        'unless render.deviceTypes is set beside it; set render.deviceTypes instead',
    );
  if (cfg.queue.jobLeaseTime < FLEET_LEASE_WARNING_MS)
    out.push(
      `queue.jobLeaseTime ${cfg.queue.jobLeaseTime} ms is under ${FLEET_LEASE_WARNING_MS} ms: a prerender fleet ` +
        `never renders a job with under ${FLEET_MIN_LEASE_LEFT_MS / 1000} s of its lease left, so it skips jobs ` +
        `a claim gave it and they come back only when their leases expire`,
    );
  return out;
}
