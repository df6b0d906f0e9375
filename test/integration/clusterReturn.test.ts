// A node of three that returns while the machine is busy (docs/clusters.md, "A node that returns"): after
// the return every row of the table is held by exactly one keeper within a bound, and none by two at any
// sampled moment. Two CPU-bound child processes run beside the cluster from the stop to the end, as on a
// busy production machine where the returning node catches up while fleets claim.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { Ownership } from '../../util/cluster/ownership.js';
import { startHarper, type HarperInstance } from '../harness.js';
import { sleep, until } from '../wait.js';
import { addNode, heldByOneView, untilRowsStream } from '../clusterJoin.js';
import { key } from '../rowKeys.js';

const NAMES = ['node-a', 'node-b', 'node-c'] as const;
type Name = (typeof NAMES)[number];
const CONFIG = {
  queue: { keeper: { publishInterval: 250, stateInterval: 1000 } },
  maintenance: { tickInterval: 1000 },
};
const all3 = new Ownership([...NAMES], 'node-a');
/** How long after the returning node answers every row must be held once (the target is 15 s). */
const HELD_WITHIN_MS = 30_000;
const ROWS = 900;
const DUE = 300;

const nodes = new Map<Name, HarperInstance>();
const burners: ChildProcess[] = [];

function node(name: Name): HarperInstance {
  return nodes.get(name)!;
}

async function boot(name: Name, root?: string): Promise<HarperInstance> {
  return startHarper({ threads: 1, root, replicationHostname: name });
}

