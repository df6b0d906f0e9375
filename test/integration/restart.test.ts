// A restart of Harper on the same root: config overrides survive, the keeper reloads every row and
// queue-state answers the same counts (503 until it can vouch for them). The big case files BIG_ROWS
// rows: enough that the load after the restart spans many answers of a 10 ms poll. The same load at
// 250,000 and 1,000,000 rows is measured by bench/keeper-scale.ts, and QK_RESTART_ROWS=100000 runs
// this file at the old size.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { request, startHarper, type HarperInstance } from '../harness.js';
import { sleep } from '../wait.js';

let h: HarperInstance | undefined;
after(async () => {
  await h?.destroy();
});

const MIN = 60_000;
const BIG_ROWS = Number(process.env.QK_RESTART_ROWS ?? 40_000);
const BATCH = 10_000;
/** Each test boots Harper twice and files its rows: bounded, so a boot that hangs fails the test. */
const BOOTS_TIMEOUT_MS = 300_000;

async function settledState(
  inst: HarperInstance,
  want: (s: { now: { due: number }; coming: { next24h: number } }) => boolean,
) {
  const seen: number[] = [];
  const deadline = Date.now() + 60_000;
  for (;;) {
    const r = await inst.fetch('/prerender_admin/queue-state');
    seen.push(r.status);
    if (r.status === 503) {
      assert.equal(r.json.trust.live, false);
      assert.equal(r.json.trust.exact, false);
      assert.equal(typeof r.json.trust.phase, 'string');
      assert.equal(r.json.now.due, undefined, 'a 503 carries no counts');
    } else {
      assert.equal(r.status, 200, r.text);
      if (want(r.json)) return { state: r.json, seen };
    }
    if (Date.now() > deadline) assert.fail(`queue-state never settled; statuses ${seen.join(',')}`);
    await sleep(100);
  }
}

test(
  'after a restart the config overrides and every row are back with the same queue-state counts',
  { timeout: BOOTS_TIMEOUT_MS },
  async () => {
    h = await startHarper();
    const set = await h.fetch('/prerender_admin/config', {
      body: { stall: { after: 4000 }, queue: { keeper: { stateInterval: 1000 } } },
    });
    assert.equal(set.status, 200, set.text);
    const now = Date.now();
    const targets = [
      ...Array.from({ length: 3000 }, (_, i) => ({
        url: `https://restart.example.com/due/${i}`,
        dueAt: now - 3 * MIN,
      })),
      ...Array.from({ length: 2000 }, (_, i) => ({
        url: `https://restart.example.com/later/${i}`,
        dueAt: now + 90 * MIN,
      })),
    ];
    const filed = await h.fetch('/render_queue/targets', { body: { targets } });
    assert.equal(filed.status, 200, filed.text);
    const before = await settledState(h, (s) => s.now.due === 3000 && s.coming.next24h === 2000);

    await h.stop();
    const root = h.root;
    h = await startHarper({ root });
    const cfg = await h.fetch('/prerender_admin/config');
    assert.equal(cfg.json.stall.after, 4000);
    assert.equal(cfg.json.queue.keeper.stateInterval, 1000);
    const afterRestart = await settledState(h, (s) => s.now.due === 3000 && s.coming.next24h === 2000);
    assert.deepEqual(afterRestart.state.now.due, before.state.now.due);
    assert.deepEqual(afterRestart.state.coming.byHour, before.state.coming.byHour);
    assert.deepEqual(afterRestart.state.lateness.discovered, before.state.lateness.discovered);
    assert.equal(afterRestart.state.trust.exact, true);
  },
);

test(
  `with ${BIG_ROWS.toLocaleString('en-US')} rows a restarted node answers 503 while the keeper loads, then the exact counts`,
  { timeout: BOOTS_TIMEOUT_MS },
  async (t) => {
    assert.equal(BIG_ROWS % BATCH, 0, `QK_RESTART_ROWS is a multiple of ${BATCH}`);
    await h?.destroy();
    const first = await startHarper();
    h = first;
    const now = Date.now();
    for (let b = 0; b < BIG_ROWS / BATCH; b++) {
      const targets = Array.from({ length: BATCH }, (_, i) => ({
        url: `https://big.example.com/${b}/${i}`,
        dueAt: i % 2 === 0 ? now - 3 * MIN : now + 90 * MIN,
      }));
      const filed = await first.fetch('/render_queue/targets', { body: { targets } });
      assert.equal(filed.status, 200, filed.text);
    }
    const half = BIG_ROWS / 2;
    await settledState(first, (s) => s.now.due === half && s.coming.next24h === half);
    await first.stop();

    // Poll from before the restart, so the very first answers of the new process are seen (ports are
    // kept with the root). Connection errors are expected until Harper listens.
    const seen: Array<{ status: number; phase?: string }> = [];
    let polling = true;
    const url = first.url;
    const poller = (async () => {
      while (polling) {
        try {
          const r = await request(url, '/prerender_admin/queue-state', { fresh: true });
          seen.push({ status: r.status, phase: r.json?.trust?.phase });
          if (r.status === 200) return;
        } catch {
          // not listening yet
        }
        await sleep(10);
      }
    })();
    let settled;
    try {
      h = await startHarper({ root: first.root });
      settled = await settledState(h, (s) => s.now.due === half && s.coming.next24h === half);
    } finally {
      // Also when the restart fails: a poller left running would keep this file alive.
      polling = false;
      await poller;
    }
    const byPhase = new Map<string, number>();
    for (const x of seen)
      byPhase.set(`${x.status} ${x.phase}`, (byPhase.get(`${x.status} ${x.phase}`) ?? 0) + 1);
    t.diagnostic(`answers after the restart: ${[...byPhase].map(([k, n]) => `${k}×${n}`).join(', ')}`);
    const firstOk = seen.findIndex((x) => x.status === 200);
    const before = firstOk < 0 ? seen : seen.slice(0, firstOk);
    assert.ok(
      before.some((x) => x.status === 503 && x.phase === 'loading'),
      `a 503 while loading was observed before the first 200 (saw ${JSON.stringify(seen.slice(0, 20))})`,
    );
    assert.equal(settled.state.trust.exact, true);
    assert.equal(settled.state.trust.keeper.load.rows, BIG_ROWS);
  },
);
