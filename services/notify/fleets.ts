// The only module that names the Fleet and NotifyHook tables (docs/wakes.md): registrations of render fleets,
// their notify hooks with sealed secrets and delivery health. Validation of request bodies lives in the API
// module; this file keeps the rows consistent (ceiling, cascade, rotation grace, auto-disable).
import { randomUUID } from 'node:crypto';
import { mintSecret, type SigningSecrets } from '../../util/notify/webhookSignature.js';
import { openSecret, sealSecret } from '../../util/notify/secretSeal.js';
import type { FleetView, HookView } from '../../util/stall/rules.js';
import { log, table, transaction } from '../runtime/harper.js';
import { withStoreLock } from '../runtime/storeLock.js';
import { deleteLedgerForFleet } from '../stall/ledger.js';

/** How long a rotated-out secret keeps signing, so receivers can roll over without losing a wake. */
export const ROTATION_GRACE_MS = 24 * 3_600_000;

export interface FleetRecord {
  id: string;
  name: string;
  state: 'active' | 'revoked';
  queues: string[];
  username: string | null;
  createdAt: number;
  revokedAt: number | null;
}

export type DisabledReason = 'operator' | 'failures';

export interface HookRecord {
  id: string;
  fleetId: string;
  url: string;
  queues: string[];
  enabled: boolean;
  disabledReason: DisabledReason | null;
  consecutiveFailures: number;
  lastStatus: number | null;
  lastError: string | null;
  lastAttemptAt: number | null;
  sealedSecret: string;
  sealedPreviousSecret: string | null;
  previousValidUntil: number | null;
  createdAt: number;
}

const fleets = () => table('render_queue', 'Fleet');
const hooks = () => table('render_queue', 'NotifyHook');

// Hook rows are read-decide-write (health counts, rotation, enable/disable) from several workers at
// once; without a lock a health write racing a rotate would put the old secret back, or resurrect a
// deleted hook. A per-hook lock serialises those; a per-fleet lock makes the ceiling check and the
// revoke cascade atomic against hook creation. Order: fleet lock, then hook locks — never the reverse.
const LOCK_WAIT_MS = 10_000;

async function locked<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const r = await withStoreLock(hooks().primaryStore, 'NotifyHook', key, LOCK_WAIT_MS, fn);
  if (!r.locked) throw new Error(`notify: lock ${key} not free after ${LOCK_WAIT_MS} ms`);
  return r.value;
}
const underHookLock = <T>(id: string, fn: () => Promise<T>) => locked(`hook:${id}`, fn);
const underFleetLock = <T>(fleetId: string, fn: () => Promise<T>) => locked(`fleet-hooks:${fleetId}`, fn);

// ------------------------------------------------------------------ row mapping

const text = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const strings = (v: unknown): string[] =>
  Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];

function toFleet(r: Record<string, unknown>): FleetRecord {
  return {
    id: String(r.id),
    name: text(r.name) ?? '',
    state: r.state === 'revoked' ? 'revoked' : 'active',
    queues: strings(r.queues),
    username: text(r.username),
    createdAt: num(r.createdAt) ?? 0,
    revokedAt: num(r.revokedAt),
  };
}

function toHook(r: Record<string, unknown>): HookRecord {
  const reason = r.disabledReason === 'failures' || r.disabledReason === 'operator' ? r.disabledReason : null;
  return {
    id: String(r.id),
    fleetId: text(r.fleetId) ?? '',
    url: text(r.url) ?? '',
    queues: strings(r.queues),
    enabled: r.enabled === true,
    disabledReason: reason,
    consecutiveFailures: num(r.consecutiveFailures) ?? 0,
    lastStatus: num(r.lastStatus),
    lastError: text(r.lastError),
    lastAttemptAt: num(r.lastAttemptAt),
    sealedSecret: text(r.sealedSecret) ?? '',
    sealedPreviousSecret: text(r.sealedPreviousSecret),
    previousValidUntil: num(r.previousValidUntil),
    createdAt: num(r.createdAt) ?? 0,
  };
}

// ------------------------------------------------------------------ fleets

export async function createFleet(
  input: { name: string; queues: string[]; username: string | null },
  now: number,
): Promise<FleetRecord> {
  const fleet: FleetRecord = {
    id: randomUUID(),
    name: input.name,
    state: 'active',
    queues: input.queues,
    username: input.username,
    createdAt: now,
    revokedAt: null,
  };
  await transaction(async (txn) => fleets().put(fleet.id, { ...fleet }, txn));
  log.info(`fleet created id=${fleet.id} name=${JSON.stringify(fleet.name)}`);
  return fleet;
}

