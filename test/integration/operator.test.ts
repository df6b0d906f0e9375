// What an operator reads, against a real Harper (2 worker threads): the read-only render_observer role
// reads every operator GET and explain and is refused (403) on every state change; the failing list
// shows the rows whose last result failed, worst first, paged, with their last error, and a row
// leaves it at its next success.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { fileTargets, postConfig } from '../api.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

let h: HarperInstance;
const observer: Credentials = { username: 'watcher', password: 'watcher-pass' };
const fleet: Credentials = { username: 'fleet-o', password: 'fleet-o-pass' };
const MIN = 60_000;

before(async () => {
  h = await startHarper();
  await h.addUser(observer.username, observer.password, 'render_observer');
  await h.addUser(fleet.username, fleet.password, 'render_fleet');
  await postConfig(h, {
    queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
    render: { routes: [{ name: 'shop', match: 'prefix', path: '/shop/' }], failureRetry: { fastRetries: 0 } },
  });
});

after(async () => {
  await h?.destroy();
});

test('an observer reads every operator GET and explain, and is refused 403 on every state change', async () => {
  for (const path of [
    '/prerender_admin/queue-state',
    '/prerender_admin/overview',
    '/prerender_admin/metrics',
    '/prerender_admin/config',
    '/prerender_admin/fleets',
    '/prerender_admin/hooks',
    '/prerender_admin/stall-ledger',
    '/prerender_admin/failing',
    '/prerender_admin/console',
  ]) {
    const r = await h.fetch(path, { auth: observer, method: 'GET' });
    // queue-state may answer 503 while the keeper cannot vouch for its numbers: that is a read too.
    assert.ok(
      r.status === 200 || (path.endsWith('queue-state') && r.status === 503),
      `${path}: ${r.status} ${r.text}`,
    );
  }
  const explained = await h.fetch('/prerender_admin/explain', {
    auth: observer,
    body: { url: 'https://x.test/a' },
  });
  assert.equal(explained.status, 200, explained.text);
  const changes: Array<[string, string, unknown]> = [
    ['POST', '/prerender_admin/config', { stall: { after: 2000 } }],
    ['POST', '/prerender_admin/pause', { scope: 'all' }],
    ['POST', '/prerender_admin/resume', { scope: 'all' }],
    ['POST', '/prerender_admin/revalidate', { url: 'https://x.test/a' }],
    ['POST', '/prerender_admin/fleets', { name: 'f' }],
    ['DELETE', '/prerender_admin/fleets/x', undefined],
    ['POST', '/prerender_admin/hooks', { fleetId: 'x', url: 'https://h.test/' }],
    ['POST', '/render_queue/targets', { targets: [{ url: 'https://x.test/a' }] }],
    ['POST', '/render_queue/claim', { limit: 1 }],
  ];
  for (const [method, path, body] of changes) {
    const r = await h.fetch(path, { auth: observer, method, ...(body === undefined ? {} : { body }) });
    assert.equal(r.status, 403, `${method} ${path}: ${r.text}`);
    assert.equal((r.json as { code: string }).code, 'forbidden');
  }
  assert.equal(
    ((await h.fetch('/prerender_admin/config')).json as { stall: { after: number } }).stall.after,
    120000,
  );
});

interface Job {
  id: string;
  url: string;
  leaseToken: string;
}

async function claimAll(n: number): Promise<Job[]> {
  const got: Job[] = [];
  await until(`${n} jobs`, async () => {
    const r = await h.fetch('/render_queue/claim', { auth: fleet, body: { limit: 25 } });
    got.push(...(r.json as Job[]));
    return got.length >= n;
  });
  return got;
}

const report = (j: Job, outcome: string, error?: unknown) =>
  h.fetch('/render_queue/job_result', {
    auth: fleet,
    body: {
      id: j.id,
      leaseToken: j.leaseToken,
      outcome,
      statusCode: outcome === 'failed' ? 503 : 200,
      ...(error ? { error } : {}),
    },
  });

