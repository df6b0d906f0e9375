// Three replicating nodes on 127.0.0.1 (docs/clusters.md recipe; 1 worker thread each — three Harpers with
// two threads each are too slow on the shared 2-core box). Every row has exactly one holder; clients
// spread over the nodes drain everything once; a stopped node's rows are picked up by the other two and
// move back when it returns, never held twice on the way.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { beatStaleAfterMs } from '../../util/cluster/holding.js';
import { Ownership } from '../../util/cluster/ownership.js';
import { startHarper, type FetchInit, type FetchResult, type HarperInstance } from '../harness.js';
import { sleep, until } from '../wait.js';
import { addNode, heldByOneView, untilRowsStream } from '../clusterJoin.js';
import { key } from '../rowKeys.js';

const NAMES = ['node-a', 'node-b', 'node-c'] as const;
type Name = (typeof NAMES)[number];
const MIN = 60_000;
const CONFIG = {
  queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
  maintenance: { tickInterval: 500 },
};
const all3 = new Ownership([...NAMES], 'node-a');

interface ClusterNode {
  name: Name;
  inst: HarperInstance;
}
const nodes = new Map<Name, ClusterNode>();
/** Every row filed so far, by any test (the table's count). */
const filed = new Set<string>();
let startedAll = 0;

/**
 * A node that replicates on its HTTP port (test/harness.ts `replicationHostname`). A restart on the same
 * root keeps its ports, so its replication URL too.
 */
async function bootNode(name: Name, root?: string, env?: Record<string, string>): Promise<ClusterNode> {
  const inst = await startHarper({ threads: 1, root, env, replicationHostname: name });
  return { name, inst };
}

function node(name: Name): HarperInstance {
  return nodes.get(name)!.inst;
}

/** The QueueNode beats one node sees (through the operations API: the table is not exported). */
async function beatsOn(name: Name): Promise<Array<{ id: string; view: string[] | null; beatAt: number }>> {
  return node(name).operation({
    operation: 'search_by_value',
    database: 'render_queue',
    table: 'QueueNode',
    search_attribute: 'id',
    search_value: '*',
    get_attributes: ['id', 'view', 'beatAt'],
  });
}

/** Every node sees a fresh beat from every node, each publishing the same view of these nodes. */
function settledOn(names: readonly Name[]): Promise<boolean> {
  return heldByOneView(names.map((name) => ({ name, inst: node(name) })));
}

async function heldRows(name: Name): Promise<number | null> {
  const r = await node(name).fetch('/prerender_admin/overview');
  if (r.status !== 200) return null;
  return (r.json.keeper?.stats?.rows as number | undefined) ?? null;
}

/**
 * A node's held-row count from a state document written at or after `since` (ms): queue-state gives the
 * document's stateAt, and a live node writes a new one every stateInterval. Polls until one is that new.
 */
async function heldRowsWrittenSince(name: Name, since: number, timeoutMs = 10_000): Promise<number> {
  let last = '';
  const r = await until(
    `${name} to vouch for a state document written after ${since}`,
    async () => {
      const s = await node(name).fetch('/prerender_admin/queue-state');
      last = s.status === 200 ? `stateAt ${s.json.trust.stateAt}` : `${s.status} ${s.text.slice(0, 200)}`;
      return s.status === 200 && s.json.trust.stateAt >= since ? s : undefined;
    },
    timeoutMs,
    50,
  ).catch((e: unknown) => assert.fail(`${String(e)}; last answer: ${last}`));
  return r.json.trust.keeper.rows as number;
}

/**
 * A node's answer, or null while it does not answer (a restarting node refuses or resets the connection
 * until its HTTP server is up). Only for the node that is coming back; every other read stays strict.
 */
async function answerOf(name: Name, path: string, init?: FetchInit): Promise<FetchResult | null> {
  try {
    return await node(name).fetch(path, { timeoutMs: 5000, ...init });
  } catch {
    return null;
  }
}

/**
 * The held-row counts of node-a, node-b and node-c at one causally ordered moment while rows move back
 * to node-c. Each count is the node's state document, written every stateInterval at its own instant,
 * so plain reads sum figures of different ages: node-a's from before it dropped the rows it hands back
 * plus node-c's from after it picked them up counts them twice though no instant had two holders. A
 * holder drops a row before node-c may gain it (util/cluster/holding.ts: node-c abstains until the old
 * holder publishes the view it applied), so node-c's count is read first and node-a's and node-b's only
 * from documents written no earlier: a row node-c counted is then no longer in theirs, and a sum over the
 * table still means a row held twice. Node-c's document time is its stateAt while it vouches; otherwise
 * (waiting for peers, loading) overview's copy, written no later than the answer came back. Null for
 * node-c while it does not answer.
 */
