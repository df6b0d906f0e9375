// How quickly rows that become due reach the ready set, against a real Harper (2 worker threads). The
// publish tick is set a minute away, so what these tests see can only come from the keeper's early
// publishes: a write that makes a row due now, and the refill watch of a burst larger than the set. They
// time nothing: the minute publish (just after each boundary) is kept out of their window, so without
// the mechanism the row or the new set would not come before the deadline at all.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { configForTest, fileTargets } from '../api.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

const MIN = 60_000;
const fleet: Credentials = { username: 'fleet', password: 'fleet-pass' };
let h: HarperInstance;

before(async () => {
  h = await startHarper();
  await h.addUser(fleet.username, fleet.password, 'render_fleet');
});

after(async () => {
  await h?.destroy();
});

interface Job {
  id: string;
  url: string;
  leaseToken: string;
}

async function claim(limit = 25): Promise<Job[]> {
  const r = await h.fetch('/render_queue/claim', { body: { limit }, auth: fleet });
  assert.equal(r.status, 200, r.text);
  return r.json as Job[];
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function overview(): Promise<any> {
  const r = await h.fetch('/prerender_admin/overview');
  assert.equal(r.status, 200, r.text);
  return r.json;
}

/** Waits, if needed, so at least `needMs` of the current minute are left: no minute publish inside. */
async function clearOfMinuteBoundary(needMs: number): Promise<void> {
  if (Date.now() % MIN > MIN - needMs)
    await until('the next minute to begin', () => Date.now() % MIN < 1000, needMs + 5000, 50);
}

test('with the publish tick a minute away, rows filed due now, revalidated or changed are claimable at once', async (t) => {
  await configForTest(t, h, { queue: { keeper: { publishInterval: 60_000 } } });
  const later = ['https://due-now.example.com/revalidated', 'https://due-now.example.com/changed'];
  await fileTargets(
    h,
    later.map((url) => ({ url, dueAt: Date.now() + 3 * 3600_000 })),
  );
  await until('the keeper holds the rows due later', async () => {
    const held = await Promise.all(
      later.map(async (url) => (await h.fetch('/prerender_admin/explain', { body: { url } })).json?.held),
    );
    return held.every((x) => x);
  });
  await clearOfMinuteBoundary(20_000);
  const writes: Array<[string, () => Promise<unknown>]> = [
    [
      'https://due-now.example.com/filed',
      () => fileTargets(h, [{ url: 'https://due-now.example.com/filed', dueAt: Date.now() - MIN }]),
    ],
    [
      later[0]!,
      async () => {
        const r = await h.fetch('/prerender_admin/revalidate', { body: { url: later[0] } });
        assert.equal(r.status, 200, r.text);
      },
    ],
    [later[1]!, () => fileTargets(h, [{ url: later[1], changed: true }])],
  ];
  for (const [url, write] of writes) {
    await write();
    // Each claim that comes back empty pokes nothing here: the keeper's last heartbeat counted 0 due.
    // Without the early publish of the write (checked by removing it) the row waits for the minute
    // publish, more than the 5 s allowed.
    const got = await until(
      `${url} claimable`,
      async () => (await claim(1)).find((j) => j.url === url),
      5000,
      20,
    );
    assert.equal(got.id, key(url), 'the job is the desktop row of its URL');
    const r = await h.fetch('/render_queue/job_result', {
      auth: fleet,
      body: { id: got.id, leaseToken: got.leaseToken, outcome: 'rendered', statusCode: 200 },
    });
    assert.equal(r.status, 200, r.text);
  }
});

test('a burst larger than the ready set is refilled once claims have taken half of it, before any claim finds it empty', async (t) => {
  await configForTest(t, h, { queue: { keeper: { publishInterval: 60_000 } } });
  const capacity = Number((await overview()).ready.capacity);
  const burst = capacity + capacity / 5;
  await clearOfMinuteBoundary(40_000);
  const dueAt = Date.now() - MIN;
  await fileTargets(
    h,
    Array.from({ length: burst }, (_, i) => ({ url: `https://burst.example.com/p/${i}`, dueAt })),
  );
  const full = await until('a full set published from the burst', async () => {
    const o = await overview();
    return o.keeper.dueCount >= burst && o.ready.count === capacity && o.ready.consumed === 0
      ? (o.ready.generation as number)
      : undefined;
  });
  // Take half of the set, never all of it: no claim finds it empty, and the tick and the minute publish
  // are out of reach. The claim that takes it to half asks for the refill.
  let taken = 0;
  while (taken < capacity / 2) {
    const jobs = await claim(25);
    assert.equal(jobs.length, 25, 'the set still has entries');
    taken += jobs.length;
  }
  // Without the half-way poke (checked by removing it) no new set comes before the next minute.
  const next = await until(
    'a new set published while half of the old one was left',
    async () => {
      const o = await overview();
      return o.ready.generation !== full ? o.ready : undefined;
    },
    5000,
    20,
  );
  assert.equal(next.count, burst - taken, 'the new set holds every due row not leased');
});