test('the failing list shows failing rows worst first with their last error, pages by cursor, filters by queue, and drops a row at its success', async () => {
  const urls = ['https://x.test/shop/1', 'https://x.test/shop/2', 'https://x.test/blog/3'];
  await fileTargets(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() - MIN })),
  );
  for (const j of await claimAll(3)) {
    const r = await report(j, 'failed', { name: 'TimeoutError', message: `timed out on ${j.id}` });
    assert.equal(r.status, 200, r.text);
  }
  // shop/1 fails a second time (revalidate makes it due again; its lease was released by the backoff).
  await h.fetch('/prerender_admin/revalidate', { body: { url: urls[0] } });
  const [again] = await claimAll(1);
  assert.equal(again!.url, urls[0]);
  assert.equal(again!.id, key(urls[0]!), 'the job is the desktop row of its URL');
  assert.equal((await report(again!, 'failed', { name: 'Crash', message: 'renderer died' })).status, 200);

  const all = await h.fetch('/prerender_admin/failing', { auth: observer, method: 'GET' });
  assert.equal(all.status, 200, all.text);
  const body = all.json as { rows: Array<Record<string, unknown>>; next: string | null };
  assert.equal(body.next, null);
  assert.equal(body.rows.length, 3);
  for (const r of body.rows)
    assert.equal(r.deviceType, 'desktop', `the entry of ${String(r.url)} names its device`);
  assert.deepEqual([body.rows[0]!.url, body.rows[0]!.strikes, body.rows[0]!.queue], [urls[0], 2, 'shop']);
  assert.deepEqual(
    body.rows
      .slice(1)
      .map((r) => [r.url, r.strikes, r.queue])
      .sort(),
    [
      [urls[2], 1, 'unrouted'],
      [urls[1], 1, 'shop'],
    ],
  );
  // Equal strikes: the older run first, then the URL.
  const [b, c] = [body.rows[1]!, body.rows[2]!];
  assert.ok(
    (b.failingSince as number) < (c.failingSince as number) ||
      (b.failingSince === c.failingSince && (b.url as string) < (c.url as string)),
  );
  const first = body.rows[0]!;
  assert.deepEqual(first.lastError, { name: 'Crash', message: 'renderer died' });
  assert.equal(first.lastStatusCode, 503);
  assert.equal(typeof first.failingSince, 'number');
  assert.ok((first.nextRenderTime as number) > Date.now());

  const page1 = (await h.fetch('/prerender_admin/failing?limit=2')).json as {
    rows: Array<{ url: string }>;
    next: string;
  };
  assert.equal(page1.rows.length, 2);
  assert.equal(typeof page1.next, 'string');
  const page2 = (await h.fetch(`/prerender_admin/failing?limit=2&cursor=${page1.next}`)).json as {
    rows: Array<{ url: string }>;
    next: string | null;
  };
  assert.deepEqual(
    [...page1.rows, ...page2.rows].map((r) => r.url),
    body.rows.map((r) => r.url),
  );
  assert.equal(page2.next, null);
  const shop = (await h.fetch('/prerender_admin/failing?queue=shop')).json as {
    rows: Array<{ url: string }>;
  };
  assert.deepEqual(shop.rows.map((r) => r.url).sort(), [urls[0], urls[1]].sort());
  const bad = await h.fetch('/prerender_admin/failing?limit=0');
  assert.equal(bad.status, 400);
  assert.equal((bad.json as { code: string }).code, 'invalid_limit');

  // A success takes the row off the list.
  await h.fetch('/prerender_admin/revalidate', { body: { url: urls[2] } });
  const [heal] = await claimAll(1);
  assert.equal((await report(heal!, 'rendered')).status, 200);
  const after = (await h.fetch('/prerender_admin/failing')).json as { rows: Array<{ url: string }> };
  assert.deepEqual(after.rows.map((r) => r.url).sort(), [urls[0], urls[1]].sort());
  const healed = (await h.fetch('/prerender_admin/explain', { body: { url: urls[2] } })).json as {
    row: Record<string, unknown>;
  };
  assert.equal(healed.row.lastError, null);
  assert.equal(healed.row.failingSince, null);
});
