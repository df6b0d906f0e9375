// The stall ledger's rules (docs/wakes.md, "The stall sweep") as pure functions over plain values. The
// Harper-facing sweep gathers the inputs (per-queue due views, fleets, hooks, ledger rows, last claim times),
// calls planSweep, then for each charge re-reads the ledger row under a lock and writes `next` only when
// recheckCharge still says yes; the wake fires after that write commits. Nothing here reads a clock: `now` is
// an argument in ms so a test can walk a stall through hours of backoff in microseconds.
//
// Input contract — the wake gate (only verified rows wake a fleet; docs/wakes.md) is applied by whoever
// builds QueueDueView, not here:
//   - `oldestGateDue` and `hasGateDue` look only at VERIFIED rows. Unverified rows are real work and get
//     claimed, but they never make a queue a candidate and their URL never reaches a webhook body, so
//     they must not appear in either field. A queue whose due rows are all unverified has
//     `oldestGateDue: null, hasGateDue: false` (or no view at all) and is treated as drained.
//   - A queue without a view has no due gate-passing rows.
//   - One view per queue; `dueMs` is the row's nextRenderTime (floored here again, to be safe).
import type { QueueKeeperConfig } from '../config/schema.js';
import { startOfMinute } from '../time.js';

export type StallConfig = QueueKeeperConfig['stall'];

export interface PairKey {
  fleetId: string;
  queue: string;
}

/** One ledger row, keyed by (fleet, queue). `nudges` counts wakes since the stall began or last progressed. */
export interface LedgerRow extends PairKey {
  nudges: number;
  lastNudgedAt: number;
}

export interface FleetView {
  id: string;
  name: string;
  state: 'active' | 'revoked';
  /** Queues the fleet serves; empty = all. */
  queues: string[];
}

export interface HookView {
  id: string;
  fleetId: string;
  enabled: boolean;
  /** Queue filter; empty = the fleet's queues at fire time. */
  queues: string[];
}

/** The row a wake names: always a gate-passing (verified) row. */
export interface RepresentativeRow {
  key: string;
  dueMs: number;
  fromSitemap: boolean;
}

export interface QueueDueView {
  queue: string;
  /** Oldest due, verified, unleased row; null when there is none. */
  oldestGateDue: RepresentativeRow | null;
  /** Any due verified row, leased or not. False drains the queue's ledger rows. */
  hasGateDue: boolean;
}

export interface StallInputs {
  now: number;
  queues: QueueDueView[];
  fleets: FleetView[];
  hooks: HookView[];
  ledger: LedgerRow[];
  /** Time of the latest claim per queue (any fleet); absent = no claim known. */
  lastClaimAt: Map<string, number>;
  config: StallConfig;
  /**
   * Pairs this sweep may charge (default: all). In a cluster exactly one node charges each pair — its
   * rendezvous owner — so one wake per cooldown holds across nodes, not only across workers.
   */
  mayCharge?: (pair: PairKey) => boolean;
}

export interface StallCharge extends PairKey {
  /** The ledger row as the plan saw it (null = absent); recheckCharge compares against it. */
  previous: LedgerRow | null;
  /** The row to write if the re-check passes. */
  next: LedgerRow;
  /** The queue's oldest gate-passing due row, named in the `stalled` wake. */
  representative: RepresentativeRow;
}

export interface StallPlan {
  /** Ledger rows to delete: their queue has no due gate-passing rows, so the next stall starts fresh. */
  drain: LedgerRow[];
  /** At most `sweepLimit` charges, least-nudged first. */
  charges: StallCharge[];
}

function fleetServes(fleet: FleetView, queue: string): boolean {
  return fleet.queues.length === 0 || fleet.queues.includes(queue);
}

/**
 * Whether the hook's filter reaches the queue. A non-empty filter narrows the fleet's scope, never
 * widens it: a hook naming a queue its fleet no longer serves covers nothing there, otherwise narrowing
 * a fleet's scope would leave its old hooks waking it for queues it may not claim from.
 * Coverage only — whether the hook may fire now is canReceive.
 */