async function heldRowsInOrder(): Promise<[number, number, number | null]> {
  const c = await answerOf('node-c', '/prerender_admin/queue-state');
  let cRows: number | null = null;
  if (c?.status === 200) cRows = c.json.trust.keeper.rows as number;
  else {
    const o = await answerOf('node-c', '/prerender_admin/overview');
    if (o?.status === 200) cRows = (o.json.keeper?.stats?.rows as number | undefined) ?? null;
  }
  const cAt = c?.status === 200 ? (c.json.trust.stateAt as number) : Date.now();
  const [a, b] = await Promise.all((['node-a', 'node-b'] as const).map((n) => heldRowsWrittenSince(n, cAt)));
  return [a!, b!, cRows];
}

/** Whether node-c, coming back, holds `url` (false while it does not answer explain yet). */
async function heldOnReturning(url: string): Promise<boolean> {
  const r = await answerOf('node-c', '/prerender_admin/explain', { body: { url } });
  return r?.status === 200 && Boolean(r.json.held);
}

async function holdersOf(url: string, names: readonly Name[] = NAMES): Promise<Name[]> {
  const out: Name[] = [];
  for (const n of names) {
    const r = await node(n).fetch('/prerender_admin/explain', { body: { url } });
    assert.equal(r.status, 200, r.text);
    if (r.json.held) out.push(n);
  }
  return out;
}

async function fileTargets(urls: string[], dueAt = Date.now() - MIN): Promise<void> {
  const r = await node('node-a').fetch('/render_queue/targets', {
    body: { targets: urls.map((url) => ({ url, dueAt })) },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.upserted, urls.length);
  for (const u of urls) filed.add(u);
}

function logsOf(name: Name): string {
  return node(name)
    .output()
    .split('\n')
    .filter((l) => /keeper|membership|peer wait|cluster/i.test(l))
    .slice(-12)
    .join('\n');
}

before(async () => {
  startedAll = Date.now();
  // A failed start stops everything this setup started, at once: no Harper outlives a failed run.
  const started = await Promise.allSettled(NAMES.map((n) => bootNode(n)));
  for (const s of started) if (s.status === 'fulfilled') nodes.set(s.value.name, s.value);
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await Promise.all([...nodes.values()].map((n) => n.inst.destroy()));
    nodes.clear();
    throw failed.reason;
  }
  const link = (from: Name, to: Name) => addNode(node(from), to, node(to));
  let step = 'link';
  try {
    await link('node-b', 'node-a');
    await link('node-c', 'node-a');
    await link('node-c', 'node-b');
    step = 'config';
    for (const n of NAMES) {
      const r = await node(n).fetch('/prerender_admin/config', { body: CONFIG, fresh: true });
      assert.equal(r.status, 200, r.text);
    }
    step = 'settle';
    await until(
      'all three nodes to see each other and hold by one three-node view',
      () => settledOn(NAMES),
      60_000,
      250,
    );
    step = 'rows stream';
    await untilRowsStream(NAMES.map((n) => ({ name: n, inst: node(n) })));
  } catch (e) {
    const tails = NAMES.map((n) => `--- ${n}:\n${logsOf(n)}`).join('\n');
    await Promise.all([...nodes.values()].map((n) => n.inst.destroy()));
    nodes.clear();
    throw new Error(`cluster setup failed at ${step}: ${String(e)}\n${tails}`);
  }
});

after(async () => {
  await Promise.all([...nodes.values()].map((n) => n.inst.destroy()));
});

