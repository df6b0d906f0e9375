// Each result goes to the node that granted its lease: the job's `callbackOrigin`, with the fleet's own
// credentials, batched per origin, while the claims stay on the configured URL. Only a plain http(s)
// origin from a claimed job is used; a node that fails holds only its own results; in channel mode a
// result rides the socket its job came on while that socket is open, and goes to its node over HTTP
// once it closed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FleetClient } from '../src/fleetClient.js';
import { resultOrigin } from '../src/resultRoutes.js';
import { silentLogger, type Job, type RenderResult } from '../src/types.js';
import { ack, FakeChannelServer } from './fakeChannelServer.js';
import { deferred, FakeClock, until } from './fakeClock.js';
import { acceptAll, FakeFleetServer } from './fakeServer.js';
import { rig } from './setup.js';

const AUTH = 'Basic ' + Buffer.from('fleet:pw').toString('base64');

const redirected = async (): Promise<RenderResult> => ({ outcome: 'redirected', statusCode: 301 });

/** A second fake server on the rig's clock: another node's origin. */
async function node(
  clock: FakeClock,
  t: { after: (fn: () => Promise<void>) => void },
): Promise<FakeFleetServer> {
  const n = new FakeFleetServer(clock);
  await n.start();
  t.after(() => n.stop());
  return n;
}

const ids = (results: Array<{ id: string }> | undefined) => (results ?? []).map((r) => r.id);

test('resultOrigin uses a plain http(s) origin and falls back to the configured URL for anything else', () => {
  const http = new URL('http://127.0.0.1:9926/');
  const https = new URL('https://lb.example.com/');
  const prefixed = new URL('https://lb.example.com/queue/');
  const cases: Array<[unknown, URL, string | null, boolean]> = [
    // value, base, origin used (null: the configured URL), refused
    [undefined, http, null, false],
    [null, http, null, false],
    ['http://127.0.0.1:9927', http, 'http://127.0.0.1:9927', false],
    ['http://127.0.0.1:9927/', http, 'http://127.0.0.1:9927', false],
    ['https://node-1.example.com:9926', https, 'https://node-1.example.com:9926', false],
    ['https://node-1.example.com:443', https, 'https://node-1.example.com', false],
    ['http://[::1]:9927', http, 'http://[::1]:9927', false],
    // The configured URL's own origin is the configured URL; under a path prefix it is not.
    ['http://127.0.0.1:9926', http, null, false],
    ['https://lb.example.com', prefixed, 'https://lb.example.com', false],
    // Refused: the result goes to the configured URL.
    ['http://node-1.example.com:9926', https, null, true],
    ['ftp://127.0.0.1:21', http, null, true],
    ['file:///etc/passwd', http, null, true],
    ['http://user:pass@127.0.0.1:9927', http, null, true],
    ['http://127.0.0.1:9927/render_queue', http, null, true],
    ['http://127.0.0.1:9927?x=1', http, null, true],
    ['http://127.0.0.1:9927#f', http, null, true],
    ['not a url', http, null, true],
    ['', http, null, true],
    [9927, http, null, true],
    [{ origin: 'http://127.0.0.1:9927' }, http, null, true],
  ];
  for (const [value, base, origin, refused] of cases) {
    const r = resultOrigin(value, base);
    const label = `${JSON.stringify(value)} under ${base.href}`;
    assert.equal(r.origin, origin, label);
    assert.equal('problem' in r, refused, label);
  }
});