export function hookCovers(hook: HookView, fleet: FleetView, queue: string): boolean {
  if (hook.fleetId !== fleet.id || !fleetServes(fleet, queue)) return false;
  return hook.queues.length === 0 || hook.queues.includes(queue);
}

/** The hook would receive a wake for this queue right now: active fleet, enabled hook, coverage. */
export function canReceive(hook: HookView, fleet: FleetView, queue: string): boolean {
  return fleet.state === 'active' && hook.enabled && hookCovers(hook, fleet, queue);
}

/**
 * The queue counts as stalled: its oldest due, gate-passing, unleased row has been due longer than
 * `stall.after`. Age runs from the minute-floored due time, the same instant every writer stores, so
 * a row can qualify up to a minute before `after` has passed since its unfloored due time.
 */
function isStalled(view: QueueDueView | undefined, now: number, cfg: StallConfig): boolean {
  if (!view?.oldestGateDue) return false;
  return now - startOfMinute(view.oldestGateDue.dueMs) > cfg.after;
}

/** Wait after the `nudges`-th nudge; the last step repeats (and a bad count clamps rather than reads undefined). */
export function backoffAfter(nudges: number, cfg: StallConfig): number {
  const steps = cfg.backoff;
  const i = Math.min(Math.max(nudges - 1, 0), steps.length - 1);
  return steps[i]!;
}

/**
 * The due predicate: is this pair's next nudge due? Progress is a claim from the queue strictly after the
 * last nudge: a claim in the same millisecond as the nudge is treated as before it, so the worst a tie
 * costs is waiting one backoff step, never an extra wake.
 */
export function isDue(
  previous: LedgerRow | null,
  now: number,
  lastClaimAt: number | undefined,
  cfg: StallConfig,
): { due: boolean; progress: boolean } {
  if (previous === null) return { due: true, progress: false };
  if (lastClaimAt !== undefined && lastClaimAt > previous.lastNudgedAt) return { due: true, progress: true };
  const due =
    previous.nudges < cfg.maxNudges && now - previous.lastNudgedAt >= backoffAfter(previous.nudges, cfg);
  return { due, progress: false };
}

/** The row a charge writes: progress (or a fresh stall) restarts the count at 1. */
export function nextLedgerRow(
  pair: PairKey,
  previous: LedgerRow | null,
  now: number,
  progress: boolean,
): LedgerRow {
  const nudges = previous === null || progress ? 1 : previous.nudges + 1;
  return { fleetId: pair.fleetId, queue: pair.queue, nudges, lastNudgedAt: now };
}

/** Same ledger state as the plan saw: both absent, or the same pair with the same count and time. */
export function sameLedgerState(current: LedgerRow | null, seen: LedgerRow | null): boolean {
  if (current === null || seen === null) return current === seen;
  return (
    current.fleetId === seen.fleetId &&
    current.queue === seen.queue &&
    current.nudges === seen.nudges &&
    current.lastNudgedAt === seen.lastNudgedAt
  );
}

/**
 * The write-time half of "charge and decide in one step". Run under the ledger row's lock (or as the
 * condition of a conditional write) with the row as it is now. Another sweep — on this node or
 * another — that charged the pair since our plan has changed the row, so we yield and no hook fires.
 * The due predicate is checked again too, because config or the clock may have moved since the plan.
 */
export function recheckCharge(
  current: LedgerRow | null,
  planned: { previous: LedgerRow | null },
  now: number,
  lastClaimAt: number | undefined,
  cfg: StallConfig,
): boolean {
  if (!sameLedgerState(current, planned.previous)) return false;
  return isDue(current, now, lastClaimAt, cfg).due;
}

