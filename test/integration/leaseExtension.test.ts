// Longer leases against a real Harper (2 worker threads): a render that outlives queue.jobLeaseTime keeps
// its lease with POST /render_queue/extend and is never granted twice, while another fleet claims over and
// over on fresh connections (so on both workers); its result then applies. An extension refused because
// the job went to someone else changes nothing, and that render's result is superseded. The prerender
// protocol's extension (no token) is fenced by user and x-worker-id; a queue.maxLeaseTime below
// jobLeaseTime is refused naming both keys.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN_PASS, ADMIN_USER, startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { configForTest, fileTargets, type Job } from '../api.js';
import { sleep, until } from '../wait.js';

/** How long the long render runs (QK_EXTEND_RUN_MS: 300000 is the 5-minute render; 60 s by default). */
const RUN_MS = Number(process.env.QK_EXTEND_RUN_MS ?? 60_000);

let h: HarperInstance;
const fleetA: Credentials = { username: 'ext-fleet-a', password: 'ext-fleet-a-pass' };
const fleetB: Credentials = { username: 'ext-fleet-b', password: 'ext-fleet-b-pass' };
const admin: Credentials = { username: ADMIN_USER, password: ADMIN_PASS };

before(
  async () => {
    h = await startHarper({ harperConfig: { threads: { count: 2 } } });
    await h.addUser(fleetA.username, fleetA.password, 'render_fleet');
    await h.addUser(fleetB.username, fleetB.password, 'render_fleet');
    const r = await h.fetch('/prerender_admin/config', {
      body: { queue: { keeper: { publishInterval: 200, stateInterval: 1000 } } },
    });
    assert.equal(r.status, 200, r.text);
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

async function claimAs(who: Credentials, workerId = 'w1'): Promise<Job[]> {
  const r = await h.fetch('/render_queue/claim', {
    body: { limit: 25 },
    auth: who,
    fresh: true,
    headers: { 'x-worker-id': workerId },
  });
  assert.equal(r.status, 200, r.text);
  return r.json as Job[];
}

async function extend(who: Credentials, body: Record<string, unknown>, workerId = 'w1') {
  return h.fetch('/render_queue/extend', {
    body,
    auth: who,
    fresh: true,
    headers: { 'x-worker-id': workerId },
  });
}

async function result(who: Credentials, job: Job) {
  return h.fetch('/render_queue/job_result', {
    auth: who,
    body: { id: job.id, leaseToken: job.leaseToken, outcome: 'rendered', statusCode: 200, body: '<p>ok</p>' },
  });
}

/** Claims as `who` until the job of `url` comes; any other job is reported at once. */
async function grantOf(who: Credentials, url: string, workerId = 'w1'): Promise<Job> {
  return until(
    `a grant of ${url}`,
    async () => {
      const jobs = await claimAs(who, workerId);
      for (const j of jobs.filter((x) => x.url !== url)) await result(who, j);
      return jobs.find((j) => j.url === url);
    },
    30_000,
  );
}

async function leaseOf(url: string) {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  const devices = (
    r.json as { devices?: Array<{ lease: { state: string; expiresAt: number | null } | null }> }
  ).devices;
  const lease =
    devices?.[0]?.lease ?? (r.json as { lease?: { state: string; expiresAt: number | null } }).lease;
  return lease ?? null;
}

test('a render that outlives queue.jobLeaseTime, extended every 10 s for 60 s (QK_EXTEND_RUN_MS), is never granted twice and its result applies', async (t) => {
  const LEASE = 20_000;
  await configForTest(t, h, { queue: { jobLeaseTime: LEASE } });
  const url = 'https://ext.example.com/slow';
  await fileTargets(h, [{ url, dueAt: Date.now() - 1000 }]);
  const job = await grantOf(fleetA, url);
  const grantedAt = Date.now();
  const firstEnd = job.expiresAt;
  let lastEnd = firstEnd;
  let extensions = 0;
  let claimsByB = 0;
  while (Date.now() - grantedAt < RUN_MS) {
    // Another fleet claims all the while, on fresh connections: it must never get the key.
    const until10 = Date.now() + 10_000;
    while (Date.now() < until10) {
      const jobs = await claimAs(fleetB, 'b1');
      claimsByB++;
      assert.equal(
        jobs.find((j) => j.url === url),
        undefined,
        `the key was granted again ${Date.now() - grantedAt} ms after its first grant`,
      );
      for (const j of jobs) await result(fleetB, j);
      await sleep(500);
    }
    // byMs far past the limit: clamped to queue.maxLeaseExtension (here jobLeaseTime).
    const before = Date.now();
    const r = await extend(fleetA, { id: job.id, leaseToken: job.leaseToken, byMs: 3_600_000 });
    assert.equal(r.status, 200, r.text);
    const { expiresAt } = r.json as { expiresAt: number };
    assert.ok(expiresAt >= lastEnd, 'never shorter');
    assert.ok(expiresAt <= Date.now() + LEASE + 1000, `clamped to ${LEASE} ms: ${expiresAt - before}`);
    assert.ok(expiresAt >= before + LEASE - 1000, `extended by about ${LEASE} ms: ${expiresAt - before}`);
    lastEnd = expiresAt;
    extensions++;
  }
  assert.ok(Date.now() > firstEnd + 30_000, 'the render outlived its first lease by far');
  // The keeper's view (explain) goes by the new end.
  const lease = await leaseOf(url);
  assert.equal(lease?.state, 'leased');
  assert.equal(lease?.expiresAt, lastEnd);
  const done = await result(fleetA, job);
  assert.equal(done.status, 200, done.text);
  assert.equal((done.json as { accepted: boolean }).accepted, true);
  t.diagnostic(
    `${extensions} extensions over ${Date.now() - grantedAt} ms; ${claimsByB} claims by the other fleet`,
  );
});

test('an extension refused because the job went to someone else changes nothing, and that render’s result is superseded', async (t) => {
  const LEASE = 5_000;
  await configForTest(t, h, { queue: { jobLeaseTime: LEASE } });
  const url = 'https://ext.example.com/lost';
  await fileTargets(h, [{ url, dueAt: Date.now() - 1000 }]);
  const first = await grantOf(fleetA, url);
  // Not extended: its lease ends and the key goes to the other fleet.
  await sleep(Math.max(0, first.expiresAt - Date.now()) + 500);
  const second = await grantOf(fleetB, url, 'b1');
  assert.notEqual(second.leaseToken, first.leaseToken);
  const secondEnd = (await leaseOf(url))?.expiresAt;
  const refused = await extend(fleetA, { id: first.id, leaseToken: first.leaseToken, byMs: LEASE });
  assert.equal(refused.status, 409, refused.text);
  assert.equal((refused.json as { code: string }).code, 'superseded');
  // Nor may the first fleet extend the second's lease with the second's token.
  const stolen = await extend(fleetA, { id: second.id, leaseToken: second.leaseToken, byMs: LEASE });
  assert.equal(stolen.status, 409, stolen.text);
  assert.equal((await leaseOf(url))?.expiresAt, secondEnd, 'nothing changed');
  const late = await result(fleetA, first);
  assert.equal(late.status, 409, late.text);
  assert.equal((late.json as { code: string }).code, 'superseded');
  const own = await result(fleetB, second);
  assert.equal(own.status, 200, own.text);
  // Reported: the lease cannot be extended any more.
  const after = await extend(fleetB, { id: second.id, leaseToken: second.leaseToken, byMs: LEASE }, 'b1');
  assert.equal(after.status, 409, after.text);
  assert.equal((after.json as { code: string }).code, 'lease_ended');
});

test("an extension without a token is the prerender protocol's: the latest grant's user and x-worker-id only", async (t) => {
  await configForTest(t, h, { queue: { jobLeaseTime: 30_000 } });
  const url = 'https://ext.example.com/prerender';
  await fileTargets(h, [{ url, dueAt: Date.now() - 1000 }]);
  const job = await grantOf(fleetA, url, 'pw-1');
  const otherWorker = await extend(fleetA, { id: job.id, byMs: 30_000 }, 'pw-2');
  assert.equal(otherWorker.status, 409, otherWorker.text);
  const otherUser = await extend(fleetB, { id: job.id, byMs: 30_000 }, 'pw-1');
  assert.equal(otherUser.status, 409, otherUser.text);
  const asAdmin = await extend(admin, { id: job.id, byMs: 30_000 }, 'pw-2');
  assert.equal(asAdmin.status, 409, asAdmin.text);
  await sleep(2000);
  const own = await extend(fleetA, { id: job.id, byMs: 30_000 }, 'pw-1');
  assert.equal(own.status, 200, own.text);
  assert.ok((own.json as { expiresAt: number }).expiresAt > job.expiresAt);
  const done = await result(fleetA, job);
  assert.equal(done.status, 200, done.text);
});

test('a queue.maxLeaseTime below queue.jobLeaseTime is refused naming both keys, and changes nothing', async () => {
  const before = (await h.fetch('/prerender_admin/config')).json as { queue: Record<string, unknown> };
  const r = await h.fetch('/prerender_admin/config', {
    body: { queue: { maxLeaseTime: 10_000, jobLeaseTime: 20_000 } },
  });
  assert.equal(r.status, 400, r.text);
  assert.equal((r.json as { code: string }).code, 'invalid_config');
  assert.match((r.json as { error: string }).error, /queue\.maxLeaseTime.*queue\.jobLeaseTime/);
  const now = (await h.fetch('/prerender_admin/config')).json as { queue: Record<string, unknown> };
  assert.equal(now.queue.maxLeaseTime, before.queue.maxLeaseTime);
  assert.equal(now.queue.jobLeaseTime, before.queue.jobLeaseTime);
});
