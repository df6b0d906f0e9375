// POST /prerender_admin/config is a read-modify-write of one override row. Harper gives no compare-and-set, so two updates on different keys that overlap must be
// serialised, or the later write carries the earlier snapshot and drops the other's key. The overlap is
// forced, not hoped for: CONFIG_UPDATE_HOLD_ENV (util/config/updateHold.ts), which the composition root
// reads once and hands to RuntimeConfig, holds every update open between its read and its write, so
// without the lock both always read the same row (with the lock taken out, the first key of each pair
// is lost every time).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { CONFIG_UPDATE_HOLD_ENV } from '../../util/config/updateHold.js';
import { startHarper, type HarperInstance } from '../harness.js';
import { until } from '../wait.js';

let h: HarperInstance;
const HOLD_MS = 300;

before(
  async () => {
    h = await startHarper({ env: { [CONFIG_UPDATE_HOLD_ENV]: String(HOLD_MS) } });
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

test('the hold the environment asks for reaches every update: the overlap below is forced', async () => {
  // Without it the pairs below could run one after the other and pass without the lock. The quickest of
  // three updates in a row, so a slow first request after boot cannot pass for the hold.
  const took: number[] = [];
  for (const after of [6000, 6100, 6200]) {
    const t0 = performance.now();
    const r = await h.fetch('/prerender_admin/config', { body: { stall: { after } }, fresh: true });
    took.push(performance.now() - t0);
    assert.equal(r.status, 200, r.text);
  }
  assert.ok(Math.min(...took) >= HOLD_MS, `updates answered in ${took.map(Math.round).join(', ')} ms`);
});

test('two overlapping config updates on different keys, through two workers, both land', async () => {
  const pairs: Array<[Record<string, unknown>, Record<string, unknown>]> = [
    [{ stall: { after: 7000 } }, { stall: { maxNudges: 7 } }],
    [{ notify: { ratePerMinute: 77 } }, { queue: { maxClaimLimit: 17 } }],
    [{ stall: { sweepLimit: 9 } }, { notify: { edgeCooldown: 9000 } }],
  ];
  for (const [a, b] of pairs) {
    const [ra, rb] = await Promise.all([
      h.fetch('/prerender_admin/config', { body: a, fresh: true }),
      h.fetch('/prerender_admin/config', { body: b, fresh: true }),
    ]);
    assert.equal(ra.status, 200, ra.text);
    assert.equal(rb.status, 200, rb.text);
  }
  const want = (c: QueueKeeperConfig) =>
    c.stall.after === 7000 &&
    c.stall.maxNudges === 7 &&
    c.notify.ratePerMinute === 77 &&
    c.queue.maxClaimLimit === 17 &&
    c.stall.sweepLimit === 9 &&
    c.notify.edgeCooldown === 9000;
  // Every worker follows the stored row; both halves of every pair must be in it.
  for (let i = 0; i < 6; i++) {
    const c = await until(
      'the effective config to hold every update',
      async () => {
        const r = await h.fetch('/prerender_admin/config', { fresh: true });
        return want(r.json) ? r.json : undefined;
      },
      5000,
    );
    assert.ok(c);
  }
});