/** Two CPU-bound processes: the machine is busy while the node returns. Stopped by pid in after(). */
function burnCpu(n: number): void {
  for (let i = 0; i < n; i++)
    burners.push(spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
}

function stopBurners(): void {
  for (const b of burners.splice(0)) if (b.pid !== undefined && b.exitCode === null) b.kill('SIGKILL');
}

/** Rows a node's keeper holds now (its overview's live count), or null while it does not answer. */
async function heldRows(name: Name): Promise<number | null> {
  try {
    const r = await node(name).fetch('/prerender_admin/overview', { timeoutMs: 5000 });
    if (r.status !== 200) return null;
    return (r.json.keeper?.stats?.rows as number | undefined) ?? null;
  } catch {
    return null;
  }
}

async function held(url: string, name: Name): Promise<boolean> {
  const r = await node(name).fetch('/prerender_admin/explain', { body: { url }, timeoutMs: 10_000 });
  assert.equal(r.status, 200, r.text);
  return Boolean(r.json.held);
}

function keeperLog(name: Name, from = 0): string {
  return node(name)
    .output()
    .slice(from)
    .split('\n')
    .filter((l) => /keeper|membership|peer wait|cluster:/i.test(l))
    .slice(-30)
    .join('\n');
}

before(async () => {
  const started = await Promise.allSettled(NAMES.map(async (n) => [n, await boot(n)] as const));
  for (const s of started) if (s.status === 'fulfilled') nodes.set(s.value[0], s.value[1]);
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  const stopAll = () => Promise.all([...nodes.values()].map((n) => n.destroy()));
  if (failed) {
    await stopAll();
    nodes.clear();
    throw failed.reason;
  }
  try {
    const link = (from: Name, to: Name) => addNode(node(from), to, node(to));
    await link('node-b', 'node-a');
    await link('node-c', 'node-a');
    await link('node-c', 'node-b');
    for (const n of NAMES) {
      const r = await node(n).fetch('/prerender_admin/config', { body: CONFIG, fresh: true });
      assert.equal(r.status, 200, r.text);
    }
    const list = () => NAMES.map((name) => ({ name, inst: node(name) }));
    await until('the three nodes to hold by one view', () => heldByOneView(list()), 60_000, 250);
    await untilRowsStream(list());
  } catch (e) {
    await stopAll();
    nodes.clear();
    throw e;
  }
});

after(async () => {
  stopBurners();
  await Promise.all([...nodes.values()].map((n) => n.destroy()));
});

test('a node that returns on a busy machine: every row is held by exactly one keeper within the bound', async (t) => {
  const now = Date.now();
  const urls = Array.from({ length: ROWS }, (_, i) => `https://return.example.com/p/${i}`);
  const targets = urls.map((url, i) => ({ url, dueAt: i < DUE ? now - 60_000 : now + 3_600_000 }));
  const filed = await node('node-a').fetch('/render_queue/targets', { body: { targets } });
  assert.equal(filed.status, 200, filed.text);
  let lastHeld = '';
  const sumHeld = async (names: readonly Name[]) => {
    const h = await Promise.all(names.map(heldRows));
    lastHeld = `${names.join('/')} held ${h.join('/')}`;
    return h.some((x) => x === null) ? null : h.reduce<number>((s, x) => s + x!, 0);
  };
  await until(
    'the three keepers to hold every row',
    async () => (await sumHeld(NAMES)) === ROWS || (t.diagnostic(lastHeld), false),
    60_000,
    1000,
  );

  // One node stops (data kept); the two others take its rows over, and every due row is granted once.
  const c = node('node-c');
  const root = c.root;
  await c.stop();
  const two = ['node-a', 'node-b'] as const;
  await until(
    'node-a and node-b to hold every row',
    async () => (await sumHeld(two)) === ROWS || (t.diagnostic(lastHeld), false),
    60_000,
    1000,
  );
  /** The URLs granted; each job is its URL's desktop row. */
  const granted = new Set<string>();
  /** One claim on `n` (limit 10), each job reported rendered at once: the schedule is written meanwhile. */
  const claimAndReport = async (n: Name): Promise<void> => {
    const r = await node(n).fetch('/render_queue/claim', { body: { limit: 10 }, timeoutMs: 20_000 });
    if (r.status !== 200) return;
    for (const j of r.json as Array<{ id: string; url: string; leaseToken: string }>) {
      assert.equal(j.id, key(j.url), 'a job is the desktop row of its URL');
      assert.ok(!granted.has(j.url), `${j.id} granted twice`);
      granted.add(j.url);
      const res = await node(n).fetch('/render_queue/job_result', {
        body: { id: j.id, leaseToken: j.leaseToken, outcome: 'rendered', statusCode: 200, body: 'x' },
        timeoutMs: 20_000,
      });
      assert.equal(res.status, 200, res.text);
    }
  };
  // Half the due rows are rendered while node-c is away.
  await until(
    'half the due rows to be granted and rendered on node-a or node-b',
    async () => {
      for (const n of two) await claimAndReport(n);
      return granted.size >= DUE / 2;
    },
    60_000,
    100,
  );

  // The machine gets busy, then the node comes back on the same data.
  burnCpu(2);
  const back = await boot('node-c', root);
  nodes.set('node-c', back);
  const answeredAt = Date.now();
  const sample = urls.filter((_, i) => i % 37 === 0);
  // Settled: each keeper holds exactly its rendezvous share over the three nodes, adding up to the table.
  const want = NAMES.map((n) => urls.filter((u) => all3.ownerOf(u) === n).length);
  const figures: string[] = [];
  let heldAllAt: number | null = null;
  while (Date.now() - answeredAt < HELD_WITHIN_MS + 5_000) {
    // Fleets go on claiming and reporting on every node while node-c catches up.
    for (const n of NAMES) await claimAndReport(n).catch(() => undefined);
    const h = await Promise.all(NAMES.map(heldRows));
    const text = h.join('/');
    if (figures.at(-1) !== text) figures.push(text);
    // No row held twice at any sampled moment.
    for (const url of sample) {
      const holders: Name[] = [];
      for (const n of NAMES) if (await held(url, n)) holders.push(n);
      assert.ok(holders.length <= 1, `${url} held by ${holders.join(' and ')}`);
    }
    if (h.every((x, i) => x === want[i])) {
      heldAllAt = Date.now();
      break;
    }
    await sleep(500);
  }
  stopBurners();
  t.diagnostic(`held node-a/node-b/node-c as it changed: ${figures.join(' → ')} (shares ${want.join('/')})`);
  if (heldAllAt === null) {
    const missing: string[] = [];
    for (const url of urls) {
      let any = false;
      for (const n of NAMES) if (await held(url, n)) any = true;
      if (!any) missing.push(`${url} (owner ${all3.ownerOf(url)}${granted.has(url) ? ', granted' : ''})`);
    }
    assert.fail(
      `${missing.length} rows held by no keeper ${HELD_WITHIN_MS} ms after node-c answered: ` +
        `${missing.slice(0, 20).join(', ')}\n--- node-c:\n${keeperLog('node-c')}\n--- node-a:\n${keeperLog('node-a')}`,
    );
  }
  t.diagnostic(`every row held once ${heldAllAt - answeredAt} ms after node-c answered`);
  // Each node walks once more when the return has settled; whatever it took up is reported, not hidden.
  for (const n of NAMES) {
    const walked = await until(`${n} to report its walk once the return settled`, async () => {
      const s = await node(n).fetch('/prerender_admin/queue-state');
      return s.status === 200 && s.json.trust.keeper.lastSettledWalk ? s.json.trust.keeper : undefined;
    });
    t.diagnostic(
      `${n}: settled walk of ${walked.lastSettledWalk.rows} rows in ${Math.round(walked.lastSettledWalk.ms)} ms, ` +
        `${walked.recoveredTotal} recovered`,
    );
    assert.equal(walked.lastSettledWalk.rows, ROWS, `${n}'s walk saw the whole table`);
  }
});