test("a job's results go to its callbackOrigin with the fleet's credentials, and only there; the claim stays on the configured URL", async (t) => {
  const render = async (job: Job): Promise<RenderResult> =>
    job.id === 'a'
      ? { outcome: 'rendered', statusCode: 200, contentType: 'text/html', body: '<p>a</p>' }
      : redirected();
  const r = await rig(render, { concurrency: 4 });
  t.after(r.close);
  const other = await node(r.clock, t);
  r.server.handler = (req, i) =>
    i === 0
      ? {
          queueStatus: 'queued',
          json: {
            results: [],
            jobs: [
              { ...r.server.job('a'), callbackOrigin: other.url },
              { ...r.server.job('b'), callbackOrigin: `${other.url}/` },
              r.server.job('c'),
              { ...r.server.job('d'), callbackOrigin: r.server.url },
            ],
          },
        }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  other.handler = (req) => ({ json: acceptAll(req) });
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('every result answered', () => r.fleet.counters.reported === 4);

  // The page went framed to the granting node, the page-less result to its job_results.
  assert.deepEqual(
    other.framed.map((f) => [f.path, f.metadata.id, f.metadata.leaseToken, f.auth]),
    [['/render_queue/job_result', 'a', 'tok-a', AUTH]],
  );
  assert.equal(other.framed[0]!.page.toString(), '<p>a</p>');
  assert.deepEqual(
    other.seen.map((s) => [s.path, ids(s.body.results), s.auth]),
    [['/render_queue/job_results', ['b'], AUTH]],
  );
  // The configured URL got the claims, and only the results of jobs that named it or nothing.
  assert.equal(r.server.framed.length, 0);
  assert.deepEqual(
    r.server.seen.map((s) => [s.path, ids(s.body.results)]),
    [
      ['/render_queue/next', []],
      ['/render_queue/next', ['c', 'd']],
    ],
  );
  const c = r.fleet.counters;
  assert.equal(c.superseded + c.dropped + c.originsIgnored, 0);
});

test('results for different nodes go in one job_results batch per node', async (t) => {
  const render = async (job: Job): Promise<RenderResult> => ({
    outcome: 'rendered',
    statusCode: 200,
    contentType: 'text/html',
    body: `<p>${job.id}</p>`,
  });
  // Pages inside JSON, so every result goes in a batch.
  const r = await rig(render, { concurrency: 6, rawPages: false });
  t.after(r.close);
  const b = await node(r.clock, t);
  const c = await node(r.clock, t);
  const at = (n: FakeFleetServer, id: string): Job => ({ ...r.server.job(id), callbackOrigin: n.url });
  r.server.handler = (req, i) =>
    i === 0
      ? {
          queueStatus: 'queued',
          json: {
            results: [],
            jobs: [at(b, 'b1'), at(c, 'c1'), at(b, 'b2'), at(c, 'c2'), at(b, 'b3'), r.server.job('own')],
          },
        }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  for (const n of [b, c]) n.handler = (req) => ({ json: acceptAll(req) });
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('every result answered', () => r.fleet.counters.reported === 6);

  assert.deepEqual(
    b.seen.map((s) => [s.path, ids(s.body.results)]),
    [['/render_queue/job_results', ['b1', 'b2', 'b3']]],
  );
  assert.deepEqual(
    c.seen.map((s) => [s.path, ids(s.body.results)]),
    [['/render_queue/job_results', ['c1', 'c2']]],
  );
  assert.equal(b.seen[0]!.body.results![0]!.body, '<p>b1</p>');
  assert.deepEqual(ids(r.server.seen[1]!.body.results), ['own']);
});

test('a callbackOrigin that is not a plain http(s) origin is not used: the result goes to the configured URL, counted and logged once per value', async (t) => {
  const r = await rig(redirected, { concurrency: 5 });
  t.after(r.close);
  const bad: unknown[] = [
    'ftp://127.0.0.1:21',
    'http://user:pass@127.0.0.1:1',
    'http://127.0.0.1:1/elsewhere',
    'ftp://127.0.0.1:21',
    42,
  ];
  r.server.handler = (req, i) =>
    i === 0
      ? {
          queueStatus: 'queued',
          json: {
            results: [],
            jobs: bad.map((callbackOrigin, k) => ({ ...r.server.job(`j${k}`), callbackOrigin })),
          },
        }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('every result answered', () => r.fleet.counters.reported === 5);
  assert.deepEqual(ids(r.server.seen[1]!.body.results), ['j0', 'j1', 'j2', 'j3', 'j4']);
  assert.equal(r.fleet.counters.originsIgnored, 5);
  const warned = r.logs.filter((l) => l.startsWith("warn a job's callbackOrigin"));
  assert.equal(warned.length, 4, warned.join('\n'));
});

