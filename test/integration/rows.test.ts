// The rows view against a real Harper: an operator finds a URL by prefix, sees its lease and who holds
// it, releases it (the holder's result is then superseded and the row is granted again) and renders
// another row now (a fleet gets it at once); a row key deletes one device's row, a URL every device's;
// pages follow `next` without overlap; the actions are super_user only.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN_USER, startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { fileTargets, postConfig, type Job } from '../api.js';
import { until } from '../wait.js';

let h: HarperInstance;
const fleet: Credentials = { username: 'rows-fleet', password: 'rows-fleet-pass' };
const BASE = 'https://rows.example.com';

interface RowEntry {
  key: string;
  url: string;
  deviceType: string;
  state: string;
  nextRenderTime: number;
  lease: { state: string; expiresAt: number; holder: { user: string; workerId: string } | null } | null;
}

before(
  async () => {
    // Two worker threads: the holder's names are noted by the thread that granted the lease, and a rows
    // page on the other asks it.
    h = await startHarper({ threads: 2 });
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    await postConfig(h, {
      queue: { keeper: { publishInterval: 200, stateInterval: 1000 }, jobLeaseTime: 60_000 },
      render: { deviceTypes: ['desktop', 'mobile'] },
    });
    const now = Date.now();
    await fileTargets(h, [
      ...[1, 2, 3].map((i) => ({ url: `${BASE}/a/${i}`, dueAt: now - 1000 })),
      { url: `${BASE}/b/1`, dueAt: now + 86_400_000 },
    ]);
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

async function rows(query: string, fresh = false): Promise<{ rows: RowEntry[]; next: string | null }> {
  const r = await h.fetch(`/prerender_admin/rows?${query}`, { fresh });
  assert.equal(r.status, 200, r.text);
  return r.json as { rows: RowEntry[]; next: string | null };
}

async function claim(): Promise<Job[]> {
  const r = await h.fetch('/render_queue/claim', {
    body: { limit: 25 },
    auth: fleet,
    headers: { 'x-worker-id': 'w1' },
  });
  assert.equal(r.status, 200, r.text);
  return r.json as Job[];
}

test('an operator finds a row by prefix, sees its holder, releases it (the old result is superseded, the row granted again) and renders another now', async () => {
  const found = await rows(`prefix=${encodeURIComponent(`${BASE}/a/`)}`);
  assert.deepEqual(
    found.rows.map((r) => r.key),
    [1, 2, 3].flatMap((i) => [`${BASE}/a/${i}|desktop`, `${BASE}/a/${i}|mobile`]),
  );
  assert.equal(found.next, null);
  assert.ok(found.rows.every((r) => r.state === 'due' && r.lease === null));

  // `due` with no prefix is the keeper's ready set, best score first, and reading it takes nothing.
  const dueKeys = [1, 2, 3].flatMap((i) => [`${BASE}/a/${i}|desktop`, `${BASE}/a/${i}|mobile`]);
  const ranked = await until('the due rows published', async () => {
    const page = (await rows('state=due&limit=500')).rows as Array<RowEntry & { score?: number }>;
    return dueKeys.every((k) => page.some((r) => r.key === k)) ? page : undefined;
  });
  assert.ok(ranked.every((r) => typeof r.score === 'number' && r.state === 'due'));
  assert.deepEqual(
    ranked.map((r) => r.score),
    ranked.map((r) => r.score).sort((x, y) => y! - x!),
  );
  const target = `${BASE}/a/1|desktop`;
  const jobs = await until('a grant of a/1 desktop', async () => {
    const got = await claim();
    return got.some((j) => j.id === target) ? got : undefined;
  });
  const job = jobs.find((j) => j.id === target)!;
  // On fresh connections, so on either worker: the one that granted it and the one that asks it.
  for (let i = 0; i < 6; i++) {
    const leased = await rows(`state=leased&prefix=${encodeURIComponent(`${BASE}/a/1`)}`, true);
    const row = leased.rows.find((r) => r.key === target);
    assert.equal(row?.state, 'leased');
    assert.equal(row?.lease?.state, 'leased');
    assert.equal(row?.lease?.expiresAt, job.expiresAt);
    assert.deepEqual(row?.lease?.holder, { user: fleet.username, workerId: 'w1' });
  }

  // Without a prefix, `leased` lists the node's leases soonest end first, whichever worker granted them.
  const out = (await rows('state=leased', true)).rows;
  assert.ok(out.some((r) => r.key === target));
  assert.ok(out.every((r) => r.lease !== null && r.lease.holder?.user === fleet.username));
  const order = out.map((r) => [r.lease!.expiresAt, r.key] as const);
  assert.deepEqual(
    order,
    [...order].sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : 1)),
  );
  const denied = await h.fetch('/prerender_admin/rows/release', { body: { urls: [target] }, auth: fleet });
  assert.equal(denied.status, 403, denied.text);
  const released = await h.fetch('/prerender_admin/rows/release', { body: { urls: [target] } });
  assert.equal(released.status, 200, released.text);
  assert.deepEqual(released.json, { released: 1 });
  await until('the release logged with who did it', () =>
    h.output().includes(`rows: ${ADMIN_USER} released 1 lease(s)`),
  );
  const late = await h.fetch('/render_queue/job_result', {
    auth: fleet,
    headers: { 'x-worker-id': 'w1' },
    body: { id: job.id, leaseToken: job.leaseToken, outcome: 'rendered', statusCode: 200, body: '<p>x</p>' },
  });
  assert.equal(late.status, 409, late.text);
  assert.equal((late.json as { code: string }).code, 'superseded');
  // Freed: after its release grace the row is granted again, under a new token.
  const again = await until(
    'a/1 desktop granted again',
    async () => (await claim()).find((j) => j.id === target),
    20_000,
  );
  assert.notEqual(again.leaseToken, job.leaseToken);

  // b/1 is due tomorrow: render-now by URL makes both devices' rows due, and a claim gets them.
  const before = await rows(`prefix=${encodeURIComponent(`${BASE}/b/`)}`);
  assert.deepEqual(
    before.rows.map((r) => r.state),
    ['scheduled', 'scheduled'],
  );
  const now = await h.fetch('/prerender_admin/rows/render-now', { body: { urls: [`${BASE}/b/1`] } });
  assert.equal(now.status, 200, now.text);
  assert.deepEqual(now.json, { rows: 2 });
  const due = await rows(`state=due&prefix=${encodeURIComponent(`${BASE}/b/`)}`);
  assert.equal(due.rows.length, 2);
  const granted = new Set<string>();
  await until('both b/1 rows granted', async () => {
    for (const j of await claim()) granted.add(j.id);
    return granted.has(`${BASE}/b/1|desktop`) && granted.has(`${BASE}/b/1|mobile`);
  });
});