test('every row has exactly one holder: the nodes hold their rendezvous shares, adding up to the table', async (t) => {
  t.diagnostic(`cluster up in ${Date.now() - startedAll} ms`);
  const urls = Array.from({ length: 600 }, (_, i) => `https://c3.example.com/one/${i}`);
  await fileTargets(urls, Date.now() + 60 * MIN);
  let seen = '';
  await until(
    'each node to hold exactly its share',
    async () => {
      const held = await Promise.all(NAMES.map(heldRows));
      const want = NAMES.map((n) => [...filed].filter((u) => all3.ownerOf(u) === n).length);
      seen = `held ${held.join('/')} want ${want.join('/')}`;
      return held.every((h, i) => h === want[i]);
    },
    20_000,
  ).catch((e: unknown) => assert.fail(`${String(e)}; ${seen}`));
  t.diagnostic(seen);
  for (const url of urls.slice(0, 45)) assert.deepEqual(await holdersOf(url), [all3.ownerOf(url)], url);
});

test('clients spread over the three nodes drain every due row exactly once; a node with none answers empty', async (t) => {
  // Rows owned by node-a only: a claim on node-b has nothing to give and must say so.
  const onlyA = Array.from({ length: 200 }, (_, i) => `https://c3.example.com/only-a/${i}`)
    .filter((u) => all3.ownerOf(u) === 'node-a')
    .slice(0, 20);
  await fileTargets(onlyA);
  await until('node-a to hold the rows it owns as due', async () => {
    const r = await node('node-a').fetch('/prerender_admin/explain', { body: { url: onlyA.at(-1) } });
    return r.json?.held?.due === true || (r.json?.held && r.json.score > 0);
  });
  const empty = await node('node-b').fetch('/render_queue/claim', { body: { limit: 25 } });
  assert.equal(empty.status, 200, empty.text);
  assert.deepEqual(empty.json, []);
  assert.ok(['empty', 'queued'].includes(String(empty.headers['x-queue-status'])));
  t.diagnostic(`node-b with none of the due rows answers x-queue-status: ${empty.headers['x-queue-status']}`);

  const urls = [...onlyA, ...Array.from({ length: 900 }, (_, i) => `https://c3.example.com/drain/${i}`)];
  await fileTargets(urls.slice(onlyA.length));
  /** Grants by URL; each job is its URL's desktop row. */
  const grants = new Map<string, number>();
  // Each client stops once every row was granted somewhere (or after 60 s): an empty answer alone
  // proves nothing, the row may still be on its way to its holder's ready set.
  const deadline = Date.now() + 60_000;
  const allGranted = () => urls.every((u) => grants.has(u));
  const clients = NAMES.flatMap((n) => [n, n]).map(async (n) => {
    let results: unknown[] = [];
    while (results.length > 0 || (!allGranted() && Date.now() < deadline)) {
      const r = await node(n).fetch('/render_queue/next', { body: { results, limit: 25 }, fresh: true });
      assert.equal(r.status, 200, r.text);
      const jobs = r.json.jobs as Array<{ id: string; url: string; leaseToken: number }>;
      for (const j of jobs) {
        assert.equal(j.id, key(j.url), 'a job is the desktop row of its URL');
        grants.set(j.url, (grants.get(j.url) ?? 0) + 1);
      }
      results = jobs.map((j) => ({
        id: j.id,
        leaseToken: j.leaseToken,
        outcome: 'rendered',
        statusCode: 200,
      }));
      if (jobs.length === 0) await sleep(100);
    }
  });
  const t0 = Date.now();
  await Promise.all(clients);
  t.diagnostic(`${grants.size} rows drained over 3 nodes in ${Date.now() - t0} ms`);
  const dupes = [...grants].filter(([, c]) => c > 1);
  assert.deepEqual(dupes, [], 'no row granted twice');
  assert.deepEqual(
    urls.filter((u) => !grants.has(u)),
    [],
    'every due row was granted',
  );
  // Results land through each holder's subscription and the state document every second: poll.
  for (const n of NAMES)
    await until(`${n} to have nothing due left`, async () => {
      const s = await node(n).fetch('/prerender_admin/queue-state');
      return s.status === 200 && s.json.now.due === 0;
    });
});