test('a node that fails holds only its own results: the claim and the other results go on, and the held ones are sent again after the error backoff', async (t) => {
  const r = await rig(redirected, { concurrency: 2, errorBackoff: { baseMs: 400, capMs: 400 } });
  t.after(r.close);
  const down = await node(r.clock, t);
  const up = await node(r.clock, t);
  r.server.handler = (req, i) =>
    i === 0
      ? {
          queueStatus: 'queued',
          json: {
            results: [],
            jobs: [
              { ...r.server.job('held'), callbackOrigin: down.url },
              { ...r.server.job('fine'), callbackOrigin: up.url },
            ],
          },
        }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  down.handler = (req, i) => (i === 0 ? { status: 503, json: {} } : { json: acceptAll(req) });
  up.handler = (req) => ({ json: acceptAll(req) });
  await r.fleet.start();
  const flush = await r.clock.timer((x) => x.delay === 50);
  r.clock.fire(flush);
  await until('the claim after the failed delivery', () => r.server.seen.length === 2);
  await until('the other node answered', () => r.fleet.counters.reported === 1);
  // The claim went in the same round as the failed delivery, and the breaker took no step.
  assert.equal(r.server.seen[1]!.at, flush.at);
  assert.equal(r.fleet.counters.requestErrors, 1);
  assert.equal(r.fleet.counters.pendingResults, 1);

  // The held result goes again when its hold (the error backoff, 400 ms) ends, not before.
  const retry = await r.clock.timer((x) => x.delay === 400);
  r.clock.fire(retry);
  await until('the held result answered', () => r.fleet.counters.reported === 2);
  assert.deepEqual(
    down.seen.map((s) => [s.at - flush.at, ids(s.body.results)]),
    [
      [0, ['held']],
      [400, ['held']],
    ],
  );
  assert.deepEqual(
    up.seen.map((s) => ids(s.body.results)),
    [['fine']],
  );
  assert.ok(
    r.server.seen.every((s) => (s.body.results ?? []).length === 0),
    'nothing went to the configured URL',
  );
  assert.notEqual(r.fleet.state, 'circuit-open');
  assert.deepEqual(
    r.logs.filter((l) => l.includes('granting node')),
    [
      'warn results to the granting node failed; holding them for it',
      'info results reach the granting node again',
    ],
  );
});

test('channel mode: a result rides the socket its job came on, and goes to its node over HTTP once that socket closed', async (t) => {
  const server = new FakeChannelServer();
  await server.start();
  t.after(() => server.stop());
  const other = new FakeFleetServer(new FakeClock(Date.now()));
  await other.start();
  t.after(() => other.stop());
  other.handler = (req) => ({ json: acceptAll(req) });
  const job = (id: string): Job => ({
    id,
    url: id,
    queue: 'product',
    isFromSitemap: false,
    expiresAt: Date.now() + 600_000,
    leaseToken: `tok-${id}`,
    callbackOrigin: other.url,
    deviceType: 'desktop',
  });
  const pushed: string[] = [];
  server.onMessage = (m, s) => {
    s.send(ack(m));
    if (!m.credits) return;
    // One job on each socket.
    const next = server.sockets.length === 1 ? 'first' : 'second';
    if (pushed.includes(next)) return;
    pushed.push(next);
    s.send({ type: 'jobs', jobs: [job(next)], status: 'queued', now: Date.now() });
  };
  const slow = deferred<RenderResult>();
  const fleet = new FleetClient({
    url: server.url,
    username: 'fleet',
    password: 'pw',
    channel: true,
    concurrency: 2,
    rawPages: false,
    logger: silentLogger,
    render: (j) => (j.id === 'first' ? slow.promise : redirected()),
  });
  await fleet.start();
  t.after(() => fleet.stop());
  await until('the first job', () => pushed.length === 1);
  server.sockets[0]!.close(1001, 'going away');
  await until('the second job reported over the second socket', () => fleet.counters.reported === 1);
  slow.resolve({ outcome: 'rendered', statusCode: 200, contentType: 'text/html', body: '<p>first</p>' });
  await until('the first job reported', () => fleet.counters.reported === 2);

  assert.equal(server.sockets.length, 2);
  const overSockets = server.messages.flatMap((m) => (m.results ?? []).map((x) => x.id));
  assert.deepEqual(overSockets, ['second']);
  assert.equal(server.httpRequests, 0);
  assert.deepEqual(
    other.seen.map((s) => [s.path, ids(s.body.results), s.auth]),
    [['/render_queue/job_results', ['first'], AUTH]],
  );
});
