// Two replicating nodes (docs/clusters.md recipe, insecure ws on 127.0.0.1): each keeper holds only the rows
// it owns by rendezvous hashing over the node names, the two together hold every row once, and a claim
// on a node grants only that node's rows. Cluster-wide events happen once (docs/clusters.md): a queue's created
// and requeued wakes, a pair's stall wake; a pause of `all` reaches both nodes, a hostname only its node;
// a claim on either node counts as progress for the pair's owner.
import { after, before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Ownership } from '../../util/cluster/ownership.js';
import { ADMIN_PASS, ADMIN_USER, startHarper, type HarperInstance } from '../harness.js';
import { sleep, until } from '../wait.js';
import { heldByOneView, tableRows, untilRowsStream } from '../clusterJoin.js';
import { canListListeners, listenersOf } from '../listeners.js';

let a: HarperInstance;
let b: HarperInstance;
let receiver: http.Server;
let receiverUrl = '';
const wakes: Array<{
  id: string;
  at: number;
  body: { reason: string; queue: string; job: { url: string } };
}> = [];
const MIN = 60_000;
let joinMs = 0;

/** A node that replicates on its HTTP port (test/harness.ts `replicationHostname`). */
function node(name: string): Promise<HarperInstance> {
  return startHarper({ replicationHostname: name });
}

before(async () => {
  receiver = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      wakes.push({
        id: String(req.headers['webhook-id']),
        at: Date.now(),
        body: JSON.parse(raw) as (typeof wakes)[number]['body'],
      });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/wake`;
  a = await node('node-a');
  b = await node('node-b');
  // A ten-minute maintenance tick while the nodes link: the keepers must re-read the membership every
  // beat, not wait for a tick, to hold by the two-node view (below).
  for (const n of [a, b]) {
    const r = await n.fetch('/prerender_admin/config', { body: { maintenance: { tickInterval: 600_000 } } });
    assert.equal(r.status, 200, r.text);
  }
  await b.operation({
    operation: 'add_node',
    hostname: 'node-a',
    url: a.replicationUrl,
    authorization: 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64'),
    retain_authorization: true,
  });
  // The keepers re-read the membership every beat (1 s), so both nodes hold by the two-node view within
  // seconds of the link, not a tick later. Until then each holds every row, and a due row can be granted
  // on both.
  const joinedAt = Date.now();
  await until(
    'both nodes to publish the two-node view',
    () =>
      heldByOneView([
        { name: 'node-a', inst: a },
        { name: 'node-b', inst: b },
      ]),
    30_000,
    250,
  );
  joinMs = Date.now() - joinedAt;
  for (const n of [a, b]) {
    const r = await n.fetch('/prerender_admin/config', {
      body: {
        queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
        maintenance: { tickInterval: 500 },
        render: {
          routes: ['stallq', 'edgeq', 'progq', 'pauseq'].map((name) => ({
            name,
            match: 'prefix',
            path: `/${name.slice(0, -1)}/`,
          })),
        },
        notify: { allowHttp: true, allowCidrs: ['127.0.0.1'] },
        stall: { after: 1000, backoff: [5000], maxNudges: 2 },
      },
    });
    assert.equal(r.status, 200, r.text);
  }
  await untilRowsStream([
    { name: 'node-a', inst: a },
    { name: 'node-b', inst: b },
  ]);
});

after(async () => {
  await Promise.all([a?.destroy(), b?.destroy()]);
  await new Promise((r) => receiver?.close(r));
});

test(
  'linked nodes replicate on their HTTP ports and listen on 127.0.0.1 only',
  { skip: canListListeners ? false : 'needs Linux /proc' },
  async () => {
    const status = (await b.operation({ operation: 'cluster_status' })) as {
      connections: Array<{ name: string; url: string }>;
    };
    assert.deepEqual(
      status.connections.map((c) => [c.name, c.url]),
      [['node-a', a.replicationUrl]],
    );
    for (const n of [a, b]) {
      const given = new Set(Object.values(n.ports));
      const listeners = listenersOf(n.pid);
      const stray = listeners.filter((l) => l.address !== '127.0.0.1' || !given.has(l.port));
      assert.deepEqual(stray, [], `listeners beyond the harness's ports: ${JSON.stringify(listeners)}`);
    }
  },
);

