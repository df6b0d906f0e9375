// The persistent channel (docs/fleets.md) against a real Harper (2 worker threads): refused without
// valid credentials, credits bound what is pushed, results reschedule rows as job_results does, a bad
// message is answered with an error frame and changes nothing, and two sockets drain a set of rows
// filed after they gave credits with no job granted twice and none left. Sockets holding credits while
// nothing is due claim about once per safety interval (not at every publish), and still get a row filed due.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { configForTest, fileTargets, postConfig } from '../api.js';
import { ChannelPeer, type ChannelJob } from '../channelPeer.js';
import { until } from '../wait.js';
import { setTimeout as delay } from 'node:timers/promises';
import { CHANNEL_SAFETY_MS } from '../../util/channel/wait.js';
import { key } from '../rowKeys.js';

let h: HarperInstance;
const fleet: Credentials = { username: 'fleet', password: 'fleet-pass' };
const feeder: Credentials = { username: 'feeder', password: 'feeder-pass' };
const MIN = 60_000;
const peers: ChannelPeer[] = [];

before(async () => {
  h = await startHarper();
  await h.addUser(fleet.username, fleet.password, 'render_fleet');
  await h.addUser(feeder.username, feeder.password, 'render_feeder');
  await postConfig(h, { queue: { keeper: { publishInterval: 200, stateInterval: 1000 } } });
});

after(async () => {
  for (const p of peers) p.close();
  await h?.destroy();
});

async function open(auth: Credentials | null = fleet, headers?: Record<string, string>) {
  const p = await ChannelPeer.open(h.url, auth, headers);
  peers.push(p);
  return p;
}

function rendered(j: ChannelJob) {
  return { id: j.id, leaseToken: j.leaseToken, outcome: 'rendered', statusCode: 200, body: '<p>ok</p>' };
}

async function row(url: string): Promise<{ nextRenderTime: number } | null> {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  return r.json.row as { nextRenderTime: number } | null;
}

async function fileDue(prefix: string, n: number): Promise<string[]> {
  const urls = Array.from({ length: n }, (_, i) => `https://${prefix}.example.com/p-${i}`);
  await fileTargets(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() - 2 * MIN })),
  );
  return urls;
}

/** Reports every job this peer holds (so no test leaves leases that come due again in the next). */
async function reportAll(p: ChannelPeer, jobs: ChannelJob[]) {
  for (let i = 0; i < jobs.length; i += 100) await p.ask({ results: jobs.slice(i, i + 100).map(rendered) });
}

test('a socket without valid credentials or the fleet role is refused before any message is read', async () => {
  for (const [auth, code, closeCode] of [
    [null, 'unauthenticated', 3000],
    [{ username: 'fleet', password: 'wrong' }, 'unauthenticated', 3000],
    [feeder, 'forbidden', 3003],
  ] as const) {
    const p = await open(auth);
    const closed = await p.whenClosed();
    assert.equal(p.ready, false, `no ready frame for ${code}`);
    assert.equal(p.frames[0]?.code, code);
    assert.equal(closed.code, closeCode);
  }
  // A page of another site cannot ride a browser's stored credentials into the channel.
  const cross = await open(fleet, { origin: 'https://elsewhere.example' });
  assert.equal((await cross.whenClosed()).code, 3003);
  assert.equal(cross.frames[0]?.code, 'cross_site');
  const ok = await open();
  assert.equal(ok.ready, true);
  const plain = await h.fetch('/render_queue/channel', { method: 'GET', auth: fleet });
  assert.equal(plain.status, 426);
  assert.equal(plain.json.code, 'upgrade_required');
});

test('credits bound the pushed jobs: never more than the credits outstanding', async (t) => {
  // 8 rows due and a claim limit of 25: only the credits keep the server from pushing them all at once.
  const urls = await fileDue('credits', 8);
  const mine = (j: ChannelJob) => j.id.includes('credits.example.com');
  const p = await open();
  t.after(() => reportAll(p, p.jobs));
  await p.ask({ credits: 3 });
  await until('3 jobs pushed', () => p.jobs.filter(mine).length >= 3);
  // Messages are applied in order, so by the answer to the next one every push of the first is out.
  const ack = await p.ask({ credits: 0 });
  assert.equal(p.jobs.length, 3, 'exactly the 3 credited jobs');
  assert.equal(ack.credits, 0);
  await p.ask({ credits: 2 });
  await until('2 more jobs', () => p.jobs.length >= 5);
  assert.equal((await p.ask({})).credits, 0);
  assert.equal(p.jobs.length, 5);
  await p.ask({ credits: 3 });
  await until('the last 3 jobs', () => p.jobs.length >= 8);
  assert.equal(new Set(p.jobs.map((j) => j.id)).size, 8);
  assert.ok(p.jobs.every((j) => urls.includes(j.url) && j.id === key(j.url)));
  // Credits held while nothing is due, then withdrawn: rows filed afterwards go to another socket.
  assert.equal((await p.ask({ credits: 4 })).credits, 4);
  assert.equal((await p.ask({ withdraw: true })).credits, 0);
  const q = await open();
  t.after(() => reportAll(q, q.jobs));
  await q.ask({ credits: 2 });
  await fileDue('credits-late', 2);
  await until('the late rows pushed to the other socket', () => q.jobs.length >= 2);
  assert.equal((await p.ask({})).credits, 0);
  assert.equal(p.jobs.length, 8, 'nothing pushed under withdrawn credits');
});