export async function getFleet(id: string): Promise<FleetRecord | undefined> {
  const r = await fleets().get(id);
  return r ? toFleet(r) : undefined;
}

export async function listFleets(): Promise<FleetRecord[]> {
  const out: FleetRecord[] = [];
  for await (const r of fleets().search({})) out.push(toFleet(r));
  return out.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));
}

/**
 * Revokes a fleet and, in the same transaction, deletes its hooks and stall-ledger rows, so no wake can
 * start for it afterwards (deliveries already queued re-check the fleet before every attempt).
 * Revoking a revoked fleet is a no-op that answers the row.
 */
export async function revokeFleet(id: string, now: number): Promise<FleetRecord | undefined> {
  return underFleetLock(id, async () => {
    const result = await transaction(async (txn) => {
      const r = await fleets().get(id, txn);
      if (!r) return undefined;
      const fleet = toFleet(r);
      if (fleet.state === 'active') {
        fleet.state = 'revoked';
        fleet.revokedAt = now;
        await fleets().put(id, { ...fleet }, txn);
      }
      return { fleet, ledger: await deleteLedgerForFleet(id, txn) };
    });
    if (!result) return undefined;
    // The fleet is revoked and holds its lock, so no hook can be added now; each delete takes the hook's
    // lock so an in-flight health write cannot put the row back.
    const hookIds = (await listHooks(id)).map((h) => h.id);
    for (const h of hookIds) await deleteHook(h);
    log.info(
      `fleet revoked id=${id} hooksRemoved=${hookIds.length} ledgerRowsRemoved=${result.ledger} at=${now}`,
    );
    return result.fleet;
  });
}

// ------------------------------------------------------------------ hooks

export async function getHook(id: string): Promise<HookRecord | undefined> {
  const r = await hooks().get(id);
  return r ? toHook(r) : undefined;
}

export async function listHooks(fleetId?: string): Promise<HookRecord[]> {
  const out: HookRecord[] = [];
  for await (const r of hooks().search({})) {
    const h = toHook(r);
    if (fleetId === undefined || h.fleetId === fleetId) out.push(h);
  }
  return out.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));
}

export class CeilingExceeded extends Error {}
export class FleetNotActive extends Error {}

/** Creates an enabled hook with a fresh secret; the plaintext secret is returned once, never stored. */
export async function createHook(
  input: { fleetId: string; url: string; queues: string[] },
  ceiling: number,
  key: Buffer,
  now: number,
): Promise<{ hook: HookRecord; secret: string }> {
  return underFleetLock(input.fleetId, async () => {
    const fleet = await fleets().get(input.fleetId);
    if (!fleet || fleet.state !== 'active') throw new FleetNotActive(input.fleetId);
    const existing = (await listHooks(input.fleetId)).length;
    if (existing >= ceiling) throw new CeilingExceeded(String(existing));
    return insertHook(input, key, now);
  });
}

async function insertHook(
  input: { fleetId: string; url: string; queues: string[] },
  key: Buffer,
  now: number,
): Promise<{ hook: HookRecord; secret: string }> {
  const id = randomUUID();
  const secret = mintSecret();
  const hook: HookRecord = {
    id,
    fleetId: input.fleetId,
    url: input.url,
    queues: input.queues,
    enabled: true,
    disabledReason: null,
    consecutiveFailures: 0,
    lastStatus: null,
    lastError: null,
    lastAttemptAt: null,
    // The hook id is bound as associated data: a sealed secret copied onto another row will not open.
    sealedSecret: sealSecret(key, secret, id),
    sealedPreviousSecret: null,
    previousValidUntil: null,
    createdAt: now,
  };
  await transaction(async (txn) => hooks().put(id, { ...hook }, txn));
  return { hook, secret };
}

async function updateHook(
  id: string,
  change: (h: HookRecord) => HookRecord | null,
): Promise<HookRecord | undefined> {
  return underHookLock(id, () =>
    transaction(async (txn) => {
      const r = await hooks().get(id, txn);
      if (!r) return undefined;
      const current = toHook(r);
      const next = change(current);
      if (next === null) return current;
      await hooks().put(id, { ...next }, txn);
      return next;
    }),
  );
}

/**
 * A new secret; the old one keeps signing for 24 h. Rotation re-enables a hook that failures disabled
 * (the operator has looked at it), never one an operator disabled.
 */