test('two nodes split the rows by rendezvous ownership and each grants only its own', async (t) => {
  const urls = Array.from({ length: 400 }, (_, i) => `https://cluster.example.com/p/${i}`);
  const r = await a.fetch('/render_queue/targets', {
    body: { targets: urls.map((url) => ({ url, dueAt: Date.now() - MIN })) },
  });
  assert.equal(r.status, 200, r.text);
  const owners = new Ownership(['node-a', 'node-b'], 'node-a');
  const ownedByA = urls.filter((u) => owners.ownerOf(u) === 'node-a').length;
  t.diagnostic(
    `node-a owns ${ownedByA} of ${urls.length}; both held by the two-node view ${joinMs} ms after the link`,
  );

  const due = async (n: HarperInstance) => {
    const s = await n.fetch('/prerender_admin/queue-state');
    return s.status === 200 ? (s.json.now.due as number) : -1;
  };
  // On a miss, what each node's table has and how many events its keeper applied: rows that replicated
  // but were never delivered as events read tbl > events; rows never replicated read tbl < 400.
  const facts = async (n: HarperInstance) => {
    const s = await n.fetch('/prerender_admin/queue-state');
    const rows = await tableRows(n).catch(() => '?');
    const k = s.status === 200 ? s.json.trust.keeper : null;
    return `tbl=${rows} events=${k?.apply.events} lastVerify=${JSON.stringify(k?.lastVerify)}`;
  };
  let seen = '';
  await until(
    'each node to hold exactly its own rows',
    async () => {
      const [da, db] = [await due(a), await due(b)];
      seen = `a=${da} b=${db}`;
      return da === ownedByA && db === urls.length - ownedByA;
    },
    30_000,
  ).catch(async (e: unknown) => {
    seen += ` (a ${await facts(a)}; b ${await facts(b)})`;
    const logs = (n: HarperInstance) =>
      n
        .output()
        .split('\n')
        .filter((l) => /keeper|membership|clustered|hdb_nodes|replicat/i.test(l))
        .slice(-15)
        .join('\n');
    throw new Error(`${String(e)}; last ${seen}\n--- a:\n${logs(a)}\n--- b:\n${logs(b)}`);
  });

  const granted: Array<{ id: string; leaseToken: string }> = [];
  await until('node-a to grant every row it owns', async () => {
    const c = await a.fetch('/render_queue/claim', { body: { limit: 25 } });
    assert.equal(c.status, 200, c.text);
    granted.push(...(c.json as Array<{ id: string; leaseToken: string }>));
    return granted.length >= ownedByA;
  });
  await sleep(1000); // a few publishes more: nothing else may come
  const late = await a.fetch('/render_queue/claim', { body: { limit: 25 } });
  granted.push(...(late.json as Array<{ id: string; leaseToken: string }>));
  assert.equal(granted.length, ownedByA);
  assert.equal(new Set(granted.map((j) => j.id)).size, ownedByA);
  assert.ok(
    granted.every((j) => owners.ownerOf(j.id) === 'node-a'),
    'node-a granted only rows it owns',
  );
});

test('a queue stalled across both nodes is woken once per backoff step, by one node', async (t) => {
  const fleet = await a.fetch('/prerender_admin/fleets', {
    body: { name: 'cluster-fleet', queues: ['stallq'] },
  });
  assert.equal(fleet.status, 200, fleet.text);
  const hook = await a.fetch('/prerender_admin/hooks', {
    body: { fleetId: fleet.json.id, url: receiverUrl },
  });
  assert.equal(hook.status, 200, hook.text);
  const owners = new Ownership(['node-a', 'node-b'], 'node-a');
  // The pair is charged by its owner node; make the oldest row live on the OTHER node, so the wake can
  // only name it if the owner merged the other node's view.
  const pairOwner = owners.ownerOf(JSON.stringify([fleet.json.id, 'stallq']));
  const all = Array.from({ length: 40 }, (_, i) => `https://cluster.example.com/stall/${i}`);
  const first = all.find((u) => owners.ownerOf(u) !== pairOwner)!;
  const urls = [first, ...all.filter((u) => u !== first)];
  t.diagnostic(`pair owner ${pairOwner}; oldest row on ${owners.ownerOf(first)}`);
  const filed = await a.fetch('/render_queue/targets', {
    // A minute apart (due times are minute-floored), so the oldest row is unambiguous.
    body: { targets: urls.map((url, i) => ({ url, dueAt: Date.now() - 50 * MIN + i * MIN })) },
  });
  assert.equal(filed.status, 200, filed.text);
  const stalled = () => wakes.filter((w) => w.body.reason === 'stalled');
  await until('the first stalled wake', async () => stalled().length >= 1, 30_000);
  await sleep(3000); // six ticks on each node: only the pair's owner may charge
  assert.equal(stalled().length, 1, 'one wake, not one per node');
  // The first wake may come before the other node's view has replicated (one tick plus replication), so
  // it names a due row of the queue; the next names the oldest row across both nodes, held by the node
  // that did not charge.
  assert.ok(urls.includes(stalled()[0]!.body.job.url));
  await until('the second wake after the backoff', async () => stalled().length >= 2, 15_000);
  assert.equal(stalled()[1]!.body.job.url, urls[0]);
  await sleep(6000); // past another backoff step: the cap (2) holds across nodes
  assert.equal(stalled().length, 2);
  const ledgers = await Promise.all(
    [a, b].map(async (n) => (await n.fetch('/prerender_admin/stall-ledger')).json),
  );
  assert.deepEqual(ledgers[0], ledgers[1]);
  assert.equal(ledgers[0][0].nudges, 2);
});

