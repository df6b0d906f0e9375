// Render verdicts through both fleet protocols against a real Harper (docs/feeding.md, "What a result does
// to its row"): a permanent redirect retires its row and files the destination, other redirects strike, a
// noindex page is suppressed and loses its stored page, a dead page is gone, each retires at its strike
// limit and shows in the retired list, an indexable render reactivates, and an origin error never does
// more than a failure strike.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { fileTargets, postConfig } from '../api.js';
import { PrerenderFleetWorker, resultStatus } from '../prerenderFleet.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

let h: HarperInstance;
let fleet: PrerenderFleetWorker;
const fleetUser: Credentials = { username: 'verdict-fleet', password: 'verdict-fleet-pass' };
const MIN = 60_000;

interface Job {
  id: string;
  url: string;
  leaseToken: string;
  callbackOrigin: string;
}

/** Jobs claimed for URLs not asked for yet (every row here is due at once), by URL. */
const claimed = new Map<string, Job>();

before(async () => {
  h = await startHarper();
  await h.addUser(fleetUser.username, fleetUser.password, 'render_fleet');
  fleet = new PrerenderFleetWorker(fleetUser, 'verdict-worker', h.ports.http!);
  await postConfig(h, {
    queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
    render: {
      callbackOrigin: `http://127.0.0.1:${h.ports.http}`,
      redirects: { maxStrikes: 2 },
      gone: { maxStrikes: 2 },
      suppression: { maxStrikes: 2 },
    },
  });
});

after(async () => {
  await h?.destroy();
});

/**
 * Claims until `url` is granted (as the fleet user; with the prerender fleet's worker id when `asFleet`,
 * whose results are fenced by it); other grants are kept for their own turn.
 */
async function claim(url: string, asFleet = false): Promise<Job> {
  await until(
    `a grant of ${url}`,
    async () => {
      if (claimed.has(url)) return true;
      let jobs: Job[];
      if (asFleet) {
        const a = await fleet.claim('127.0.0.1', 25);
        assert.equal(a.status, 200, a.text);
        jobs = (a.jobs ?? []) as unknown as Job[];
      } else {
        const r = await h.fetch('/render_queue/claim', { auth: fleetUser, body: { limit: 25 } });
        assert.equal(r.status, 200, r.text);
        jobs = r.json as Job[];
      }
      for (const j of jobs) {
        assert.equal(j.id, key(j.url), 'a job is the desktop row of its URL');
        claimed.set(j.url, j);
      }
      return claimed.has(url);
    },
    15_000,
    50,
  );
  const j = claimed.get(url)!;
  claimed.delete(url);
  return j;
}

async function row(url: string) {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  return r.json.row as {
    state: string;
    reason: string | null;
    strikes: number;
    redirectStrikes: number;
    suppressionStrikes: number;
    nextRenderTime: number;
  } | null;
}

/** Whether `url`'s desktop page is stored. */
async function hasPage(url: string): Promise<boolean> {
  const r = (await h.operation({
    operation: 'sql',
    sql: `SELECT COUNT(*) AS c FROM render_queue.RenderedPage WHERE id = '${key(url)}'`,
  })) as Array<{ c: number }>;
  return (r[0]?.c ?? 0) > 0;
}

/** The retired list: every entry here is a desktop row's. */
async function retired(): Promise<Array<{ url: string; reason: string; lastStatusCode: number | null }>> {
  const r = await h.fetch('/prerender_admin/retired');
  assert.equal(r.status, 200, r.text);
  const rows = r.json.rows as Array<{
    url: string;
    deviceType: string;
    reason: string;
    lastStatusCode: number | null;
  }>;
  for (const e of rows)
    assert.equal(e.deviceType, 'desktop', `the retired entry of ${e.url} names its device`);
  return rows;
}

