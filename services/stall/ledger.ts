// The only module that names QueueStallNudge (the stall ledger, docs/wakes.md); the claim marks it is judged
// against live in services/leases/claimMarks.ts. It keeps no state of its own. The rules live in
// util/stall/rules.ts; this file reads rows, and makes each ledger write conditional: under a process-wide
// lmdb lock for the pair, with a fresh read snapshot, the row is read again and the write happens only if the
// rule still says yes. Harper has no compare-and-set and its transactions re-apply a conflicting write
// instead of re-running the callback (Harper 4.7.29), so without the lock two overlapping worker 0s would
// both charge — and both wake — one pair.
import {
  recheckCharge,
  sameLedgerState,
  type LedgerRow,
  type PairKey,
  type StallCharge,
  type StallConfig,
} from '../../util/stall/rules.js';
import { log, table, transaction, type HarperTable } from '../runtime/harper.js';
import { withStoreLock } from '../runtime/storeLock.js';

const ledgerTable = (): HarperTable => table('render_queue', 'QueueStallNudge');

// A holder that dies between lock and unlock (a worker terminated mid-charge) leaves the lmdb lock held
// for the life of the process, and lmdb cannot tell us. Waiting forever would wedge the whole
// maintenance tick, so a charge gives up after this long: giving up writes nothing and wakes nobody.
const LOCK_WAIT_MS = 10_000;
// Distinct from any record id, and from Harper's own `<id>` / `<fileId>:blob` locks on this store.
const LOCK_PREFIX = 'stall-charge:';

/**
 * The ledger row's primary key. JSON rather than "<fleetId>|<queue>": a route name may contain `|`, and
 * then "a|b" + "c" and "a" + "b|c" would share one row.
 */
export function ledgerId(pair: PairKey): string {
  return JSON.stringify([pair.fleetId, pair.queue]);
}

function toLedgerRow(r: Record<string, unknown> | undefined): LedgerRow | null {
  if (!r) return null;
  return {
    fleetId: String(r.fleetId),
    queue: String(r.queue),
    nudges: Number(r.nudges),
    lastNudgedAt: Number(r.lastNudgedAt),
  };
}

export async function readLedger(): Promise<LedgerRow[]> {
  const rows: LedgerRow[] = [];
  for await (const r of ledgerTable().search({})) rows.push(toLedgerRow(r)!);
  return rows;
}

/**
 * Runs `fn` holding the pair's lock, after refreshing this thread's read snapshot so `fn` sees every
 * commit made before the lock was ours. `fn` must commit its own transaction before it returns: the lock
 * is released right after, and a write still pending at that point is exactly the race this prevents.
 * Answers undefined when the lock could not be had in time.
 */
async function underPairLock<T>(pair: PairKey, fn: () => Promise<T>): Promise<T | undefined> {
  const r = await withStoreLock(
    ledgerTable().primaryStore,
    'QueueStallNudge',
    LOCK_PREFIX + ledgerId(pair),
    LOCK_WAIT_MS,
    fn,
  );
  if (r.locked) return r.value;
  log.warn(
    `stall ledger: lock for fleet ${pair.fleetId} queue ${JSON.stringify(pair.queue)} not free after ` +
      `${LOCK_WAIT_MS} ms; skipping the pair this tick`,
  );
  return undefined;
}

/**
 * Charge and decide in one step: writes `charge.next` only if the row is still what the
 * plan saw and the pair is still due. True means the charge committed and the caller may fire the wake;
 * false means another sweep got there first (or the pair stopped being due) and nothing may fire.
 */
export async function chargePair(
  charge: StallCharge,
  now: number,
  lastClaimAt: number | undefined,
  cfg: StallConfig,
): Promise<boolean> {
  const wrote = await underPairLock(charge, () =>
    transaction(async (txn) => {
      const id = ledgerId(charge);
      const current = toLedgerRow(await ledgerTable().get(id, txn));
      if (!recheckCharge(current, charge, now, lastClaimAt, cfg)) return false;
      await ledgerTable().put(id, { id, ...charge.next }, txn);
      return true;
    }),
  );
  return wrote === true;
}

/**
 * Deletes drained rows (their queue has no due verified row), each only if it is still the row the sweep saw:
 * a second worker 0 that charged the pair meanwhile saw due work, and deleting its fresh row would reset the
 * budget and let the next sweep wake the pair again inside the cooldown.
 */
export async function drainLedger(rows: LedgerRow[]): Promise<number> {
  let deleted = 0;
  for (const seen of rows) {
    const gone = await underPairLock(seen, () =>
      transaction(async (txn) => {
        const id = ledgerId(seen);
        const current = toLedgerRow(await ledgerTable().get(id, txn));
        if (current === null || !sameLedgerState(current, seen)) return false;
        await ledgerTable().delete(id, txn);
        return true;
      }),
    );
    if (gone === true) deleted++;
  }
  return deleted;
}

/**
 * Deletes every ledger row of a fleet inside the caller's transaction (the fleet revoke). Not under the
 * pair locks: a charge racing the revoke may still write a row, which the sweep drains as an orphan and
 * whose wake the dispatcher drops because it re-checks the fleet before every attempt.
 */
export async function deleteLedgerForFleet(fleetId: string, txn: unknown): Promise<number> {
  const ids: string[] = [];
  const query = { conditions: [{ attribute: 'fleetId', comparator: 'equals', value: fleetId }] };
  for await (const r of ledgerTable().search(query, txn)) ids.push(String(r.id));
  for (const id of ids) await ledgerTable().delete(id, txn);
  return ids.length;
}
