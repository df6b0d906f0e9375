// The claim loop against a fake server with a fake clock: waits per x-queue-status, batching and
// prompt flushing, superseded and lost answers, lease aborts, the breaker, and draining on stop.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FleetRefusedError } from '../src/fleetOptions.js';
import type { Job, RenderResult } from '../src/types.js';
import { deferred, until } from './fakeClock.js';
import { acceptAll } from './fakeServer.js';
import { never, rig } from './setup.js';

// Pages in the JSON form (rawPages: false) where a test reads the results out of the JSON batch; the
// raw-bytes default has tests of its own below.
const JSON_PAGES = { rawPages: false };

const ok = async (): Promise<RenderResult> => ({
  outcome: 'rendered',
  statusCode: 200,
  contentType: 'text/html',
  body: '<p>ok</p>',
});

test('empty and paused answers back off exponentially up to the cap, each wait counted', async (t) => {
  const r = await rig(ok, { idleBackoff: { baseMs: 1_000, capMs: 3_000 } });
  t.after(r.close);
  r.server.handler = (_req, i) => ({
    queueStatus: i % 2 ? 'paused' : 'empty',
    json: { results: [], jobs: [] },
  });
  await r.fleet.start();
  const waits: number[] = [];
  for (let i = 0; i < 4; i++) {
    const timer = await r.clock.timer();
    waits.push(timer.delay);
    const before = r.server.seen.length;
    r.clock.fire(timer);
    await until('the next claim', () => r.server.seen.length > before);
  }
  assert.deepEqual(waits, [1_000, 2_000, 3_000, 3_000]);
  // Each request came exactly when its wait ended, not before.
  const at = r.server.seen.map((s) => s.at - r.server.seen[0]!.at);
  assert.deepEqual(at, [0, 1_000, 3_000, 6_000, 9_000]);
  await until('the fifth answer processed', () => r.fleet.counters.idleWaits === 5);
  assert.equal(r.fleet.state, 'idle');
});

test('the jitter keeps every idle wait within the upper half of its step', async (t) => {
  const r = await rig(ok, { random: () => 0, idleBackoff: { baseMs: 1_000, capMs: 30_000 } });
  t.after(r.close);
  await r.fleet.start();
  const first = await r.clock.timer();
  assert.equal(first.delay, 500);
  const before = r.server.seen.length;
  r.clock.fire(first);
  await until('the next claim', () => r.server.seen.length > before);
  assert.equal((await r.clock.timer()).delay, 1_000);
});

test('unready waits the fixed unready time, without growing', async (t) => {
  const r = await rig(ok, { unreadyWaitMs: 2_500 });
  t.after(r.close);
  r.server.handler = () => ({ queueStatus: 'unready', json: { results: [], jobs: [] } });
  await r.fleet.start();
  for (let i = 0; i < 3; i++) {
    const timer = await r.clock.timer();
    assert.equal(timer.delay, 2_500);
    const before = r.server.seen.length;
    r.clock.fire(timer);
    await until('the next claim', () => r.server.seen.length > before);
  }
  await until('the answers processed', () => r.fleet.counters.unreadyWaits === 4);
  assert.equal(r.fleet.counters.idleWaits, 0);
  assert.equal(r.fleet.state, 'waiting');
});

test('queued claims again at once for the slots still free, without any wait', async (t) => {
  const r = await rig(never, { concurrency: 5, claimLimit: 25 });
  t.after(r.close);
  r.server.handler = (req, i) => {
    if (i === 0)
      return { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('a'), r.server.job('b')] } };
    if (i === 1) return { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('c')] } };
    return { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  };
  await r.fleet.start();
  await until('three claims', () => r.server.seen.length >= 3);
  assert.deepEqual(
    r.server.seen.slice(0, 3).map((s) => s.body.limit),
    [5, 3, 2],
  );
  // No clock movement between them: each followed the previous answer at once.
  assert.ok(r.server.seen.slice(0, 3).every((s) => s.at === r.server.seen[0]!.at));
  assert.equal(r.fleet.counters.claimed, 3);
  assert.equal(r.fleet.counters.inFlight, 3);
  // A backoff only after the empty answer; the loop does not claim when all slots are busy.
  assert.equal((await r.clock.timer((x) => x.delay <= 30_000)).delay, 1_000);
});

