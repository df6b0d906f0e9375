// The load balancer's probes (docs/operating.md "Probes"): `live` and `ready` answer without
// credentials and with a status word only. A node whose keeper has not published is held there the way
// production holds it: it has a replication peer that is down, so its keeper waits for that peer's beat
// (capped) before it loads. Two replicating nodes with one worker each, as in the cluster tests.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { beatStaleAfterMs } from '../../util/cluster/holding.js';
import { ADMIN_PASS, ADMIN_USER, startHarper, type FetchResult, type HarperInstance } from '../harness.js';
import { until } from '../wait.js';

const AUTH = 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64');
const CONFIG = { queue: { keeper: { publishInterval: 200, stateInterval: 1000 } } };
const PEER_WAIT_CAP_MS = 10_000;

let a: HarperInstance | undefined;
let b: HarperInstance | undefined;

const boot = (name: string, root?: string, env?: Record<string, string>) =>
  startHarper({ threads: 1, root, env, replicationHostname: name });

/** A probe as a balancer sends it: no credentials, a fresh connection. */
const probe = (path: string, method = 'GET'): Promise<FetchResult> =>
  a!.fetch(path, { method, auth: null, fresh: true });

/** The node's beats as node-a reads them (the table is not exported: the operations API). */
async function beats(): Promise<Array<{ id: string; beatAt: number }>> {
  return a!.operation({
    operation: 'search_by_value',
    database: 'render_queue',
    table: 'QueueNode',
    search_attribute: 'id',
    search_value: '*',
    get_attributes: ['id', 'beatAt'],
  });
}

before(async () => {
  const started = await Promise.allSettled([boot('node-a'), boot('node-b')]);
  if (started[0].status === 'fulfilled') a = started[0].value;
  if (started[1].status === 'fulfilled') b = started[1].value;
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await Promise.all([a?.destroy(), b?.destroy()]);
    throw failed.reason;
  }
  await b!.operation({
    operation: 'add_node',
    hostname: 'node-a',
    url: a!.replicationUrl,
    authorization: AUTH,
    retain_authorization: true,
  });
  for (const n of [a!, b!]) {
    const r = await n.fetch('/prerender_admin/config', { body: CONFIG, fresh: true });
    assert.equal(r.status, 200, r.text);
  }
  await until(
    'node-a to read a fresh beat from node-b',
    async () => (await beats()).some((x) => x.id === 'node-b' && Date.now() - x.beatAt < 3000),
    30_000,
    250,
  );
});

after(async () => {
  await Promise.all([a?.destroy(), b?.destroy()]);
});

test('a node whose keeper has not published answers ready 503 to anyone, then 200 once it grants, with a word only', async (t) => {
  const live = await probe('/prerender_admin/ready');
  assert.equal(live.status, 200, `a live node is ready: ${live.text}`);
  assert.equal(live.text, 'ready\n');

  // node-b goes down, and node-a restarts: it waits for node-b's beat before it loads.
  await b!.stop();
  await until(
    "node-a to see node-b's beat go stale",
    async () => {
      const peer = (await beats()).find((x) => x.id === 'node-b');
      return peer !== undefined && Date.now() - peer.beatAt > beatStaleAfterMs(1000) + 1000;
    },
    40_000,
    250,
  );
  await a!.stop();
  const restartedAt = Date.now();
  a = await boot('node-a', a!.root, { QUEUE_KEEPER_PEER_WAIT_MS: String(PEER_WAIT_CAP_MS) });

  const waiting = await until(
    'the restarted node-a to report waiting-for-peers',
    async () => {
      const s = await a!.fetch('/prerender_admin/queue-state');
      return s.json?.trust?.phase === 'waiting-for-peers' ? s : undefined;
    },
    5000,
    50,
  );
  assert.equal(waiting.status, 503);
  const claim = await a!.fetch('/render_queue/claim', { body: { limit: 1 } });
  assert.equal(claim.headers['x-queue-status'], 'unready', 'claims are refused meanwhile');

  const unready = await probe('/prerender_admin/ready');
  assert.equal(unready.status, 503, unready.text);
  assert.equal(unready.text, 'unready\n', 'the answer is the status word and nothing else');
  assert.equal(unready.headers['cache-control'], 'no-store');
  assert.equal(unready.headers['retry-after'], undefined);
  const head = await probe('/prerender_admin/ready', 'HEAD');
  assert.equal(head.status, 503);
  assert.equal(head.text, '');
  const alive = await probe('/prerender_admin/live');
  assert.deepEqual([alive.status, alive.text], [200, 'live\n'], 'the process answers meanwhile');
  const liveHead = await probe('/prerender_admin/live', 'HEAD');
  assert.deepEqual([liveHead.status, liveHead.text], [200, '']);
  // Without credentials nothing else answers: not the detail, not another method on the probe's path.
  const health = await probe('/prerender_admin/health');
  assert.equal(health.status, 401);
  const post = await a!.fetch('/prerender_admin/ready', { method: 'POST', body: {}, auth: null });
  assert.equal(post.status, 401);

  const ready = await until(
    'node-a to load alone after the cap and answer ready',
    async () => {
      const r = await probe('/prerender_admin/ready');
      return r.status === 200 ? r : undefined;
    },
    PEER_WAIT_CAP_MS + 30_000,
    100,
  );
  const waited = Date.now() - restartedAt;
  t.diagnostic(`ready ${waited} ms after the restart (peer wait cap ${PEER_WAIT_CAP_MS} ms)`);
  assert.equal(ready.text, 'ready\n');
  assert.ok(waited >= PEER_WAIT_CAP_MS, 'not ready before the keeper could load');
  // Ready means claims are served: a row filed now is granted.
  const url = 'https://probes.example.com/after-ready';
  const filed = await a!.fetch('/render_queue/targets', { body: { targets: [{ url, dueAt: Date.now() }] } });
  assert.equal(filed.status, 200, filed.text);
  const granted = await until(
    'the ready node to grant the row',
    async () => {
      const c = await a!.fetch('/render_queue/claim', { body: { limit: 1 } });
      return Array.isArray(c.json) && c.json.length === 1 ? c.json : undefined;
    },
    10_000,
    100,
  );
  assert.equal(granted[0].url, url);
});