export async function rotateHook(
  id: string,
  key: Buffer,
  now: number,
): Promise<{ hook: HookRecord; secret: string } | undefined> {
  const secret = mintSecret();
  const hook = await updateHook(id, (h) => {
    const reenable = !h.enabled && h.disabledReason === 'failures';
    // After a change of QUEUE_KEEPER_SECRET_KEY the old secret no longer opens; carrying it as the
    // "previous" would make every delivery of the grace period fail to sign.
    const keepPrevious = opens(key, h.sealedSecret, h.id);
    return {
      ...h,
      sealedPreviousSecret: keepPrevious ? h.sealedSecret : null,
      previousValidUntil: keepPrevious ? now + ROTATION_GRACE_MS : null,
      sealedSecret: sealSecret(key, secret, id),
      enabled: reenable ? true : h.enabled,
      disabledReason: reenable ? null : h.disabledReason,
      consecutiveFailures: reenable ? 0 : h.consecutiveFailures,
    };
  });
  return hook ? { hook, secret } : undefined;
}

/** Enable resets the failure count; disable records that an operator did it. */
export async function setHookEnabled(id: string, enabled: boolean): Promise<HookRecord | undefined> {
  return updateHook(id, (h) =>
    enabled
      ? { ...h, enabled: true, disabledReason: null, consecutiveFailures: 0 }
      : // An operator's disable always reads as theirs, so a later rotate does not re-enable it.
        { ...h, enabled: false, disabledReason: 'operator' },
  );
}

export async function deleteHook(id: string): Promise<boolean> {
  return underHookLock(id, () =>
    transaction(async (txn) => {
      if (!(await hooks().get(id, txn))) return false;
      await hooks().delete(id, txn);
      return true;
    }),
  );
}

function opens(key: Buffer, sealed: string, context: string): boolean {
  try {
    openSecret(key, sealed, context);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether the hook's current secret opens under `key`: false after QUEUE_KEEPER_SECRET_KEY changed, when
 * every delivery to the hook is skipped (the dispatcher logs why) until the hook is rotated.
 */
export function hookSecretOpens(h: HookRecord, key: Buffer): boolean {
  return opens(key, h.sealedSecret, h.id);
}

/**
 * The secrets that sign a delivery now. Throws SealError when the current secret does not open (a changed
 * sealing key); a previous secret that does not open is left out rather than failing the delivery.
 */
export function signingSecrets(h: HookRecord, key: Buffer, now: number): SigningSecrets {
  const previous =
    h.sealedPreviousSecret &&
    h.previousValidUntil !== null &&
    now < h.previousValidUntil &&
    opens(key, h.sealedPreviousSecret, h.id)
      ? openSecret(key, h.sealedPreviousSecret, h.id)
      : null;
  return {
    current: openSecret(key, h.sealedSecret, h.id),
    previous,
    previousValidUntil: h.previousValidUntil,
  };
}

export interface DeliveryHealth {
  success: boolean;
  status: number | null;
  error: string | null;
  /** false: recorded (last status and error) but not counted toward auto-disable (a temporary DNS failure). */
  counts?: boolean;
}

/**
 * The one health write per delivery. Returns true when this failure crossed the auto-disable threshold
 * (the caller counts and logs it once). A hook deleted meanwhile stays deleted.
 */
export async function recordDelivery(
  id: string,
  health: DeliveryHealth,
  disableAfter: number,
  now: number,
): Promise<boolean> {
  let disabledNow = false;
  await updateHook(id, (h) => {
    const failures = health.success
      ? 0
      : health.counts === false
        ? h.consecutiveFailures
        : h.consecutiveFailures + 1;
    const disable = !health.success && h.enabled && failures >= disableAfter;
    disabledNow = disable;
    return {
      ...h,
      consecutiveFailures: failures,
      lastStatus: health.status,
      lastError: health.error,
      lastAttemptAt: now,
      enabled: disable ? false : h.enabled,
      disabledReason: disable ? 'failures' : h.disabledReason,
    };
  });
  return disabledNow;
}

/** Destroys previous secrets whose grace has ended; returns how many were destroyed. */
export async function destroyExpiredSecrets(now: number): Promise<number> {
  let destroyed = 0;
  for (const h of await listHooks()) {
    if (h.sealedPreviousSecret === null || h.previousValidUntil === null || now < h.previousValidUntil)
      continue;
    const done = await updateHook(h.id, (cur) =>
      cur.sealedPreviousSecret !== null && cur.previousValidUntil !== null && now >= cur.previousValidUntil
        ? { ...cur, sealedPreviousSecret: null, previousValidUntil: null }
        : null,
    );
    if (done && done.sealedPreviousSecret === null) destroyed++;
  }
  return destroyed;
}

// ------------------------------------------------------------------ views for the rules

/** Fleets as the stall rules see them (a FleetRecord is a FleetView). */
export const fleetViews: () => Promise<FleetView[]> = listFleets;

/** Hooks as the stall rules see them (a HookRecord is a HookView). */
export const hookViews: () => Promise<HookView[]> = () => listHooks();
