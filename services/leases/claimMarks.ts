// The only module that names QueueClaimMark: each queue's latest claim instant, written by the claim
// path (paced per worker in claims.ts) and read by the stall sweep as its "progress" signal.
import { table, transaction, type HarperTable } from '../runtime/harper.js';

const marks = (): HarperTable => table('render_queue', 'QueueClaimMark');

/** Records `now` as the queues' last claim. Never moves a mark back: another worker may have written a later one. */
export async function writeClaimMarks(queues: readonly string[], now: number): Promise<void> {
  await transaction(async (txn) => {
    for (const q of queues) {
      const prev = Number((await marks().get(q, txn))?.lastClaimAt);
      if (!(prev >= now)) await marks().put(q, { id: q, lastClaimAt: now }, txn);
    }
  });
}

/** The latest claim time per queue, as any worker (before or after a restart) last recorded it. */
export async function readClaimMarks(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const r of marks().search({})) {
    const at = Number(r.lastClaimAt);
    if (Number.isFinite(at)) out.set(String(r.id), at);
  }
  return out;
}
