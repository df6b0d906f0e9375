// The persistent channel (src/channel.ts) and the FleetClient's channel mode against a fake channel
// server on 127.0.0.1: refusals, answers matched by ref, credit accounting, and a fleet that credits its
// free slots and reports over the socket without one HTTP request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChannelMessageError, FleetChannel } from '../src/channel.js';
import { FleetClient } from '../src/fleetClient.js';
import { FleetRefusedError } from '../src/fleetOptions.js';
import { silentLogger, type Job } from '../src/types.js';
import { until } from './fakeClock.js';
import { ack, FakeChannelServer } from './fakeChannelServer.js';

const noJobs = { onJobs: () => {} };

/** A job granted by the node at `origin` (the channel's own server, so its result goes over the socket). */
function job(id: string, origin: string): Job {
  return {
    id,
    url: id,
    queue: 'product',
    isFromSitemap: false,
    expiresAt: Date.now() + 600_000,
    leaseToken: `tok-${id}`,
    callbackOrigin: origin,
    deviceType: 'desktop',
  };
}

async function serve(t: { after: (fn: () => Promise<void>) => void }): Promise<FakeChannelServer> {
  const server = new FakeChannelServer();
  await server.start();
  t.after(() => server.stop());
  return server;
}

const creds = (server: FakeChannelServer) => ({ url: server.url, username: 'fleet', password: 'pw' });

test('a channel the server refuses rejects open with the refusal code and status', async (t) => {
  const server = await serve(t);
  server.onOpen = (s) => {
    s.send({ error: 'this endpoint needs a fleet role', code: 'forbidden' });
    s.close(3003, 'forbidden');
  };
  await assert.rejects(FleetChannel.open(creds(server), noJobs), (e: unknown) => {
    assert.ok(e instanceof FleetRefusedError);
    assert.equal(e.status, 403);
    assert.equal(e.code, 'forbidden');
    return true;
  });
  assert.equal(server.sockets[0]!.auth, 'Basic ' + Buffer.from('fleet:pw').toString('base64'));
});

test('a queue narrowing the server refuses refuses the open as a 400', async (t) => {
  const server = await serve(t);
  server.onMessage = (m, s) =>
    s.send({ error: 'queue "x" is outside this fleet\'s queues', code: 'invalid_queues', ref: m.ref });
  await assert.rejects(
    FleetChannel.open({ ...creds(server), queues: ['x'] }, noJobs),
    (e: unknown) => e instanceof FleetRefusedError && e.status === 400 && e.code === 'invalid_queues',
  );
});

test('report resolves with its own answers; a refused message rejects and owes no credits', async (t) => {
  const server = await serve(t);
  server.onMessage = (m, s) => {
    if ((m.credits ?? 0) > 10) s.send({ error: 'too many', code: 'invalid_credits', ref: m.ref });
    else s.send(ack(m));
  };
  const ch = await FleetChannel.open(creds(server), noJobs);
  t.after(() => ch.close());
  const answers = await ch.report(
    [
      {
        id: 'a',
        leaseToken: 't',
        outcome: 'rendered',
        statusCode: 200,
        renderTimeMs: 1,
        contentType: null,
        body: null,
      },
    ],
    4,
  );
  assert.deepEqual(answers, [{ id: 'a', accepted: true, nextRenderTime: 1 }]);
  assert.equal(ch.owed, 4);
  await assert.rejects(
    ch.report([], 11),
    (e: unknown) => e instanceof ChannelMessageError && e.code === 'invalid_credits',
  );
  assert.equal(ch.owed, 4, 'the refused credits are not counted');
  assert.deepEqual(server.messages[0]!.credits, 4);
});

test('owed counts credits given minus jobs pushed, and withdraw clears it', async (t) => {
  const server = await serve(t);
  const pushed: Job[] = [];
  server.onMessage = (m, s) => {
    s.send(ack(m));
    if (m.credits)
      s.send({
        type: 'jobs',
        jobs: [job('a', server.url), job('b', server.url)],
        status: 'queued',
        now: Date.now(),
      });
  };
  const ch = await FleetChannel.open(creds(server), { onJobs: (jobs) => pushed.push(...jobs) });
  t.after(() => ch.close());
  await ch.report([], 5);
  await until('the push', () => pushed.length === 2);
  assert.equal(ch.owed, 3);
  await ch.withdraw();
  assert.equal(ch.owed, 0);
  assert.equal(server.messages.at(-1)!.withdraw, true);
});

test('channel mode: the fleet credits only its free slots, renders what is pushed and reports over the socket', async (t) => {
  const server = await serve(t);
  const CONCURRENCY = 3;
  const queue = Array.from({ length: 10 }, (_, i) => job(`https://a.example/${i}`, server.url));
  let outstanding = 0;
  let pushed = 0;
  let reported = 0;
  let worst = 0;
  server.onMessage = (m, s) => {
    outstanding += m.credits ?? 0;
    reported += m.results?.length ?? 0;
    // What the fleet has promised to take: credits not yet used plus jobs pushed and not yet reported.
    worst = Math.max(worst, outstanding + pushed - reported);
    s.send(ack(m, outstanding));
    while (outstanding > 0 && queue.length > 0) {
      outstanding--;
      pushed++;
      s.send({
        type: 'jobs',
        jobs: [queue.shift()!],
        status: 'queued',
        credits: outstanding,
        now: Date.now(),
      });
    }
    if (queue.length === 0 && outstanding > 0) s.send({ type: 'status', status: 'empty' });
  };
  const fleet = new FleetClient({
    ...creds(server),
    channel: true,
    concurrency: CONCURRENCY,
    flushDelayMs: 0,
    logger: silentLogger,
    render: async () => ({ outcome: 'rendered', statusCode: 200, contentType: 'text/html', body: null }),
  });
  await fleet.start();
  t.after(() => fleet.stop());
  await until('every job reported', () => fleet.counters.reported === 10);
  assert.equal(fleet.counters.claimed, 10);
  assert.ok(worst <= CONCURRENCY, `the fleet promised ${worst} slots with concurrency ${CONCURRENCY}`);
  assert.equal(server.httpRequests, 0, 'no HTTP request: everything went over the channel');
  assert.equal(server.sockets.length, 1, 'one socket for the whole run');
  await until('idle once the queue is empty', () => fleet.state === 'idle');
  await fleet.stop();
  // A stopping fleet withdraws its credits before it closes the socket.
  await until('the withdraw', () => server.messages.at(-1)!.withdraw === true);
});
