// The per-queue series of the scrape: due rows, the oldest due row's age, lateness in cadences
// and leases held, from the queue-state document and a lease-table count. The `queue` label takes only
// the configured route names and `unrouted`: a name from anywhere else (a route removed since the
// document was computed, a lease's unknown queue hash) yields no series, so the number of series is
// bounded by the configuration and never by what callers send. Pure.
import { nameHash } from '../leases/token.js';

/** The parts of the queue-state document (util/keeper/stateCounts.ts) read here. */
export interface QueueStateLateness {
  byRoute: ReadonlyArray<{ route: string; due: number }>;
  classes: ReadonlyArray<{
    route: string;
    oldestDueAt: number | null;
    oldestLatenessCadences: number | null;
  }>;
  listsTruncated: boolean;
}

export interface QueueSample {
  labels: { queue: string };
  value: number;
}

export interface QueueSeries {
  due: QueueSample[];
  oldestDueAgeSeconds: QueueSample[];
  latenessCadences: QueueSample[];
  leases: QueueSample[];
}

const UNROUTED = 'unrouted';

/** The label's whole domain: the configured routes, then `unrouted`. */
export function queueNames(routes: ReadonlyArray<{ name: string }>): string[] {
  return [...routes.map((r) => r.name), UNROUTED];
}

/**
 * `lateness` is null while the keeper cannot vouch for its numbers: then only the lease counts are
 * reported. With lists truncated (more than STATE_LIST_CAP routes or classes) a queue the document
 * leaves out gets no due/age/lateness sample rather than a made-up zero.
 */
export function queueSeries(
  queues: readonly string[],
  lateness: QueueStateLateness | null,
  leasesByHash: ReadonlyMap<number, number>,
  now: number,
): QueueSeries {
  const out: QueueSeries = { due: [], oldestDueAgeSeconds: [], latenessCadences: [], leases: [] };
  const known = new Set(queues);
  const due = new Map<string, number>();
  const oldest = new Map<string, { at: number | null; cadences: number | null }>();
  for (const r of lateness?.byRoute ?? []) if (known.has(r.route)) due.set(r.route, r.due);
  for (const c of lateness?.classes ?? []) {
    if (!known.has(c.route) || c.oldestDueAt === null) continue;
    const o = oldest.get(c.route) ?? { at: null, cadences: null };
    if (o.at === null || c.oldestDueAt < o.at) o.at = c.oldestDueAt;
    if (c.oldestLatenessCadences !== null && (o.cadences === null || c.oldestLatenessCadences > o.cadences))
      o.cadences = c.oldestLatenessCadences;
    oldest.set(c.route, o);
  }
  for (const queue of queues) {
    const labels = { queue };
    out.leases.push({ labels, value: leasesByHash.get(nameHash(queue)) ?? 0 });
    if (lateness === null) continue;
    const n = due.get(queue) ?? (lateness.listsTruncated ? undefined : 0);
    if (n === undefined) continue;
    out.due.push({ labels, value: n });
    const o = oldest.get(queue);
    if (n === 0) {
      out.oldestDueAgeSeconds.push({ labels, value: 0 });
      out.latenessCadences.push({ labels, value: 0 });
    } else if (o?.at != null) {
      out.oldestDueAgeSeconds.push({ labels, value: Math.max(0, now - o.at) / 1000 });
      out.latenessCadences.push({ labels, value: o.cadences ?? 0 });
    }
  }
  return out;
}
