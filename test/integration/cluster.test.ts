// Two replicating nodes (HARPER.md §8 recipe, insecure ws on 127.0.0.1): each keeper holds only the rows
// it owns by rendezvous hashing over the node names, the two together hold every row once, and a claim
// on a node grants only that node's rows.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Ownership } from '../../util/cluster/ownership.js';
import { ADMIN_PASS, ADMIN_USER, freePort, startHarper, type HarperInstance } from '../harness.js';
import { sleep, until } from '../wait.js';

let a: HarperInstance;
let b: HarperInstance;
let receiver: http.Server;
let receiverUrl = '';
const wakes: Array<{ id: string; body: { reason: string; queue: string; job: { url: string } } }> = [];
const MIN = 60_000;

async function node(name: string): Promise<{ inst: HarperInstance; url: string }> {
  const port = await freePort();
  const url = `ws://127.0.0.1:${port}`;
  const inst = await startHarper({
    harperConfig: {
      replication: {
        hostname: name,
        url,
        port: `127.0.0.1:${port}`,
        securePort: `127.0.0.1:${await freePort()}`,
      },
    },
  });
  return { inst, url };
}

before(async () => {
  receiver = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      wakes.push({
        id: String(req.headers['webhook-id']),
        body: JSON.parse(raw) as (typeof wakes)[number]['body'],
      });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/wake`;
  const na = await node('node-a');
  a = na.inst;
  b = (await node('node-b')).inst;
  await b.operation({
    operation: 'add_node',
    hostname: 'node-a',
    url: na.url,
    authorization: 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64'),
    retain_authorization: true,
  });
  for (const n of [a, b]) {
    const r = await n.fetch('/prerender_admin/config', {
      body: {
        queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
        maintenance: { tickInterval: 500 },
        render: { routes: [{ name: 'stallq', match: 'prefix', path: '/stall/' }] },
        notify: { allowHttp: true, allowCidrs: ['127.0.0.1'] },
        stall: { after: 1000, backoff: [5000], maxNudges: 2 },
      },
    });
    assert.equal(r.status, 200, r.text);
  }
});

after(async () => {
  await Promise.all([a?.destroy(), b?.destroy()]);
  await new Promise((r) => receiver?.close(r));
});

test('two nodes split the rows by rendezvous ownership and each grants only its own', async (t) => {
  const urls = Array.from({ length: 400 }, (_, i) => `https://cluster.example.com/p/${i}`);
  const r = await a.fetch('/render_queue/targets', {
    body: { targets: urls.map((url) => ({ url, dueAt: Date.now() - MIN })) },
  });
  assert.equal(r.status, 200, r.text);
  const owners = new Ownership(['node-a', 'node-b'], 'node-a');
  const ownedByA = urls.filter((u) => owners.ownerOf(u) === 'node-a').length;
  t.diagnostic(`node-a owns ${ownedByA} of ${urls.length}`);

  const due = async (n: HarperInstance) => {
    const s = await n.fetch('/prerender_admin/queue-state');
    return s.status === 200 ? (s.json.now.due as number) : -1;
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
  ).catch((e: unknown) => {
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