function pairKeyOf(p: PairKey): string {
  // JSON keeps the pair unambiguous whatever characters a fleet id or queue name holds.
  return JSON.stringify([p.fleetId, p.queue]);
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Least-nudged first, so one pair at its fourth nudge never starves a fresh stall of its first. Ties:
 * the longest-waiting pair (never nudged counts as oldest), then the oldest due row, then fleet id and
 * queue, so two sweeps over the same snapshot pick the same pairs.
 */
function compareCharges(a: StallCharge, b: StallCharge): number {
  return (
    a.next.nudges - b.next.nudges ||
    (a.previous?.lastNudgedAt ?? -Infinity) - (b.previous?.lastNudgedAt ?? -Infinity) ||
    a.representative.dueMs - b.representative.dueMs ||
    compareText(a.fleetId, b.fleetId) ||
    compareText(a.queue, b.queue)
  );
}

/**
 * One sweep's decisions: the ledger rows to drain (their queue has no due verified row), then the stalled
 * pairs to charge, least-nudged first, at most `stall.sweepLimit`. Writing the charges and firing the wakes
 * are the caller's.
 */
export function planSweep(inputs: StallInputs): StallPlan {
  const { now, config: cfg } = inputs;
  const viewByQueue = new Map(inputs.queues.map((v) => [v.queue, v]));
  // A view claiming an oldest row but no due rows is inconsistent; trust the row so work is not drained.
  const hasGateDue = (queue: string) => {
    const v = viewByQueue.get(queue);
    return v !== undefined && (v.hasGateDue || v.oldestGateDue !== null);
  };

  const drain: LedgerRow[] = [];
  const ledgerByPair = new Map<string, LedgerRow>();
  for (const row of inputs.ledger) {
    if (!hasGateDue(row.queue)) drain.push(row);
    else if (!ledgerByPair.has(pairKeyOf(row))) ledgerByPair.set(pairKeyOf(row), row);
  }

  const hooksByFleet = new Map<string, HookView[]>();
  for (const h of inputs.hooks) {
    const list = hooksByFleet.get(h.fleetId);
    if (list) list.push(h);
    else hooksByFleet.set(h.fleetId, [h]);
  }

  const charges: StallCharge[] = [];
  const seenFleets = new Set<string>();
  for (const fleet of inputs.fleets) {
    if (fleet.state !== 'active' || seenFleets.has(fleet.id)) continue;
    seenFleets.add(fleet.id);
    const hooks = hooksByFleet.get(fleet.id) ?? [];
    if (hooks.length === 0) continue;
    for (const view of viewByQueue.values()) {
      if (!isStalled(view, now, cfg) || !hooks.some((h) => canReceive(h, fleet, view.queue))) continue;
      const pair = { fleetId: fleet.id, queue: view.queue };
      if (inputs.mayCharge && !inputs.mayCharge(pair)) continue;
      const previous = ledgerByPair.get(pairKeyOf(pair)) ?? null;
      const { due, progress } = isDue(previous, now, inputs.lastClaimAt.get(view.queue), cfg);
      if (!due) continue;
      charges.push({
        ...pair,
        previous,
        next: nextLedgerRow(pair, previous, now, progress),
        representative: { ...view.oldestGateDue! },
      });
    }
  }

  charges.sort(compareCharges);
  return { drain, charges: charges.slice(0, Math.max(0, cfg.sweepLimit)) };
}

/**
 * One view per queue from the views of several nodes (each node holds only the rows it owns): a queue
 * has gate-passing due work if any node has, and its representative is the oldest across nodes (ties
 * by key, so every node picks the same row).
 */
export function mergeDueViews(perNode: readonly (readonly QueueDueView[])[]): QueueDueView[] {
  const merged = new Map<string, QueueDueView>();
  for (const views of perNode) {
    for (const v of views) {
      const have = merged.get(v.queue);
      if (!have) {
        merged.set(v.queue, { queue: v.queue, hasGateDue: v.hasGateDue, oldestGateDue: v.oldestGateDue });
        continue;
      }
      have.hasGateDue ||= v.hasGateDue;
      const a = have.oldestGateDue;
      const b = v.oldestGateDue;
      if (b && (!a || b.dueMs < a.dueMs || (b.dueMs === a.dueMs && b.key < a.key))) have.oldestGateDue = b;
    }
  }
  return [...merged.values()];
}