const NODES = ['node-a', 'node-b'] as const;
const both = new Ownership([...NODES], 'node-a');
const inst = (name: string) => (name === 'node-a' ? a : b);

async function fleetWithHook(name: string, queue: string): Promise<string> {
  const fleet = await a.fetch('/prerender_admin/fleets', { body: { name, queues: [queue] } });
  assert.equal(fleet.status, 200, fleet.text);
  const hook = await a.fetch('/prerender_admin/hooks', {
    body: { fleetId: fleet.json.id, url: receiverUrl },
  });
  assert.equal(hook.status, 200, hook.text);
  return fleet.json.id as string;
}

/** Applies a config change on both nodes for one test, and puts the replaced values back after it. */
async function configBoth(t: TestContext, partial: Record<string, Record<string, unknown>>): Promise<void> {
  for (const n of [a, b]) {
    const current = (await n.fetch('/prerender_admin/config')).json as Record<
      string,
      Record<string, unknown>
    >;
    const back = Object.fromEntries(
      Object.entries(partial).map(([k, v]) => [
        k,
        Object.fromEntries(Object.keys(v).map((f) => [f, current[k]![f]])),
      ]),
    );
    t.after(async () => void (await n.fetch('/prerender_admin/config', { body: back })));
    const r = await n.fetch('/prerender_admin/config', { body: partial });
    assert.equal(r.status, 200, r.text);
  }
}

async function claimOn(n: HarperInstance, queue: string, limit = 1) {
  const r = await n.fetch('/render_queue/claim', { body: { limit, queues: [queue] } });
  assert.equal(r.status, 200, r.text);
  return {
    jobs: r.json as Array<{ id: string; expiresAt: number }>,
    status: String(r.headers['x-queue-status']),
  };
}

test("a queue's created wake rings once for the cluster, and leases expiring on both nodes ring requeued once", async (t) => {
  // Cooldown 4 s: shorter than the lease (5 s, the minimum), so the requeue may ring after the created
  // edge; longer than the gap between the two nodes' expiries reaching the queue's judge.
  await configBoth(t, { notify: { edgeCooldown: 4000 }, queue: { jobLeaseTime: 5000 } });
  await fleetWithHook('edge-fleet', 'edgeq');
  const urls = Array.from({ length: 20 }, (_, i) => `https://cluster.example.com/edge/${i}`);
  for (const n of NODES)
    assert.ok(
      urls.some((u) => both.ownerOf(u) === n),
      `${n} holds some edgeq rows`,
    );
  const filed = await a.fetch('/render_queue/targets', {
    body: { targets: urls.map((url) => ({ url, dueAt: Date.now() - MIN })) },
  });
  assert.equal(filed.status, 200, filed.text);
  const of = (reason: string) => wakes.filter((w) => w.body.queue === 'edgeq' && w.body.reason === reason);
  await until('the created wake', () => of('created').length >= 1, 20_000);
  // Each node saw the queue go from nothing due to something due; judged per node, both would ring
  // within a publish tick or two.
  await sleep(2500);
  assert.equal(of('created').length, 1, 'one created wake for the cluster, not one per node');
  assert.ok(urls.includes(of('created')[0]!.body.job.url));

  // One lease on each node, both left to expire unreported.
  const leases = [await claimOn(a, 'edgeq'), await claimOn(b, 'edgeq')].map((c) => c.jobs[0]);
  assert.ok(leases.every(Boolean), 'each node granted one of its edgeq rows');
  const expiresAt = Math.max(...leases.map((j) => j!.expiresAt));
  const first = await until('the requeued wake', () => of('requeued')[0], 20_000);
  t.diagnostic(`requeued wake ${first.at - expiresAt} ms after the later expiry`);
  await sleep(2500); // both expiries have reached the judge by now (ticks of 500 ms)
  assert.equal(of('requeued').length, 1, 'two expiries on two nodes inside one cooldown: one wake');
  assert.ok(urls.includes(first.body.job.url));
});