test('a stopped node loses nothing: its rows are claimable on the other two, and move back on return held once', async (t) => {
  const urls = Array.from({ length: 300 }, (_, i) => `https://c3.example.com/leave/${i}`);
  await fileTargets(urls);
  const ofC = urls.filter((u) => all3.ownerOf(u) === 'node-c');
  await until('node-c to hold its rows', async () => (await holdersOf(ofC[0]!, ['node-c'])).length === 1);
  const c = nodes.get('node-c')!;
  const two = ['node-a', 'node-b'] as const;
  const logFrom = new Map(two.map((n) => [n, node(n).output().length]));
  const stoppedAt = Date.now();
  await c.inst.stop(); // by pid (SIGTERM), keeps its root
  const total = filed.size;
  await until(
    'node-a and node-b to hold every row between them',
    async () => {
      const held = await Promise.all(two.map(heldRows));
      return held.every((h) => h !== null) && held.reduce<number>((s, h) => s + (h ?? 0), 0) === total;
    },
    45_000,
    100,
  );
  const pickedUp = Date.now() - stoppedAt;
  t.diagnostic(`node-c's ${ofC.length} due rows held on node-a/node-b ${pickedUp} ms after the stop`);
  // Its sockets closed with the process: each survivor lets it go by the connection signal (cluster_status
  // asked in-process on worker 0), ~3 s plus a tick and a walk, not by the 15 s heartbeat window.
  for (const n of two) {
    const since = node(n).output().slice(logFrom.get(n));
    const lines = since.split('\n').filter((l) => /cluster: .*node-c/.test(l));
    t.diagnostic(`${n}: ${lines.map((l) => l.replace(/^.*cluster: /, '')).join(' | ')}`);
    assert.match(since, /cluster: node-c left \(connection\)/, `${n} let node-c go by its closed socket`);
  }
  const window = beatStaleAfterMs(1000);
  assert.ok(
    pickedUp < window - 3000,
    `picked up ${pickedUp} ms after the stop, not clear of the ${window} ms window`,
  );
  // Claimable there, each once.
  const grants = new Map<string, number>();
  await until(
    "node-c's due rows to be granted on the other two",
    async () => {
      for (const n of two) {
        const r = await node(n).fetch('/render_queue/claim', { body: { limit: 25 } });
        for (const j of r.json as Array<{ id: string; url: string }>) {
          assert.equal(j.id, key(j.url), 'a job is the desktop row of its URL');
          grants.set(j.url, (grants.get(j.url) ?? 0) + 1);
        }
      }
      return urls.every((u) => grants.has(u));
    },
    20_000,
    50,
  );
  assert.deepEqual(
    [...grants].filter(([, n]) => n > 1),
    [],
  );
  t.diagnostic(`claimable elsewhere ${Date.now() - stoppedAt} ms after the stop`);

  // Return: node-c takes back its share; at no sampled moment is a row held by two nodes.
  const restarted = bootNode('node-c', c.inst.root);
  const sample = ofC.slice(0, 12);
  let samples = 0;
  let cAnswered = 0;
  const figures: string[] = [];
  let returned: ClusterNode | undefined;
  void restarted.then((r) => (returned = r)).catch(() => undefined);
  const deadline = Date.now() + 60_000;
  // node-c is watched from the restart on, not from when the harness calls it ready (by then its rows
  // may all be back): the restart keeps its root and so its HTTP port, and the old handle reaches it.
  for (;;) {
    if (returned) nodes.set('node-c', returned);
    const held = await heldRowsInOrder();
    if (held[2] !== null) cAnswered++;
    if (figures.at(-1) !== held.join('/')) figures.push(held.join('/'));
    const sum = held.reduce<number>((s, h) => s + (h ?? 0), 0);
    assert.ok(sum <= total, `rows held ${held.join('/')} add up to more than the table's ${total}`);
    // Live per-URL reads in the same order: node-c (where the row moves to) first, then the nodes it
    // moves from; a row node-c held at its read that node-a still holds at the later read was held twice.
    for (const url of sample) {
      const h = [...((await heldOnReturning(url)) ? ['node-c'] : []), ...(await holdersOf(url, two))];
      assert.ok(h.length <= 1, `${url} held by ${h.join(' and ')}`);
    }
    samples++;
    if (returned && held.every((h) => h !== null) && sum === total && (await settledOn(NAMES))) {
      const want = NAMES.map((n) => [...filed].filter((u) => all3.ownerOf(u) === n).length);
      if (held.every((h, i) => h === want[i])) break;
    }
    if (Date.now() > deadline)
      assert.fail(`rows did not move back: held ${held.join('/')}\n${returned ? logsOf('node-c') : ''}`);
  }
  await restarted;
  t.diagnostic(
    `rows back on node-c after ${samples} samples (node-c answered ${cAnswered}); none held twice`,
  );
  t.diagnostic(`held figures node-a/node-b/node-c as they changed: ${figures.slice(0, 20).join(' → ')}`);
  for (const n of NAMES) {
    const s = await node(n).fetch('/prerender_admin/queue-state');
    assert.equal(s.status, 200, s.text);
    assert.equal(
      s.json.trust.keeper.lastVerify?.repaired ?? 0,
      0,
      `${n}'s verification walk repaired nothing`,
    );
    assert.equal(s.json.trust.keeper.repairedTotal, 0, `${n} never repaired a row`);
  }
  // Every one of node-c's rows is still leased on node-a or node-b (granted above, never reported, 10 min
  // leases). Those leases came over with the rows: node-c grants none of them while they run.
  const output = node('node-c').output();
  const tookOver = [...output.matchAll(/took over (\d+) leases (node-[ab]) has out/g)];
  t.diagnostic(`node-c: ${tookOver.map((m) => `${m[1]} from ${m[2]}`).join(', ')}`);
  assert.equal(
    tookOver.reduce((sum, m) => sum + Number(m[1]), 0),
    ofC.length,
    `node-c took over a lease for each of its ${ofC.length} rows\n${logsOf('node-c')}`,
  );
  const regranted: string[] = [];
  for (let i = 0; i < 10; i++) {
    const r = await node('node-c').fetch('/render_queue/claim', { body: { limit: 25 } });
    assert.equal(r.status, 200, r.text);
    for (const j of r.json as Array<{ id: string; url: string }>) if (grants.has(j.url)) regranted.push(j.id);
    await sleep(200);
  }
  assert.deepEqual(regranted, [], 'node-c granted rows whose leases still run on node-a or node-b');
});

