// The keeper's load reads only the fields it holds, so a load decodes no more than it keeps: a raw record
// reader (util/schedule/rawRecord.ts) decodes these seven and `HeldFieldsSink` normalises them into one reused
// object, as `toScheduleRow` normalises a full record, so a load builds no row per record.
import type { HeldFields } from './types.js';
import { storedState } from '../schedule/rowState.js';

/** The stored fields `KeeperCore.apply` reads, in the order a reader hands their values. */
export const HELD_FIELDS = [
  'nextRenderTime',
  'fromSitemap',
  'effectiveInterval',
  'verified',
  'urgentAt',
  'changedAt',
  'state',
] as const;

const finiteOrNull = (x: unknown): number | null => (typeof x === 'number' && Number.isFinite(x) ? x : null);

/**
 * Turns the values of HELD_FIELDS into HeldFields in one object it reuses: each `fill` overwrites the
 * last, so a caller must be done with it before the next (KeeperCore.apply reads it during the call
 * only). Undefined where toScheduleRow finds no row (no numeric nextRenderTime).
 */
export class HeldFieldsSink {
  private readonly fields: HeldFields = {
    nextRenderTime: 0,
    fromSitemap: false,
    effectiveInterval: null,
    verified: true,
    urgentAt: null,
    changedAt: null,
    state: 'active',
  };

  fill(v: readonly unknown[]): HeldFields | undefined {
    const next = v[0];
    if (typeof next !== 'number') return undefined;
    const f = this.fields;
    f.nextRenderTime = next;
    f.fromSitemap = v[1] === true;
    f.effectiveInterval = finiteOrNull(v[2]);
    f.verified = v[3] !== false;
    f.urgentAt = finiteOrNull(v[4]);
    f.changedAt = finiteOrNull(v[5]);
    f.state = storedState(v[6]);
    return f;
  }
}
