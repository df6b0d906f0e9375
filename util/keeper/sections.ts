// How the ready set's extra rows are shared between queues (its per-queue sections). The global
// top already holds `have` rows of a queue; its section is those plus its extras. The floor is an equal
// share of the extra room, floor(budget / queues): a queue whose top rows reach it gets no extras. The
// others share the whole budget max-min fair: each section reaches min(due, L) for the highest level L
// the budget allows, so a queue with 1 % of the due rows gets as many as the budget can give, and never
// fewer than min(due, floor). Pure: no Harper import.

export interface QueueShare {
  /** The queue's due rows (leased ones included: the keeper's count). */
  due: number;
  /** Its rows already in the global top. */
  have: number;
}

/** Extras per queue (0 for most); their sum never exceeds `budget`. */
export function sectionQuotas(all: ReadonlyMap<string, QueueShare>, budget: number): Map<string, number> {
  const quotas = new Map<string, number>();
  const room = Math.max(0, Math.floor(budget));
  const floor = Math.floor(room / Math.max(1, all.size));
  // (With less room than queues the floor is 0, and the queues with no top row share what there is.)
  const queues = new Map([...all].filter(([, q]) => q.have < Math.max(1, floor)));
  const need = (q: QueueShare, level: number) => Math.max(0, Math.min(q.due, level) - q.have);
  const total = (level: number) => {
    let sum = 0;
    for (const q of queues.values()) sum += need(q, level);
    return sum;
  };
  let top = 0;
  for (const q of queues.values()) top = Math.max(top, q.due);
  // The highest level whose extras fit: total() grows with the level, so a binary search finds it.
  let lo = 0;
  let hi = top;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (total(mid) <= room) lo = mid;
    else hi = mid - 1;
  }
  let left = room - total(lo);
  // What is left (fewer rows than queues still short) goes one each, in name order, to those queues.
  const names = [...queues.keys()].sort();
  for (const name of names) {
    const q = queues.get(name)!;
    let n = need(q, lo);
    if (left > 0 && need(q, lo + 1) > n) {
      n++;
      left--;
    }
    if (n > 0) quotas.set(name, n);
  }
  return quotas;
}