/** Reports through the token protocol; answers the result's answer. */
async function report(j: Job, over: Record<string, unknown>) {
  const r = await h.fetch('/render_queue/job_result', {
    auth: fleetUser,
    body: { id: j.id, leaseToken: j.leaseToken, outcome: 'rendered', statusCode: 200, ...over },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.accepted, true, r.text);
  return r.json as { accepted: true; nextRenderTime: number | null };
}

/** Reports through the prerender fleet protocol (no token): 204 applied. */
async function reportFleet(j: Job, meta: Record<string, unknown>, content?: string): Promise<void> {
  const a = await fleet.report(j, meta, content);
  assert.equal(a.status, 204, a.text);
  assert.equal(resultStatus(a), 'applied');
}

async function revalidate(url: string): Promise<void> {
  const r = await h.fetch('/prerender_admin/revalidate', { body: { url } });
  assert.equal(r.status, 200, r.text);
}

const protocols = [
  {
    name: 'token protocol',
    claim: (url: string) => claim(url),
    send: async (j: Job, meta: Record<string, unknown>, body?: string) =>
      void (await report(j, { ...meta, ...(body !== undefined ? { body, contentType: 'text/html' } : {}) })),
  },
  {
    name: 'prerender protocol',
    claim: (url: string) => claim(url, true),
    send: (j: Job, meta: Record<string, unknown>, body?: string) =>
      reportFleet(j, { ...meta, ...(meta.outcome === 'failed' ? { outcome: 'error' } : {}) }, body),
  },
];

for (const p of protocols) {
  const base = `https://verdicts.example.com/${p.name.split(' ')[0]}`;

  test(`${p.name}: a 301 retires the source, deletes its page and files the destination due now`, async () => {
    const src = `${base}/moved`;
    const dest = `${base}/moved-to`;
    await fileTargets(h, [{ url: src, dueAt: Date.now() - MIN, cadenceMs: 3_600_000 }]);
    await p.send(await p.claim(src), { outcome: 'rendered', statusCode: 200 }, '<html>old</html>');
    assert.equal(await hasPage(src), true);
    await revalidate(src);
    await p.send(await p.claim(src), { outcome: 'redirected', statusCode: 301, redirectedTo: dest });
    assert.equal(await row(src), null, 'the source row is retired');
    assert.equal(await hasPage(src), false, 'and its page is gone');
    const d = await row(dest);
    assert.ok(d, 'the destination is filed');
    assert.ok(d.nextRenderTime <= Date.now(), 'due now');
    const entry = (await retired()).find((e) => e.url === src);
    assert.deepEqual(entry && [entry.reason, entry.lastStatusCode], ['redirect', 301]);
    await p.claim(dest); // claimable: its lease is left to run out
  });

  test(`${p.name}: a 302 strikes and comes due a cadence out; the strike limit retires the row`, async () => {
    const url = `${base}/temp`;
    await fileTargets(h, [{ url, dueAt: Date.now() - MIN }]);
    const elsewhere = 'https://elsewhere.example.net/x';
    await p.send(await p.claim(url), { outcome: 'redirected', statusCode: 302, redirectedTo: elsewhere });
    const r1 = await row(url);
    assert.deepEqual([r1?.state, r1?.redirectStrikes], ['active', 1]);
    assert.ok(r1!.nextRenderTime > Date.now() + 23 * 3_600_000, 'a cadence out');
    assert.equal(await row(elsewhere), null, 'a temporary redirect files nothing');
    await revalidate(url);
    await p.send(await p.claim(url), { outcome: 'redirected', statusCode: 302, redirectedTo: elsewhere });
    assert.equal(await row(url), null);
    assert.equal((await retired()).find((e) => e.url === url)?.reason, 'redirect-strikes');
  });

  test(`${p.name}: a noindex page is suppressed without its page, and an indexable render reactivates it`, async () => {
    const url = `${base}/noindex`;
    await fileTargets(h, [{ url, dueAt: Date.now() - MIN }]);
    await p.send(await p.claim(url), { outcome: 'rendered', statusCode: 200 }, '<html>ok</html>');
    assert.equal(await hasPage(url), true);
    await revalidate(url);
    await p.send(await p.claim(url), {
      outcome: 'non-indexable',
      statusCode: 200,
      reason: 'noindex',
      isIndexable: false,
    });
    const s = await row(url);
    assert.deepEqual([s?.state, s?.reason, s?.suppressionStrikes], ['suppressed', 'noindex', 1]);
    assert.ok(s!.nextRenderTime > Date.now() + 6 * 86_400_000, 'rechecked in 7 days');
    assert.equal(await hasPage(url), false, 'crawlers are not served a noindex page');
    await revalidate(url);
    await p.send(await p.claim(url), { outcome: 'rendered', statusCode: 200 }, '<html>back</html>');
    const a = await row(url);
    assert.deepEqual([a?.state, a?.reason, a?.suppressionStrikes], ['active', null, 0]);
    assert.equal(await hasPage(url), true);
  });

  test(`${p.name}: a 404 is gone, and gone again retires it; a 503 is only a failure strike`, async () => {
    const dead = `${base}/dead`;
    const flaky = `${base}/flaky`;
    await fileTargets(h, [
      { url: dead, dueAt: Date.now() - MIN },
      { url: flaky, dueAt: Date.now() - MIN },
    ]);
    await p.send(await p.claim(dead), { outcome: 'non-indexable', statusCode: 404, reason: 'http-error' });
    const g = await row(dead);
    assert.equal(g?.state, 'gone');
    assert.ok(g!.nextRenderTime > Date.now() + 13 * 86_400_000, 'rechecked in 14 days');
    await revalidate(dead);
    await p.send(await p.claim(dead), { outcome: 'rendered', statusCode: 410 });
    assert.equal(await row(dead), null);
    assert.equal((await retired()).find((e) => e.url === dead)?.reason, 'gone');

    await p.send(await p.claim(flaky), { outcome: 'non-indexable', statusCode: 503, reason: 'http-error' });
    const f = await row(flaky);
    assert.deepEqual([f?.state, f?.strikes, f?.suppressionStrikes], ['active', 1, 0]);
  });
}

test('discover refuses a retired URL while its entry lasts; a feeder files it again', async () => {
  const url = (await retired())[0]!.url;
  const d = await h.fetch('/render_queue/discover', { body: { urls: [url] } });
  assert.equal(d.status, 200, d.text);
  assert.equal(d.json.filed, 0);
  assert.match(d.json.rejected[0].error, /retired/);
  await fileTargets(h, [{ url }]);
  assert.ok(await row(url));
});
