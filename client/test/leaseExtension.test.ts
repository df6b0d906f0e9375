// A render still running at half its lease asks for a longer one (src/renders.ts); its abort moves with
// each extension granted, and stays where it was when one is refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Renders, type ExtendAnswer } from '../src/renders.js';
import type { FleetCounters } from '../src/fleetOptions.js';
import type { Job, RenderResult, WireResult } from '../src/types.js';
import { FakeClock } from './fakeClock.js';

const LEASE = 20_000;
const MARGIN = 2_000;

function world(answer: (call: number, now: number) => ExtendAnswer) {
  const clock = new FakeClock();
  const asked: Array<{ at: number; byMs: number }> = [];
  const results: WireResult[] = [];
  let finishRender: (r: RenderResult) => void = () => {};
  const renders = new Renders({
    clock,
    render: () => new Promise<RenderResult>((resolve) => (finishRender = resolve)),
    leaseMarginMs: MARGIN,
    count: { claimed: 0, failed: 0, abortedAtLease: 0, rendered: 0 } as unknown as FleetCounters,
    onResult: (wire) => results.push(wire),
    extend: async (_job, byMs) => {
      asked.push({ at: clock.now(), byMs });
      return answer(asked.length, clock.now());
    },
  });
  const job: Job = {
    id: 'https://example.com/slow|desktop',
    url: 'https://example.com/slow',
    queue: 'product',
    isFromSitemap: false,
    expiresAt: clock.now() + LEASE,
    leaseToken: 'tok',
    callbackOrigin: '',
    deviceType: 'desktop',
  };
  renders.start(job, 0, clock.now());
  return { clock, asked, results, renders, finish: (r: RenderResult) => finishRender(r), t0: clock.now() };
}

const settle = () => new Promise((r) => setImmediate(r));

/** Advances in 1 s steps, letting each extension's answer land before the next timer. */
async function run(clock: FakeClock, ms: number): Promise<void> {
  for (let i = 0; i < ms / 1000; i++) {
    clock.advance(1000);
    await settle();
  }
}

test('a render that outlives its lease is extended at half of each lease and never aborted while extensions come', async () => {
  const w = world((_call, now) => now + LEASE);
  await run(w.clock, 60_000);
  assert.equal(w.results.length, 0, 'not aborted');
  assert.equal(w.renders.size, 1);
  // The first at half the lease, then at half of each new one.
  assert.deepEqual(
    w.asked.map((a) => a.at - w.t0),
    [10_000, 20_000, 30_000, 40_000, 50_000, 60_000],
  );
  assert.ok(w.asked.every((a) => a.byMs === LEASE));
  w.finish({ outcome: 'rendered', statusCode: 200, body: '<html></html>' });
  await settle();
  assert.equal(w.results[0]?.outcome, 'rendered');
  // Finished: no more extensions.
  await run(w.clock, 30_000);
  assert.equal(w.asked.length, 6);
});

test('a refused extension leaves the abort at the old lease end', async () => {
  const w = world(() => 'refused');
  await run(w.clock, LEASE);
  assert.equal(w.asked.length, 1);
  assert.equal(w.results.length, 1);
  assert.equal(w.results[0]?.outcome, 'failed');
  assert.equal(w.results[0]?.error?.name, 'LeaseExpired');
});

test('an extension that did not get an answer is asked again at half of what is left', async () => {
  const w = world((call, now) => (call === 1 ? 'failed' : now + LEASE));
  await run(w.clock, 20_000);
  assert.deepEqual(
    w.asked.slice(0, 2).map((a) => a.at - w.t0),
    [10_000, 15_000],
  );
  assert.equal(w.results.length, 0);
});

test('an end that no longer moves (the cap) leaves the render to its abort', async () => {
  const cap = 35_000;
  const w = world((_call, now) => Math.min(now + LEASE, w.t0 + cap));
  await run(w.clock, 40_000);
  assert.equal(w.results.length, 1);
  assert.equal(w.results[0]?.error?.name, 'LeaseExpired');
});
