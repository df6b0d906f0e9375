// Feeding, auth and error handling against a real Harper (2 worker threads).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { configForTest } from '../api.js';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { until } from '../wait.js';

let h: HarperInstance;
const feeder: Credentials = { username: 'feeder', password: 'feeder-pass' };
const discoverer: Credentials = { username: 'discoverer', password: 'discover-pass' };
const fleet: Credentials = { username: 'fleet', password: 'fleet-pass' };
const nobody: Credentials = { username: 'nobody', password: 'nobody-pass' };

before(
  async () => {
    h = await startHarper();
    await h.operation({ operation: 'add_role', role: 'no_queue_role', permission: { super_user: false } });
    await h.addUser(feeder.username, feeder.password, 'render_feeder');
    await h.addUser(discoverer.username, discoverer.password, 'render_discover');
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    await h.addUser(nobody.username, nobody.password, 'no_queue_role');
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

async function explain(url: string) {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  return r.json as { url: string; queue: string; row: Record<string, unknown> | null };
}

test('the auth matrix: 401 without credentials, 403 without the role, the role or super_user passes', async () => {
  const cases: Array<{
    method: string;
    path: string;
    body?: unknown;
    allowed: Credentials[];
    denied: Credentials[];
  }> = [
    {
      method: 'POST',
      path: '/render_queue/targets',
      body: { targets: [] },
      allowed: [feeder],
      denied: [discoverer, fleet, nobody],
    },
    {
      method: 'DELETE',
      path: '/render_queue/targets',
      body: { urls: [] },
      allowed: [feeder],
      denied: [discoverer, fleet, nobody],
    },
    {
      method: 'POST',
      path: '/render_queue/discover',
      body: { urls: [] },
      allowed: [discoverer],
      denied: [feeder, fleet, nobody],
    },
    {
      method: 'POST',
      path: '/prerender_admin/explain',
      body: { url: 'https://example.com/auth' },
      allowed: [],
      denied: [feeder, discoverer, fleet, nobody],
    },
    {
      method: 'POST',
      path: '/prerender_admin/revalidate',
      body: { url: 'https://example.com/auth' },
      allowed: [],
      denied: [feeder, discoverer, fleet, nobody],
    },
    {
      method: 'GET',
      path: '/prerender_admin/config',
      allowed: [],
      denied: [feeder, discoverer, fleet, nobody],
    },
    {
      method: 'POST',
      path: '/prerender_admin/config',
      body: {},
      allowed: [],
      denied: [feeder, discoverer, fleet, nobody],
    },
  ];
  for (const c of cases) {
    const anon = await h.fetch(c.path, { method: c.method, body: c.body, auth: null });
    assert.equal(anon.status, 401, `${c.method} ${c.path} anonymous`);
    assert.equal(anon.json.code, 'unauthenticated');
    for (const who of c.denied) {
      const r = await h.fetch(c.path, { method: c.method, body: c.body, auth: who });
      assert.equal(r.status, 403, `${c.method} ${c.path} as ${who.username}`);
      assert.equal(r.json.code, 'forbidden');
    }
    for (const who of c.allowed) {
      const r = await h.fetch(c.path, { method: c.method, body: c.body, auth: who });
      assert.ok(
        r.status < 300 || r.status === 404,
        `${c.method} ${c.path} as ${who.username}: ${r.status} ${r.text}`,
      );
    }
    const admin = await h.fetch(c.path, { method: c.method, body: c.body });
    assert.ok(
      admin.status < 300 || admin.status === 404,
      `${c.method} ${c.path} as admin: ${admin.status} ${admin.text}`,
    );
  }
  const wrong = await h.fetch('/render_queue/targets', {
    body: { targets: [] },
    auth: { username: 'feeder', password: 'nope' },
  });
  assert.equal(wrong.status, 401);
});

test('a batch lands with per-item rejections naming index and reason', async () => {
  const r = await h.fetch('/render_queue/targets', {
    auth: feeder,
    body: {
      targets: [
        { url: 'https://example.com/ok-1', cadenceMs: 3_600_000, fromSitemap: true },
        { url: 'ftp://example.com/x' },
        { url: 'not a url' },
        { url: 'https://example.com/' + 'a'.repeat(1900) },
        { url: 'https://example.com/ok-2', bogus: 1 },
        { url: 'https://example.com/ok-3', cadenceMs: 'hourly' },
        42,
        { url: 'https://example.com/ok-4', dueAt: Date.now() - 1000 },
      ],
    },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.upserted, 2);
  assert.deepEqual(
    r.json.rejected.map((x: { index: number }) => x.index),
    [1, 2, 3, 4, 5, 6],
  );
  for (const rej of r.json.rejected) assert.equal(typeof rej.error, 'string');
  assert.match(r.json.rejected[0].error, /absolute http\(s\) URL/);
  assert.match(r.json.rejected[2].error, /1900 bytes/);
  assert.match(r.json.rejected[3].error, /bogus/);
  const ok1 = await explain('https://example.com/ok-1');
  assert.equal(ok1.row?.fromSitemap, true);
  assert.equal(ok1.row?.effectiveInterval, 3_600_000);
  assert.equal(ok1.row?.verified, true);
  const ok4 = await explain('https://example.com/ok-4');
  assert.equal(typeof ok4.row?.urgentAt, 'number');
  assert.equal((ok4.row?.nextRenderTime as number) % 60_000, 0);
  assert.equal((await explain('https://example.com/ok-2')).row, null);
});

test('a 10,000-target batch lands whole and a 10,001-target batch is refused whole with 413', async () => {
  const targets = Array.from({ length: 10_000 }, (_, i) => ({ url: `https://bulk.example.com/item/${i}` }));
  const r = await h.fetch('/render_queue/targets', { auth: feeder, body: { targets } });
  assert.equal(r.status, 200, r.text.slice(0, 300));
  assert.equal(r.json.upserted, 10_000);
  assert.deepEqual(r.json.rejected, []);
  assert.notEqual((await explain('https://bulk.example.com/item/9999')).row, null);
  const tooMany = [
    ...targets.map((t) => ({ url: t.url.replace('bulk.', 'toomany.') })),
    { url: 'https://toomany.example.com/last' },
  ];
  const big = await h.fetch('/render_queue/targets', { auth: feeder, body: { targets: tooMany } });
  assert.equal(big.status, 413);
  assert.equal(big.json.code, 'too_many_targets');
  assert.equal((await explain('https://toomany.example.com/item/0')).row, null);
});

test('malformed, mistyped, unknown-field and oversized bodies are 4xx with {error, code} and write nothing', async () => {
  const bad = [
    { rawBody: '{"targets": [', code: 'invalid_json', status: 400 },
    { rawBody: '[]', code: 'invalid_body', status: 400 },
    { rawBody: '"text"', code: 'invalid_body', status: 400 },
    { rawBody: '{"targets": {"url": "https://example.com/m"}}', code: 'invalid_body', status: 400 },
    {
      rawBody: '{"targets": [{"url": "https://example.com/m"}], "extra": true}',
      code: 'unknown_field',
      status: 400,
    },
  ];
  for (const b of bad) {
    const r = await h.fetch('/render_queue/targets', { auth: feeder, method: 'POST', rawBody: b.rawBody });
    assert.equal(r.status, b.status, `${b.rawBody}: ${r.text}`);
    assert.equal(r.json.code, b.code);
    assert.equal(typeof r.json.error, 'string');
  }
  const huge = JSON.stringify({ targets: [{ url: 'https://example.com/huge', pad: 'x'.repeat(33 << 20) }] });
  const r = await h.fetch('/render_queue/targets', { auth: feeder, method: 'POST', rawBody: huge });
  assert.equal(r.status, 413);
  assert.equal(r.json.code, 'payload_too_large');
  assert.equal((await explain('https://example.com/m')).row, null);
  assert.equal((await explain('https://example.com/huge')).row, null);
  const explainBad = await h.fetch('/prerender_admin/explain', { body: { url: 42 } });
  assert.equal(explainBad.status, 400);
  const unknownPath = await h.fetch('/render_queue/nothing-here');
  assert.equal(unknownPath.status, 404);
  assert.equal(unknownPath.json.code, 'not_found');
  const wrongMethod = await h.fetch('/render_queue/targets', { method: 'GET', auth: feeder });
  assert.equal(wrongMethod.status, 405);
});

test('existing rows keep their due time; dueAt now never demotes; changed makes a row due now', async () => {
  const url = 'https://example.com/keep';
  const future = Date.now() + 5 * 3_600_000;
  await h.fetch('/render_queue/targets', { auth: feeder, body: { targets: [{ url, dueAt: future }] } });
  const first = await explain(url);
  await h.fetch('/render_queue/targets', { auth: feeder, body: { targets: [{ url, fromSitemap: true }] } });
  const second = await explain(url);
  assert.equal(second.row?.nextRenderTime, first.row?.nextRenderTime);
  assert.equal(second.row?.fromSitemap, true);
  await h.fetch('/render_queue/targets', { auth: feeder, body: { targets: [{ url, changed: true }] } });
  const changed = await explain(url);
  assert.ok((changed.row?.nextRenderTime as number) <= Date.now());
  assert.equal(typeof changed.row?.changedAt, 'number');
});

test('discover files unverified rows only where absent and never changes an existing row', async () => {
  const existing = 'https://example.com/ok-1';
  const before = await explain(existing);
  const r = await h.fetch('/render_queue/discover', {
    auth: discoverer,
    body: {
      urls: [existing, 'https://example.com/found-1', 'https://example.com/found-1', 'javascript:alert(1)'],
    },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.filed, 1);
  assert.deepEqual(
    r.json.rejected.map((x: { index: number }) => x.index),
    [3],
  );
  assert.deepEqual((await explain(existing)).row, before.row);
  const found = await explain('https://example.com/found-1');
  assert.equal(found.row?.verified, false);
  const again = await h.fetch('/render_queue/discover', {
    auth: discoverer,
    body: { urls: ['https://example.com/found-1'] },
  });
  assert.equal(again.json.filed, 0);
});

test('delete counts only rows that existed', async () => {
  const r = await h.fetch('/render_queue/targets', {
    method: 'DELETE',
    auth: feeder,
    body: { urls: ['https://example.com/found-1', 'https://example.com/never-filed'] },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.deleted, 1);
  assert.equal((await explain('https://example.com/found-1')).row, null);
});

test('revalidate makes a row due now and urgent; an unknown url is 404', async () => {
  const url = 'https://example.com/reval';
  await h.fetch('/render_queue/targets', {
    auth: feeder,
    body: { targets: [{ url, dueAt: Date.now() + 86_400_000 }] },
  });
  const r = await h.fetch('/prerender_admin/revalidate', { body: { url } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.url, url);
  assert.ok(r.json.nextRenderTime <= Date.now());
  assert.equal(typeof r.json.urgentAt, 'number');
  assert.deepEqual(
    (r.json.devices as Array<{ deviceType: string }>).map((d) => d.deviceType),
    ['desktop'],
    'each device row of the URL, here the one default device',
  );
  const missing = await h.fetch('/prerender_admin/revalidate', { body: { url: 'https://example.com/none' } });
  assert.equal(missing.status, 404);
  assert.equal(missing.json.code, 'not_found');
});

test('explain answers the queue from the routes, and row null for an unknown url', async (t) => {
  await configForTest(t, h, { render: { routes: [{ name: 'product', match: 'prefix', path: '/p/' }] } });
  const e = await explain('https://example.com/p/unknown');
  assert.equal(e.queue, 'product');
  assert.equal(e.row, null);
  assert.equal((await explain('https://example.com/x')).queue, 'unrouted');
});

test('config: a bad value is a 400 naming the key; a good one is applied on every worker', async (t) => {
  const before = (await h.fetch('/prerender_admin/config')).json.stall.after as number;
  t.after(() => h.fetch('/prerender_admin/config', { body: { stall: { after: before } } }));
  const bad = await h.fetch('/prerender_admin/config', { body: { stall: { after: 5 } } });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.code, 'invalid_config');
  assert.equal(bad.json.key, 'stall.after');
  assert.match(bad.json.error, /stall\.after/);
  const good = await h.fetch('/prerender_admin/config', { body: { stall: { after: 2000 }, nonsense: 1 } });
  assert.equal(good.status, 200);
  assert.equal(good.json.stall.after, 2000);
  // Fresh connections land on either worker; every one must see the change within a moment.
  const deadline = Date.now() + 5000;
  let seen = 0;
  while (Date.now() < deadline && seen < 10) {
    const r = await h.fetch('/prerender_admin/config', { fresh: true });
    if (r.json.stall.after === 2000) seen++;
    else seen = 0;
  }
  assert.equal(seen, 10);
  // The same unknown key again, on fresh connections until both workers have taken it: the node logs it
  // once, not once per worker. Each worker then takes a marker key of its own; a worker's log
  // lines keep their order, so once both markers are in the output a second "nonsense" line would be too.
  const servedBy = new Set<string>();
  for (let i = 0; i < 40 && servedBy.size < 2; i++) {
    const r = await h.fetch('/prerender_admin/config', { body: { nonsense: 2 }, fresh: true });
    assert.equal(r.status, 200, r.text);
    servedBy.add(String(r.headers['x-served-by']));
  }
  assert.equal(servedBy.size, 2, 'both workers answered the unknown key');
  const markers = new Map<string, string>();
  for (let i = 0; i < 40 && markers.size < 2; i++) {
    const r = await h.fetch('/prerender_admin/config', { body: { [`marker${i}`]: 1 }, fresh: true });
    assert.equal(r.status, 200, r.text);
    const worker = String(r.headers['x-served-by']);
    if (!markers.has(worker)) markers.set(worker, `marker${i}`);
  }
  assert.equal(markers.size, 2, 'both workers took a marker key');
  await until('both markers logged', () =>
    [...markers.values()].every((m) => h.output().includes(`Unknown configuration key ${m} `)),
  );
  assert.equal(
    (h.output().match(/Unknown configuration key nonsense/g) ?? []).length,
    1,
    h.output().slice(-2000),
  );
});