test('results sent on the channel reschedule their rows, and a retry is answered as a duplicate', async (t) => {
  await fileDue('results', 4);
  const p = await open();
  t.after(() => reportAll(p, p.jobs.slice(4)));
  await p.ask({ credits: 4 });
  await until('4 jobs pushed', () => p.jobs.length >= 4);
  const jobs = p.jobs.slice(0, 4);
  for (const j of jobs) assert.ok((await row(j.url))!.nextRenderTime <= Date.now(), 'due before the result');
  const ack = await p.ask({ results: jobs.map(rendered) });
  assert.equal(ack.type, 'ack');
  assert.equal(ack.results!.length, 4);
  for (const [i, a] of ack.results!.entries()) {
    assert.equal(a.accepted, true, JSON.stringify(a));
    assert.equal(a.id, jobs[i]!.id);
    const r = await row(jobs[i]!.url);
    assert.equal(r!.nextRenderTime, a.nextRenderTime);
    assert.ok(r!.nextRenderTime > Date.now() + 60 * MIN, 'rescheduled a cadence ahead');
  }
  const again = await p.ask({ results: [rendered(jobs[0]!)] });
  assert.equal(again.results![0]!.duplicate, true);
  assert.equal(again.results![0]!.nextRenderTime, ack.results![0]!.nextRenderTime);
  // A result for a token the server never granted is superseded, as on HTTP.
  const forged = await p.ask({ results: [{ ...rendered(jobs[1]!), leaseToken: 'nope' }] });
  assert.equal(forged.results![0]!.accepted, false);
});

test('a bad message gets an error frame naming the problem and changes nothing', async (t) => {
  await fileDue('bad', 2);
  const p = await open();
  t.after(() => reportAll(p, p.jobs));
  await p.ask({ credits: 2 });
  await until('2 jobs pushed', () => p.jobs.length >= 2);
  const [job] = p.jobs;
  const before = await row(job!.url);
  // Each carries a valid result: it must not be applied, and no credit may be added.
  const bad: Array<[Record<string, unknown>, string]> = [
    [{ results: [rendered(job!)], credits: -1 }, 'invalid_credits'],
    [{ results: [rendered(job!)], credits: 1.5 }, 'invalid_credits'],
    [{ results: [rendered(job!)], credits: 1e9 }, 'invalid_credits'],
    [{ results: [rendered(job!)], credits: 1, extra: true }, 'unknown_field'],
    [{ results: [rendered(job!)], credits: 1, queues: 'product' }, 'invalid_queues'],
    [{ results: Array.from({ length: 101 }, () => rendered(job!)), credits: 1 }, 'invalid_body'],
  ];
  for (const [message, code] of bad) {
    const f = await p.ask(message);
    assert.equal(f.code, code, JSON.stringify(f));
    assert.equal(typeof f.error, 'string');
  }
  p.send('{"credits": 1, "results": [');
  await p.next((f) => f.code === 'invalid_json');
  p.send(Buffer.from(JSON.stringify({ credits: 1 })));
  await p.next((f) => f.code === 'invalid_body' && /text/.test(f.error ?? ''));
  assert.deepEqual(await row(job!.url), before, 'the row is untouched');
  const ack = await p.ask({});
  assert.equal(ack.credits, 0, 'no credit was added');
  assert.equal(p.jobs.length, 2, 'nothing more was pushed');
  assert.equal(p.closed, null, 'a bad message does not close the socket');
});

test('a message over render.maxBatchBytes closes the socket with 1009 and applies nothing', async (t) => {
  await configForTest(t, h, { render: { maxBatchBytes: 1 << 20 } });
  const p = await open();
  assert.equal(p.frames[0]!.maxMessageBytes, 1 << 20);
  p.send({ credits: 1, results: [{ id: 'x'.repeat((1 << 20) + 10) }] });
  const closed = await p.whenClosed();
  assert.equal(closed.code, 1009);
  assert.equal(p.jobs.length, 0);
});