test('a row key deletes that row alone and a URL every device of it; pages follow next without overlap', async () => {
  const one = await h.fetch('/prerender_admin/rows', {
    method: 'DELETE',
    body: { urls: [`${BASE}/a/2|mobile`] },
  });
  assert.equal(one.status, 200, one.text);
  assert.deepEqual(one.json, { deleted: 1 });
  assert.deepEqual(
    (await rows(`prefix=${encodeURIComponent(`${BASE}/a/2`)}`)).rows.map((r) => r.key),
    [`${BASE}/a/2|desktop`],
  );
  const all = await h.fetch('/prerender_admin/rows', { method: 'DELETE', body: { urls: [`${BASE}/a/3`] } });
  assert.deepEqual(all.json, { deleted: 2 });
  const seen: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page: { rows: RowEntry[]; next: string | null } = await rows(
      `limit=2&prefix=${encodeURIComponent(BASE)}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
    );
    seen.push(...page.rows.map((r) => r.key));
    cursor = page.next;
    pages++;
  } while (cursor !== null && pages < 10);
  assert.deepEqual(seen, [
    `${BASE}/a/1|desktop`,
    `${BASE}/a/1|mobile`,
    `${BASE}/a/2|desktop`,
    `${BASE}/b/1|desktop`,
    `${BASE}/b/1|mobile`,
  ]);
  const bad = await h.fetch('/prerender_admin/rows/render-now', {
    body: { urls: [`${BASE}/a/1`, 'ftp://x'] },
  });
  assert.equal(bad.status, 400, bad.text);
  assert.equal((bad.json as { code: string }).code, 'invalid_url');
});