test('results ride in one batch on the next call, and one result is flushed 50 ms after it is ready even while claiming backs off', async (t) => {
  const renders = new Map<string, ReturnType<typeof deferred<RenderResult>>>();
  const render = (job: Job) => {
    const d = deferred<RenderResult>();
    renders.set(job.id, d);
    return d.promise;
  };
  const r = await rig(render, {
    ...JSON_PAGES,
    concurrency: 3,
    idleBackoff: { baseMs: 30_000, capMs: 30_000 },
  });
  t.after(r.close);
  r.server.handler = (req, i) =>
    i === 0
      ? { queueStatus: 'queued', json: { results: [], jobs: ['a', 'b', 'c'].map((id) => r.server.job(id)) } }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  await r.fleet.start();
  await until('three renders', () => renders.size === 3);
  renders.get('a')!.resolve(await ok());
  renders.get('b')!.resolve(await ok());
  // The flush timer, armed by the first result: 50 ms, not the 30 s idle backoff.
  const flush = await r.clock.timer((x) => x.delay === 50);
  r.clock.fire(flush);
  await until('the flush', () => r.server.seen.length === 2);
  const call = r.server.seen[1]!;
  assert.equal(call.path, '/render_queue/next');
  assert.deepEqual(
    call.body.results!.map((x) => [x.id, x.leaseToken, x.outcome]),
    [
      ['a', 'tok-a', 'rendered'],
      ['b', 'tok-b', 'rendered'],
    ],
  );
  assert.equal(call.body.limit, 2, 'the two freed slots are claimed in the same round trip');
  await until('both reported', () => r.fleet.counters.reported === 2);
  // The last one alone, while the idle backoff runs (30 s): still out 50 ms later.
  renders.get('c')!.resolve(await ok());
  const again = await r.clock.timer((x) => x.delay === 50);
  r.clock.fire(again);
  await until('the lone result', () => r.server.seen.length === 3);
  assert.equal(r.server.seen[2]!.at - r.server.seen[1]!.at, again.at - r.server.seen[1]!.at);
  assert.deepEqual(
    r.server.seen[2]!.body.results!.map((x) => x.id),
    ['c'],
  );
});

test('a superseded result is dropped and never sent again', async (t) => {
  let renders = 0;
  const r = await rig(async () => (renders++, ok()), { ...JSON_PAGES, concurrency: 1 });
  t.after(r.close);
  r.server.handler = (req, i) => {
    if (i === 0) return { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('a')] } };
    if (i === 1)
      return {
        queueStatus: 'empty',
        json: { results: [{ id: 'a', accepted: false, code: 'superseded', error: 'not yours' }], jobs: [] },
      };
    return { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  };
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('the result sent', () => r.server.seen.length === 2);
  r.clock.fire(await r.clock.timer((x) => x.delay === 1_000));
  await until('the next claim', () => r.server.seen.length === 3);
  assert.deepEqual(r.server.seen[2]!.body.results, []);
  assert.equal(r.fleet.counters.superseded, 1);
  assert.equal(r.fleet.counters.reported, 0);
  assert.equal(r.fleet.counters.pendingResults, 0);
  assert.equal(renders, 1);
});

test('a result whose answer was lost is sent again under the same token, and the duplicate answer counts once', async (t) => {
  const r = await rig(ok, { ...JSON_PAGES, concurrency: 1, errorBackoff: { baseMs: 400, capMs: 400 } });
  t.after(r.close);
  r.server.handler = (req, i) => {
    if (i === 0) return { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('a')] } };
    if (i === 1) return { destroy: true }; // the server applied it; the answer never arrives
    const results = (req.body.results ?? []).map((x) => ({
      id: x.id,
      accepted: true,
      nextRenderTime: 1,
      duplicate: true,
    }));
    return { queueStatus: 'empty', json: { results, jobs: [] } };
  };
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('the first send', () => r.server.seen.length === 2);
  const retry = await r.clock.timer((x) => x.delay === 400);
  r.clock.fire(retry);
  await until('the retry', () => r.server.seen.length === 3);
  assert.deepEqual(r.server.seen[2]!.body.results, r.server.seen[1]!.body.results);
  await until('the answer', () => r.fleet.counters.reported === 1);
  assert.equal(r.fleet.counters.duplicates, 1);
  assert.equal(r.fleet.counters.requestErrors, 1);
  assert.equal(r.fleet.counters.pendingResults, 0);
});

