// Joining nodes in tests and benches: wait until rows written on each node stream to the others before
// filing anything.
//
// When `add_node` links two nodes, Harper 4.7.29 first copies each database whole to the new peer. The
// copy walks the live table and then resumes the audit log after the newest record it copied, so a
// transaction committed while the copy runs can be skipped on the new node for good: a cluster.test run
// filed 400 rows right after the link and 100 of them (one transaction) never reached node-b; the
// cluster bench once had 681 of 30,000 missing on node-c (docs/clusters.md, "Joining a node"). A
// probe row that arrives proves the copy is over; rows filed after it stream like any later write.
import assert from 'node:assert/strict';
import { ADMIN_PASS, ADMIN_USER, type HarperInstance } from './harness.js';
import { sleep, until } from './wait.js';
import { key } from './rowKeys.js';

const DAY = 86_400_000;

/** Links `from` to `to` (Harper's add_node, the admin's Basic credentials retained; docs/clusters.md). */
export function addNode(from: HarperInstance, toName: string, to: HarperInstance): Promise<unknown> {
  return from.operation({
    operation: 'add_node',
    hostname: toName,
    url: to.replicationUrl,
    authorization: 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64'),
    retain_authorization: true,
  });
}

/** Rows in a node's RenderSchedule table, optionally narrowed by a SQL `WHERE` clause. */
export async function tableRows(n: HarperInstance, where = ''): Promise<number> {
  const r = (await n.operation({
    operation: 'sql',
    sql: `SELECT COUNT(*) AS c FROM render_schedule.RenderSchedule${where}`,
  })) as Array<{ c: number }>;
  return r[0]?.c ?? 0;
}

/**
 * Files a probe row (due in a day) on each node in turn until one reaches every other node, then deletes
 * the probes and waits until no node has any. A probe not seen everywhere within 3 s may have been skipped
 * like any other row, so another is filed; the whole wait fails after `ms`.
 */
export async function untilRowsStream(
  nodes: ReadonlyArray<{ name: string; inst: HarperInstance }>,
  ms = 45_000,
): Promise<void> {
  for (const from of nodes) {
    const others = nodes.filter((n) => n !== from);
    const probes: string[] = [];
    await until(
      `a probe row filed on ${from.name} to reach ${others.map((n) => n.name).join(', ')}`,
      async () => {
        const url = `https://join-probe.example.com/${from.name}/${probes.length}`;
        probes.push(url);
        const r = await from.inst.fetch('/render_queue/targets', {
          body: { targets: [{ url, dueAt: Date.now() + DAY }] },
        });
        assert.equal(r.status, 200, r.text);
        const deadline = Date.now() + 3000;
        while (Date.now() < deadline) {
          const seen = await Promise.all(
            others.map((n) => tableRows(n.inst, ` WHERE cacheKey = '${key(url)}'`)),
          );
          if (seen.every((c) => c === 1)) return true;
          await sleep(100);
        }
        return false;
      },
      ms,
      0,
    );
    const d = await from.inst.fetch('/render_queue/targets', { method: 'DELETE', body: { urls: probes } });
    assert.equal(d.status, 200, d.text);
  }
  await until('the probe rows to be gone on every node', async () => {
    const left = await Promise.all(
      nodes.map((n) => tableRows(n.inst, ` WHERE cacheKey LIKE 'https://join-probe.example.com/%'`)),
    );
    return left.every((c) => c === 0);
  });
}

/**
 * Whether every node reads a fresh beat (at most `freshMs` old) from every node, each publishing the view
 * of exactly these nodes: from then on each row is held by one node. Before, a node still holds by the
 * view it had alone, and a due row can be granted on more than one. (`npm run start:cluster` checks the
 * same over its own HTTP calls, scripts/start-cluster.mjs `untilSettled`.)
 */
export async function heldByOneView(
  nodes: ReadonlyArray<{ name: string; inst: HarperInstance }>,
  freshMs = 4000,
): Promise<boolean> {
  const want = nodes
    .map((n) => n.name)
    .sort()
    .join(',');
  for (const n of nodes) {
    const beats = (await n.inst.operation({
      operation: 'sql',
      sql: 'SELECT id, view, beatAt FROM render_queue.QueueNode',
    })) as Array<{ id: string; view: string[] | null; beatAt: number }>;
    for (const m of nodes) {
      const b = beats.find((x) => x.id === m.name);
      if (!b || Date.now() - b.beatAt > freshMs || (b.view ?? []).join(',') !== want) return false;
    }
  }
  return true;
}