test('pause `all` on one node stops claims on both; pause of a hostname stops only that node', async () => {
  const statusOf = async (n: HarperInstance) => (await claimOn(n, 'pauseq')).status;
  const pause = async (path: 'pause' | 'resume', scope: string) => {
    const r = await a.fetch(`/prerender_admin/${path}`, { body: { scope } });
    assert.equal(r.status, 200, r.text);
  };
  await pause('pause', 'all');
  await until(
    'both nodes to answer claims paused',
    async () => (await statusOf(a)) === 'paused' && (await statusOf(b)) === 'paused',
    10_000,
  );
  await pause('resume', 'all');
  await until(
    'both nodes to serve again',
    async () => (await statusOf(a)) !== 'paused' && (await statusOf(b)) !== 'paused',
    10_000,
  );
  await pause('pause', 'node-b'); // sent to node-a: the intent replicates to node-b
  try {
    await until('node-b to answer claims paused', async () => (await statusOf(b)) === 'paused', 10_000);
    assert.notEqual(await statusOf(a), 'paused', 'node-a still serves');
    const overview = (await a.fetch('/prerender_admin/overview')).json as { paused: boolean };
    assert.equal(overview.paused, false);
  } finally {
    await pause('resume', 'node-b');
  }
  await until('node-b to serve again', async () => (await statusOf(b)) !== 'paused', 10_000);
});

test("a claim on the node that does not own a stalled pair resets the pair's ledger on its owner within a tick or two", async (t) => {
  const fleetId = await fleetWithHook('progress-fleet', 'progq');
  const pairOwner = both.ownerOf(JSON.stringify([fleetId, 'progq']));
  const other = NODES.find((n) => n !== pairOwner)!;
  const urls = Array.from({ length: 20 }, (_, i) => `https://cluster.example.com/prog/${i}`);
  assert.ok(
    urls.some((u) => both.ownerOf(u) === other),
    `${other} holds some progq rows`,
  );
  const filed = await a.fetch('/render_queue/targets', {
    body: { targets: urls.map((url, i) => ({ url, dueAt: Date.now() - 50 * MIN + i * MIN })) },
  });
  assert.equal(filed.status, 200, filed.text);
  const stalled = () => wakes.filter((w) => w.body.queue === 'progq' && w.body.reason === 'stalled');
  const wake1 = await until('the first stalled wake', () => stalled()[0], 30_000);
  // Without progress the next wake is due one backoff step (5 s) after the first, as the second nudge.
  const claim = await claimOn(inst(other), 'progq');
  assert.equal(claim.jobs.length, 1, `${other} granted one of its progq rows`);
  const claimedAt = Date.now();
  const wake2 = await until('the wake after the progress', () => stalled()[1], 4000, 50);
  t.diagnostic(
    `claim on ${other} ${claimedAt - wake1.at} ms after the first wake; next wake from ${pairOwner} ${wake2.at - claimedAt} ms after the claim`,
  );
  assert.ok(wake2.at - wake1.at < 5000, 'woken before the backoff step: the claim counted as progress');
  const ledger = (await inst(pairOwner).fetch('/prerender_admin/stall-ledger')).json as Array<{
    fleetId: string;
    queue: string;
    nudges: number;
  }>;
  assert.equal(
    ledger.find((r) => r.fleetId === fleetId && r.queue === 'progq')?.nudges,
    1,
    'back to its first nudge',
  );
});