test('a render that would outlive its lease is aborted before expiry minus the margin and reported failed', async (t) => {
  let seenSignal: AbortSignal | null = null;
  const r = await rig(
    (_job, signal) => {
      seenSignal = signal;
      return never(_job, signal); // ignores the signal: the report must not wait for it
    },
    // No extension asked for: the abort at the lease's end is what is under test (leaseExtension.test.ts).
    { concurrency: 1, leaseMarginMs: 10_000, extendLeases: false },
  );
  t.after(r.close);
  r.server.handler = (req, i) =>
    i === 0
      ? { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('slow', 60_000)] } }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  await r.fleet.start();
  const claimedAt = r.server.seen[0]!.at;
  const abort = await r.clock.timer((x) => x.delay === 50_000);
  r.clock.advanceTo(abort.at - 1);
  assert.equal(seenSignal!.aborted, false);
  r.clock.advanceTo(abort.at);
  assert.equal(seenSignal!.aborted, true);
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('the failure report', () => r.server.seen.length === 2);
  const [res] = r.server.seen[1]!.body.results!;
  assert.equal(res!.outcome, 'failed');
  assert.equal(res!.error!.name, 'LeaseExpired');
  assert.ok(r.server.seen[1]!.at < claimedAt + 60_000, 'reported inside the lease');
  assert.equal(r.fleet.counters.abortedAtLease, 1);
  assert.equal(r.fleet.counters.failed, 1);
});

test('the abort deadline follows the server clock when the clocks disagree by an hour', async (t) => {
  const r = await rig(never, { concurrency: 1, leaseMarginMs: 10_000 });
  t.after(r.close);
  // The server's clock runs an hour ahead: its expiresAt and its Date header say so alike.
  r.server.offsetMs = 3_600_000;
  r.server.handler = (_req, i) =>
    i === 0
      ? { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('skewed', 60_000)] } }
      : { queueStatus: 'empty', json: { results: [], jobs: [] } };
  await r.fleet.start();
  // 60 s lease − 10 s margin, give or take the Date header's one-second resolution.
  const abort = await r.clock.timer((x) => x.delay > 40_000 && x.delay < 3_000_000);
  assert.ok(Math.abs(abort.delay - 50_000) <= 1_000, `abort armed after ${abort.delay} ms`);
});

test('the breaker opens after three failures in a row, sends nothing while open, probes once and closes on success', async (t) => {
  const r = await rig(ok, {
    errorBackoff: { baseMs: 100, capMs: 100 },
    breaker: { failureThreshold: 3, openMs: 5_000, maxOpenMs: 60_000 },
  });
  t.after(r.close);
  let failing = 4; // three to open it, then the first probe fails too
  r.server.handler = () =>
    failing-- > 0
      ? { status: 503, json: { error: 'down', code: 'unavailable' } }
      : { queueStatus: 'empty', json: { results: [], jobs: [] } };
  await r.fleet.start();
  for (let i = 1; i < 3; i++) {
    r.clock.fire(await r.clock.timer((x) => x.delay === 100));
    await until('a retry', () => r.server.seen.length === i + 1);
  }
  const open = await r.clock.timer((x) => x.delay === 5_000);
  assert.equal(r.fleet.state, 'circuit-open');
  assert.equal(r.fleet.counters.circuitOpens, 1);
  r.clock.advanceTo(open.at - 1);
  assert.equal(r.server.seen.length, 3, 'nothing sent while open');
  r.clock.advanceTo(open.at);
  await until('the probe', () => r.server.seen.length === 4);
  // The probe failed: open again, twice as long.
  const reopen = await r.clock.timer((x) => x.delay === 10_000);
  r.clock.fire(reopen);
  await until('the second probe', () => r.server.seen.length === 5);
  await until('closed', () => r.fleet.state === 'idle');
  assert.ok(r.logs.includes('info circuit closed'));
  assert.equal(
    r.logs.filter((l) => l.startsWith('warn circuit-open')).length,
    1,
    'one line per state change',
  );
  assert.equal(r.fleet.counters.requestErrors, 4);
});