test('a node whose peers are down waits for them (503 waiting-for-peers), then loads alone after the cap', async (t) => {
  await Promise.all([node('node-b').stop(), node('node-c').stop()]);
  // Their last beats must have gone stale first, or node-a would count them present at once.
  await until(
    "node-a to see node-b's and node-c's beats go stale",
    async () => {
      const beats = await beatsOn('node-a');
      // Beats go out every max(1 s, publishInterval); the departure window is derived from that.
      const staleMs = beatStaleAfterMs(1000) + 1000;
      return beats.filter((b) => b.id !== 'node-a').every((b) => Date.now() - b.beatAt > staleMs);
    },
    40_000,
    250,
  );
  const a = nodes.get('node-a')!;
  await a.inst.stop();
  const capMs = 8000;
  const restartedAt = Date.now();
  // The cap is shortened through the environment (120 s otherwise; no configuration key sets it).
  nodes.set('node-a', await bootNode('node-a', a.inst.root, { QUEUE_KEEPER_PEER_WAIT_MS: String(capMs) }));
  const waiting = await until(
    'node-a to report waiting-for-peers',
    async () => {
      const s = await node('node-a').fetch('/prerender_admin/queue-state');
      return s.json?.trust?.phase === 'waiting-for-peers' ? s : undefined;
    },
    5000,
    50,
  );
  assert.equal(waiting.status, 503, waiting.text);
  const claim = await node('node-a').fetch('/render_queue/claim', { body: { limit: 5 } });
  assert.deepEqual(claim.json, []);
  assert.equal(claim.headers['x-queue-status'], 'unready');
  // Its beats go on while it waits: with no view yet, each keeps its row's handoff list (read in the write).
  const ownBeatAt = async () => (await beatsOn('node-a')).find((b) => b.id === 'node-a')?.beatAt ?? 0;
  const before = await ownBeatAt();
  await until('node-a to beat again while it waits', async () => (await ownBeatAt()) > before, 5000, 200);
  assert.doesNotMatch(node('node-a').output(), /heartbeat write failed/);
  const live = await until(
    'node-a to load alone after the cap',
    async () => {
      const s = await node('node-a').fetch('/prerender_admin/queue-state');
      return s.status === 200 ? s : undefined;
    },
    capMs + 20_000,
    200,
  );
  const waited = Date.now() - restartedAt;
  t.diagnostic(`loaded alone ${waited} ms after the restart (cap ${capMs} ms)`);
  assert.ok(waited >= capMs, 'it waited the cap before loading');
  assert.equal(live.json.trust.keeper.rows, filed.size, 'alone, it holds every row');
  assert.match(
    node('node-a').output(),
    /peer wait: no heartbeat from (node-b, node-c|node-c, node-b) within 8 s/,
  );
});