test('two sockets drain rows filed after their credits: no job granted twice, none left', async () => {
  const N = 300;
  const mine = (j: ChannelJob) => j.id.includes('drain.example.com');
  const a = await open();
  const b = await open();
  const granted: ChannelJob[] = [];
  const accepted = new Set<string>();
  for (const p of [a, b]) {
    // A fleet's loop: each job pushed is reported at once with one credit back.
    p.onJobs = (jobs) => {
      granted.push(...jobs.filter(mine));
      void p.ask({ results: jobs.map(rendered), credits: jobs.length }).then((ack) => {
        for (const r of ack.results ?? []) if (r.accepted && r.id) accepted.add(r.id);
      });
    };
    const ack = await p.ask({ credits: 20 });
    assert.equal(ack.credits, 20);
  }
  // Nothing is due yet: both hold their credits until the rows are published.
  const urls = await fileDue('drain', N);
  await until('every row reported', () => urls.every((u) => accepted.has(key(u))), 30_000);
  assert.equal(granted.length, N, 'each row granted once');
  assert.equal(new Set(granted.map((j) => j.id)).size, N, '0 duplicate grants');
  for (const u of urls) assert.ok((await row(u))!.nextRenderTime > Date.now(), `${u} is no longer due`);
  const claim = await h.fetch('/render_queue/claim', { body: { limit: 25 }, auth: fleet });
  assert.equal((claim.json as ChannelJob[]).filter(mine).length, 0, 'nothing of it is left to claim');
});

/** Claims the channel has made on this node so far (every worker counts into the same cell). */
async function channelClaims(): Promise<number> {
  const r = await h.fetch('/prerender_admin/metrics');
  assert.equal(r.status, 200, r.text);
  const m = /^queue_keeper_channel_claims_total (\d+)$/m.exec(r.text);
  assert.ok(m, 'the scrape has queue_keeper_channel_claims_total');
  return Number(m[1]);
}

test('sockets holding credits while nothing is due claim about once per safety interval, and get a row filed due', async (t) => {
  // Only this test's sockets hold credits (the drain test's two still do).
  for (const p of peers.splice(0)) p.close();
  const SOCKETS = 4;
  const mine: ChannelPeer[] = [];
  for (let i = 0; i < SOCKETS; i++) {
    const p = await open();
    await p.ask({ credits: 2 });
    // The first claim grants nothing: the socket now waits, and nothing is due on the node.
    assert.equal((await p.next((f) => f.type === 'status')).status, 'empty');
    mine.push(p);
  }
  // The keeper publishes every 200 ms in this file, so ~10 generations pass in the window: none of them
  // has anything in it, so none is worth a claim; only the safety claims run.
  const t0 = performance.now();
  const before = await channelClaims();
  await delay(2000);
  const idle = (await channelClaims()) - before;
  const elapsed = performance.now() - t0;
  const bound = SOCKETS * (Math.floor(elapsed / CHANNEL_SAFETY_MS) + 1);
  t.diagnostic(`${idle} claims in ${Math.round(elapsed)} ms by ${SOCKETS} idle sockets`);
  assert.ok(
    idle <= bound,
    `${idle} claims in ${Math.round(elapsed)} ms by ${SOCKETS} idle sockets (at most ${bound})`,
  );
  assert.ok(
    mine.every((p) => p.jobs.length === 0),
    'nothing pushed while nothing is due',
  );
  // A row filed due while they wait: the publish that carries it wakes them, and one socket gets it.
  const t1 = performance.now();
  const [url] = await fileDue('wake', 1);
  await until('the row pushed to a waiting socket', () =>
    mine.some((p) => p.jobs.some((j) => j.url === url && j.id === key(url))),
  );
  const woken = (await channelClaims()) - before - idle;
  const since = performance.now() - t1;
  const wokenBound = SOCKETS * (Math.floor(since / CHANNEL_SAFETY_MS) + 2);
  t.diagnostic(`${woken} claims to push the row filed due, ${Math.round(since)} ms after filing`);
  assert.ok(
    woken <= wokenBound,
    `${woken} claims to push one row in ${Math.round(since)} ms (at most ${wokenBound})`,
  );
  const holder = mine.find((p) => p.jobs.length > 0)!;
  assert.equal(holder.jobs.length, 1);
  await reportAll(holder, holder.jobs);
});