test('stop claims nothing more, lets the render in flight finish, reports it and resolves', async (t) => {
  const d = deferred<RenderResult>();
  const r = await rig(() => d.promise, { ...JSON_PAGES, concurrency: 2 });
  t.after(r.close);
  r.server.handler = (req, i) =>
    i === 0
      ? { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('a')] } }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  await r.fleet.start();
  await until('the second claim', () => r.server.seen.length === 2);
  let stopped = false;
  const stopping = r.fleet.stop().then(() => (stopped = true));
  assert.equal(r.fleet.state, 'stopping');
  d.resolve(await ok());
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await stopping;
  assert.equal(stopped, true);
  const last = r.server.seen.at(-1)!;
  assert.equal(last.path, '/render_queue/job_results', 'the last call reports without claiming');
  assert.deepEqual(
    last.body.results!.map((x) => x.id),
    ['a'],
  );
  assert.ok(r.server.seen.slice(2).every((s) => s.path === '/render_queue/job_results'));
  assert.equal(r.fleet.counters.reported, 1);
  assert.equal(r.fleet.state, 'stopped');
});

test('stop with a drain timeout aborts what is still rendering and reports it failed', async (t) => {
  let signal: AbortSignal | null = null;
  const r = await rig((_j, s) => ((signal = s), never(_j, s)), { concurrency: 1 });
  t.after(r.close);
  r.server.handler = (req, i) =>
    i === 0
      ? { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('a')] } }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  await r.fleet.start();
  const stopping = r.fleet.stop({ drainTimeoutMs: 3_000 });
  r.clock.fire(await r.clock.timer((x) => x.delay === 3_000));
  assert.equal(signal!.aborted, true);
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await stopping;
  const last = r.server.seen.at(-1)!;
  assert.equal(last.body.results![0]!.outcome, 'failed');
  assert.equal(last.body.results![0]!.error!.name, 'FleetStopping');
});

test(
  'start rejects with the server code when the fleet is refused, and leaves nothing running',
  { timeout: 5_000 },
  async (t) => {
    const r = await rig(ok);
    t.after(r.close);
    r.server.handler = () => ({
      status: 403,
      json: { error: 'the fleet is revoked', code: 'fleet_revoked' },
    });
    await assert.rejects(
      r.fleet.start(),
      (e: unknown) => e instanceof FleetRefusedError && e.code === 'fleet_revoked',
    );
    assert.equal(r.fleet.state, 'stopped');
    assert.equal(r.server.seen.length, 1);
    assert.deepEqual(r.clock.pending(), []);
  },
);

test('the claim carries the configured queues and basic auth', async (t) => {
  const r = await rig(ok, { queues: ['product', 'docs'] });
  t.after(r.close);
  await r.fleet.start();
  assert.deepEqual(r.server.seen[0]!.body.queues, ['product', 'docs']);
  assert.equal(r.server.seen[0]!.auth, 'Basic ' + Buffer.from('fleet:pw').toString('base64'));
});

test('an opted-in signal stops the fleet like stop(), and the handler is gone afterwards', async (t) => {
  const r = await rig(ok, { handleSignals: ['SIGUSR2'] });
  t.after(r.close);
  const before = process.listenerCount('SIGUSR2');
  await r.fleet.start();
  assert.equal(process.listenerCount('SIGUSR2'), before + 1);
  process.emit('SIGUSR2');
  assert.equal(r.fleet.state, 'stopping');
  await r.fleet.stop();
  assert.equal(r.fleet.state, 'stopped');
  assert.equal(process.listenerCount('SIGUSR2'), before);
});

test('a claim already on the wire when stop() comes does not make the fleet look idle or running again', async (t) => {
  const r = await rig(ok);
  t.after(r.close);
  const held = deferred<undefined>();
  r.server.handler = async (_req, i) => {
    if (i === 1) await held.promise;
    return { queueStatus: 'empty', json: { results: [], jobs: [] } };
  };
  await r.fleet.start();
  r.clock.fire(await r.clock.timer());
  await until('the second claim on the wire', () => r.server.seen.length === 2);
  const stopping = r.fleet.stop();
  held.resolve(undefined);
  await stopping;
  const after = r.logs.slice(r.logs.findIndex((l) => l.startsWith('info stopping')));
  assert.deepEqual(
    after.map((l) => l.split(':')[0]),
    ['info stopping', 'info stopped'],
  );
  assert.equal(r.fleet.counters.idleWaits, 2, 'the late answer still counted');
});
