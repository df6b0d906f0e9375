// Fleet-bound users and the one-round-trip fleet path (docs/fleets.md: "Fleet-bound users",
// `/render_queue/next`) against a real Harper (2 worker threads).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { until } from '../wait.js';

let h: HarperInstance;
const bound: Credentials = { username: 'product-fleet', password: 'product-pass' };
const free: Credentials = { username: 'any-fleet', password: 'any-pass' };
const gone: Credentials = { username: 'gone-fleet', password: 'gone-pass' };
const MIN = 60_000;

interface Job {
  id: string;
  queue: string;
  leaseToken: string;
}

before(
  async () => {
    h = await startHarper();
    for (const u of [bound, free, gone]) await h.addUser(u.username, u.password, 'render_fleet');
    const r = await h.fetch('/prerender_admin/config', {
      body: {
        queue: { keeper: { publishInterval: 200 } },
        render: {
          routes: [
            { name: 'product', match: 'prefix', path: '/p/' },
            { name: 'blog', match: 'prefix', path: '/b/' },
            { name: 'docs', match: 'prefix', path: '/d/' },
          ],
        },
      },
    });
    assert.equal(r.status, 200, r.text);
    const f = await h.fetch('/prerender_admin/fleets', {
      body: { name: 'products', queues: ['product', 'docs'], username: bound.username },
    });
    assert.equal(f.status, 200, f.text);
    const g = await h.fetch('/prerender_admin/fleets', { body: { name: 'gone', username: gone.username } });
    assert.equal(g.status, 200, g.text);
    const del = await h.fetch(`/prerender_admin/fleets/${encodeURIComponent(g.json.id)}`, {
      method: 'DELETE',
    });
    assert.equal(del.status, 200, del.text);
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

async function file(urls: string[]) {
  const r = await h.fetch('/render_queue/targets', {
    body: { targets: urls.map((url) => ({ url, dueAt: Date.now() - MIN })) },
  });
  assert.equal(r.status, 200, r.text);
}

async function claim(auth: Credentials, body: Record<string, unknown> = { limit: 25 }) {
  return h.fetch('/render_queue/claim', { auth, body, fresh: true });
}

test('a fleet-bound user claims only its fleet queues, and the body narrows them further', async () => {
  const tag = 'scope';
  await file([
    ...Array.from({ length: 10 }, (_, i) => `https://s.test/p/${tag}${i}`),
    ...Array.from({ length: 10 }, (_, i) => `https://s.test/b/${tag}${i}`),
    ...Array.from({ length: 5 }, (_, i) => `https://s.test/d/${tag}${i}`),
  ]);
  const mine: Job[] = [];
  await until('the product and docs rows', async () => {
    const r = await claim(bound);
    assert.equal(r.status, 200, r.text);
    mine.push(...(r.json as Job[]));
    return mine.length >= 15;
  });
  assert.deepEqual([...new Set(mine.map((j) => j.queue))].sort(), ['docs', 'product']);
  assert.equal(mine.length, 15, 'every product and docs row, and nothing else');
  // The blog rows were left for others: a user bound to no fleet gets them.
  const rest: Job[] = [];
  await until('the blog rows for an unbound user', async () => {
    const r = await claim(free, { limit: 25, queues: ['blog'] });
    rest.push(...(r.json as Job[]));
    return rest.length >= 10;
  });
  assert.ok(rest.every((j) => j.queue === 'blog'));
});

test('a body queue outside the fleet scope is 400 invalid_queues; malformed queues are 400', async () => {
  const r = await claim(bound, { limit: 5, queues: ['blog'] });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.code, 'invalid_queues');
  for (const queues of [[], 'product', [1], ['x'.repeat(201)]]) {
    const bad = await claim(free, { limit: 5, queues });
    assert.equal(bad.status, 400, JSON.stringify(queues));
    assert.equal(bad.json.code, 'invalid_queues');
  }
  const narrowed = await claim(bound, { limit: 5, queues: ['docs'] });
  assert.equal(narrowed.status, 200, narrowed.text);
});

test('the user of a revoked fleet gets 403 fleet_revoked on claim, result and next', async () => {
  const c = await claim(gone);
  assert.equal(c.status, 403, c.text);
  assert.equal(c.json.code, 'fleet_revoked');
  const r = await h.fetch('/render_queue/job_result', {
    auth: gone,
    body: { id: 'https://s.test/p/x', leaseToken: '0'.repeat(28), outcome: 'rendered' },
  });
  assert.equal(r.status, 403, r.text);
  assert.equal(r.json.code, 'fleet_revoked');
  const n = await h.fetch('/render_queue/next', { auth: gone, body: { results: [] } });
  assert.equal(n.status, 403, n.text);
  assert.equal(n.json.code, 'fleet_revoked');
});

test('revoking a fleet stops its user at once on every worker', async () => {
  const user: Credentials = { username: 'short-lived', password: 'short-pass' };
  await h.addUser(user.username, user.password, 'render_fleet');
  const f = await h.fetch('/prerender_admin/fleets', { body: { name: 'short', username: user.username } });
  assert.equal((await claim(user)).status, 200);
  await h.fetch(`/prerender_admin/fleets/${encodeURIComponent(f.json.id)}`, { method: 'DELETE' });
  for (let i = 0; i < 6; i++)
    assert.equal((await claim(user)).status, 403, 'fresh connections reach both workers');
});

test('next reports results and claims in one round trip, answering exactly as job_results and claim', async () => {
  const urls = Array.from({ length: 6 }, (_, i) => `https://s.test/d/next${i}`);
  await file(urls);
  const first: Job[] = [];
  await until('the docs rows through next', async () => {
    const r = await h.fetch('/render_queue/next', { auth: bound, body: { limit: 3, queues: ['docs'] } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results, []);
    first.push(...(r.json.jobs as Job[]).filter((j) => j.id.includes('/next')));
    return first.length >= 3;
  });
  const results = first.map((j) => ({
    id: j.id,
    leaseToken: j.leaseToken,
    outcome: 'rendered',
    statusCode: 200,
  }));
  const r = await h.fetch('/render_queue/next', {
    auth: bound,
    body: { results: [...results, { id: 5 }], limit: 3, queues: ['docs'] },
  });
  assert.equal(r.status, 200, r.text);
  assert.ok(['queued', 'empty'].includes(String(r.headers['x-queue-status'])));
  assert.equal(r.json.results.length, 4);
  for (const [i, a] of (r.json.results as Array<Record<string, unknown>>).slice(0, 3).entries()) {
    assert.equal(a.id, first[i]!.id);
    assert.equal(a.accepted, true);
    assert.equal(typeof a.nextRenderTime, 'number');
  }
  assert.deepEqual(
    { id: r.json.results[3].id, accepted: r.json.results[3].accepted, code: r.json.results[3].code },
    { id: null, accepted: false, code: 'invalid' },
  );
  const again = r.json.jobs as Job[];
  assert.ok(again.every((j) => j.queue === 'docs'));
  // The same results once more: duplicates with the first answers, nothing written twice.
  const dup = await h.fetch('/render_queue/next', { auth: bound, body: { results, limit: 1 } });
  assert.ok((dup.json.results as Array<{ duplicate?: boolean }>).every((a) => a.duplicate === true));
  const bad = await h.fetch('/render_queue/next', { auth: bound, body: { results: 'x' } });
  assert.equal(bad.status, 400);
  const unknown = await h.fetch('/render_queue/next', { auth: bound, body: { nope: 1 } });
  assert.equal(unknown.status, 400);
  assert.equal(unknown.json.code, 'unknown_field');
});

test('a fleet scoped to a queue holding 1 % of the due rows gets full claims while it has due rows', async () => {
  // 9,900 rows of `bulk`, an hour late, fill the 5,000-row global top; the 100 `tiny` rows, a minute
  // late, score below every one of them. Before the ready set had per-queue sections, the tiny fleet
  // got nothing here until the bulk rows were drained.
  const routes = [
    { name: 'product', match: 'prefix', path: '/p/' },
    { name: 'blog', match: 'prefix', path: '/b/' },
    { name: 'docs', match: 'prefix', path: '/d/' },
    { name: 'bulk', match: 'prefix', path: '/k/' },
    { name: 'tiny', match: 'prefix', path: '/t/' },
  ];
  const cfg = await h.fetch('/prerender_admin/config', { body: { render: { routes } } });
  assert.equal(cfg.status, 200, cfg.text);
  const tinyUser: Credentials = { username: 'tiny-fleet', password: 'tiny-pass' };
  await h.addUser(tinyUser.username, tinyUser.password, 'render_fleet');
  const f = await h.fetch('/prerender_admin/fleets', {
    body: { name: 'tiny', queues: ['tiny'], username: tinyUser.username },
  });
  assert.equal(f.status, 200, f.text);
  const now = Date.now();
  const bulk = await h.fetch('/render_queue/targets', {
    body: {
      targets: Array.from({ length: 9_900 }, (_, i) => ({
        url: `https://s.test/k/${i}`,
        dueAt: now - 60 * MIN,
      })),
    },
  });
  assert.equal(bulk.status, 200, bulk.text);
  await file(Array.from({ length: 100 }, (_, i) => `https://s.test/t/${i}`));

  // Once worker 0's keeper holds the last rows of both queues (classified as bulk and tiny), the next
  // publish carries all of them.
  for (const url of ['https://s.test/k/9899', 'https://s.test/t/99'])
    await until(`the keeper holds ${url}`, async () => {
      const e = await h.fetch('/prerender_admin/explain', { body: { url } });
      return e.json.held !== null && e.json.queue === (url.includes('/k/') ? 'bulk' : 'tiny');
    });
  const tiny: Job[] = [];
  await until('the first claim of tiny rows', async () => {
    const r = await claim(tinyUser);
    assert.equal(r.status, 200, r.text);
    tiny.push(...(r.json as Job[]));
    return tiny.length > 0;
  });
  assert.equal(tiny.length, 25, 'the first claim is full');
  for (let i = 1; i < 4; i++) {
    const r = await claim(tinyUser);
    assert.equal(r.status, 200, r.text);
    const jobs = r.json as Job[];
    assert.equal(jobs.length, 25, `claim ${i + 1} of the tiny fleet is full`);
    tiny.push(...jobs);
  }
  assert.ok(tiny.every((j) => j.queue === 'tiny'));
  assert.equal(new Set(tiny.map((j) => j.id)).size, 100, 'every tiny row once');
  // The unscoped claim still hands out the global order: the hour-late bulk rows.
  const r = await claim(free);
  assert.ok((r.json as Job[]).length > 0 && (r.json as Job[]).every((j) => j.queue === 'bulk'));
});
