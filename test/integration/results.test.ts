// Results a fleet can retry, leases only their grantee can report, and every well-formed URL claimable
// exactly once — against a real Harper (2 worker threads). Issue 12, points 2, 3 and 6.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { fileTargets, postConfig } from '../api.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

let h: HarperInstance;
const fleetA: Credentials = { username: 'fleet-a', password: 'fleet-a-pass' };
const fleetB: Credentials = { username: 'fleet-b', password: 'fleet-b-pass' };
const MIN = 60_000;

interface Job {
  id: string;
  url: string;
  leaseToken: string;
  expiresAt: number;
}

before(async () => {
  h = await startHarper();
  await h.addUser(fleetA.username, fleetA.password, 'render_fleet');
  await h.addUser(fleetB.username, fleetB.password, 'render_fleet');
  await postConfig(h, { queue: { keeper: { publishInterval: 200, stateInterval: 1000 } } });
});

after(async () => {
  await h?.destroy();
});

async function claimAll(
  auth: Credentials,
  want: (j: Job) => boolean,
  n: number,
  ms = 15_000,
): Promise<Job[]> {
  const got: Job[] = [];
  await until(
    `${n} jobs`,
    async () => {
      const r = await h.fetch('/render_queue/claim', { auth, body: { limit: 25 } });
      assert.equal(r.status, 200, r.text);
      const jobs = (r.json as Job[]).filter(want);
      for (const j of jobs) assert.equal(j.id, key(j.url), 'a job is the desktop row of its URL');
      got.push(...jobs);
      return got.length >= n;
    },
    ms,
    50,
  );
  return got;
}

async function row(url: string) {
  return (await h.fetch('/prerender_admin/explain', { body: { url } })).json.row as {
    strikes: number;
    nextRenderTime: number;
  } | null;
}

const result = (j: Job, over: Record<string, unknown> = {}) => ({
  id: j.id,
  leaseToken: j.leaseToken,
  outcome: 'failed',
  statusCode: 500,
  ...over,
});

test('a retried result gets the first answer with duplicate: true and counts one strike', async () => {
  const url = 'https://retry.example.com/fast-lane';
  await fileTargets(h, [{ url, dueAt: Date.now() - MIN }]);
  const [job] = await claimAll(fleetA, (j) => j.url === url, 1);
  const first = await h.fetch('/render_queue/job_result', { auth: fleetA, body: result(job!) });
  assert.equal(first.status, 200, first.text);
  assert.equal(first.json.duplicate, undefined);
  // A lost answer: the fleet sends the same result again (the fast-retry lane kept the lease).
  const again = await h.fetch('/render_queue/job_result', { auth: fleetA, body: result(job!), fresh: true });
  assert.equal(again.status, 200, again.text);
  assert.deepEqual(again.json, { ...first.json, duplicate: true });
  assert.equal((await row(url))?.strikes, 1, 'one failure, one strike');
});

test('the same result twice in one batch is applied once; the copy is answered as a duplicate', async () => {
  const url = 'https://retry.example.com/batch';
  await fileTargets(h, [{ url, dueAt: Date.now() - MIN }]);
  const [job] = await claimAll(fleetA, (j) => j.url === url, 1);
  const r = await h.fetch('/render_queue/job_results', {
    auth: fleetA,
    body: { results: [result(job!), result(job!)] },
  });
  assert.equal(r.status, 200, r.text);
  const [a, b] = r.json.results;
  assert.equal(a.accepted, true);
  assert.equal(a.duplicate, undefined);
  assert.deepEqual(b, { ...a, duplicate: true });
  assert.equal((await row(url))?.strikes, 1);
});

test('a rendered result retried after it was released gets its answer again and writes nothing', async () => {
  const url = 'https://retry.example.com/rendered';
  await fileTargets(h, [{ url, dueAt: Date.now() - MIN }]);
  const [job] = await claimAll(fleetA, (j) => j.url === url, 1);
  const body = result(job!, { outcome: 'rendered', statusCode: 200, body: '<p>once</p>' });
  const first = await h.fetch('/render_queue/job_result', { auth: fleetA, body });
  assert.equal(first.status, 200, first.text);
  const after1 = await row(url);
  const again = await h.fetch('/render_queue/job_result', { auth: fleetA, body, fresh: true });
  assert.deepEqual(again.json, { ...first.json, duplicate: true });
  assert.deepEqual(await row(url), after1, 'the duplicate wrote nothing');
});

test('an id cut to 200 characters inside a surrogate pair is echoed well-formed, and a missing token is named', async () => {
  const id = 'https://cut.example.com/' + 'y'.repeat(175) + '\u{1F600}'; // the emoji straddles unit 200
  const r = await h.fetch('/render_queue/job_results', {
    auth: fleetA,
    body: {
      results: [
        { id, leaseToken: 1, outcome: 'nah' },
        { id: 'https://cut.example.com/b', outcome: 'rendered' },
      ],
    },
  });
  assert.equal(r.status, 200, r.text);
  assert.doesNotMatch(r.text, /\\ud[89ab][0-9a-f]{2}/i, 'no lone surrogate escape in the answer');
  assert.equal(r.json.results[0].id, id.slice(0, 199) + '\ufffd');
  assert.equal(r.json.results[0].code, 'invalid');
  assert.match(r.json.results[1].error, /leaseToken must be the token the claim returned, not missing/);
});

test('a result from a user the lease was not granted to is 409 superseded and changes nothing', async () => {
  const url = 'https://grantee.example.com/a';
  await fileTargets(h, [{ url, dueAt: Date.now() - MIN }]);
  const [job] = await claimAll(fleetA, (j) => j.url === url, 1);
  const before1 = await row(url);
  const stolen = await h.fetch('/render_queue/job_result', {
    auth: fleetB,
    body: result(job!, { outcome: 'rendered', statusCode: 200 }),
  });
  assert.equal(stolen.status, 409, stolen.text);
  assert.equal(stolen.json.code, 'superseded');
  assert.deepEqual(await row(url), before1);
  const lease = (await h.fetch('/prerender_admin/explain', { body: { url } })).json.lease;
  assert.equal(lease.state, 'leased', 'the lease is still out with its grantee');
  // The grantee's own report, and an operator's, are accepted.
  const own = await h.fetch('/render_queue/job_result', {
    auth: fleetA,
    body: result(job!, { outcome: 'rendered', statusCode: 200 }),
  });
  assert.equal(own.status, 200, own.text);
});

test('tokens are 28 hex digits and differ between grants made in the same millisecond', async () => {
  const urls = Array.from({ length: 40 }, (_, i) => `https://token.example.com/${i}`);
  await fileTargets(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() - MIN })),
  );
  const jobs = await claimAll(fleetA, (j) => j.url.startsWith('https://token.example.com/'), urls.length);
  for (const j of jobs) assert.match(j.leaseToken, /^[0-9a-f]{28}$/);
  const randomHalves = new Set(jobs.map((j) => j.leaseToken.slice(12)));
  assert.equal(randomHalves.size, jobs.length, 'every grant has its own 64 random bits');
});

/** Path characters a feeder may send: unreserved ASCII, percent escapes, BMP letters, astral symbols. */
const pathPiece = fc.oneof(
  fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789-._~'.split('')),
  fc.constantFrom('%20', '%2F', '%25', '%E2%9C%93', '%'),
  fc.constantFrom('é', 'ß', 'ж', '中', '文', 'ア', '\u00a0'.replace('\u00a0', 'ñ')),
  fc.constantFrom('😀', '𝒳', '🂡', '𠀀', '👩‍💻'),
  fc.constantFrom('/', '/', '!', '$', '&', "'", '(', ')', '*', '+', ',', ';', '=', ':', '@'),
);

test('property: random well-formed Unicode URLs up to 1,900 bytes are each claimable exactly once', async () => {
  const seed = Number(process.env.QK_PROPERTY_SEED ?? 20261201);
  const urls = new Set<string>();
  fc.assert(
    fc.property(fc.array(pathPiece, { minLength: 1, maxLength: 400 }), fc.boolean(), (pieces, long) => {
      let url = `https://unicode.example.com/${urls.size}/` + pieces.join('');
      if (long) url += 'x'.repeat(Math.max(0, 1900 - Buffer.byteLength(url) - 4));
      while (Buffer.byteLength(url) > 1900) url = [...url].slice(0, -1).join('');
      urls.add(url);
    }),
    { seed, numRuns: 120 },
  );
  const list = [...urls];
  assert.ok(
    list.some((u) => Buffer.byteLength(u) >= 1890),
    'some URLs are near the 1,900-byte limit',
  );
  await fileTargets(
    h,
    list.map((url) => ({ url, dueAt: Date.now() - MIN })),
  );
  const granted = await claimAll(
    fleetB,
    (j) => j.url.startsWith('https://unicode.example.com/'),
    list.length,
    30_000,
  );
  const ids = granted.map((j) => j.url);
  assert.equal(new Set(ids).size, ids.length, 'no URL granted twice');
  assert.deepEqual([...ids].sort(), [...list].sort(), 'every URL granted, byte-exactly');
});

test('rows whose keys cannot round-trip (lone surrogates) never starve the claims of good rows', async () => {
  // Written past the API's validation, as a row from before it (or from another writer) would be:
  // 5,000 of them due since 1970 would fill every published set and every claim's over-take budget.
  // Each is a configured device's row, so the keeper holds it rather than passing it over as orphaned.
  const bad = Array.from({ length: 5000 }, (_, i) => ({
    cacheKey: key(`https://bad.example.com/p/${i}\ud800`),
    nextRenderTime: 0,
    verified: true,
    fromSitemap: true,
    strikes: 0,
  }));
  const ins = await h.operation({
    operation: 'insert',
    database: 'render_schedule',
    table: 'RenderSchedule',
    records: bad,
  });
  assert.ok(!ins.error, JSON.stringify(ins).slice(0, 300));
  const good = 'https://good.example.com/after-the-bad-ones';
  await fileTargets(h, [{ url: good, dueAt: Date.now() - MIN }]);
  const [job] = await claimAll(fleetA, (j) => j.url === good, 1, 20_000);
  assert.equal(job?.id, key(good));
  // After a restart the rows come back through the load walk instead of the subscription.
  await h.stop();
  h = await startHarper({ root: h.root });
  await h.fetch('/prerender_admin/config', { body: { queue: { keeper: { publishInterval: 200 } } } });
  const again = 'https://good.example.com/after-a-restart';
  await fileTargets(h, [{ url: again, dueAt: Date.now() - MIN }]);
  const [next] = await claimAll(fleetA, (j) => j.url === again, 1, 30_000);
  assert.equal(next?.id, key(again));
});

test('a result in the raw-bytes framing (x-metadata-size) is checked and answered like the JSON form', async () => {
  const url = 'https://raw.example.com/page';
  await fileTargets(h, [{ url, dueAt: Date.now() - MIN }]);
  const [job] = await claimAll(fleetA, (j) => j.url === url, 1);
  const page = Buffer.from('<html><body>raw bytes: ✓ ünïcode</body></html>', 'utf8');
  const framed = (meta: unknown, body = page, size?: number) => {
    const m = Buffer.from(JSON.stringify(meta), 'utf8');
    return h.fetch('/render_queue/job_result', {
      auth: fleetA,
      rawBody: Buffer.concat([m, body]),
      headers: { 'content-type': 'application/octet-stream', 'x-metadata-size': String(size ?? m.length) },
    });
  };
  const meta = {
    id: job!.id,
    leaseToken: job!.leaseToken,
    outcome: 'rendered',
    statusCode: 200,
    contentType: 'text/html',
  };
  for (const [bad, size] of [
    [meta, 0],
    [meta, 100_000],
    [{ ...meta, body: 'inline' }, undefined],
    [{ ...meta, outcome: 'exploded' }, undefined],
  ] as const) {
    const r = await framed(bad, page, size);
    assert.equal(r.status, 400, r.text);
  }
  const ok = await framed(meta);
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.json.accepted, true);
  const again = await framed(meta);
  assert.deepEqual(again.json, { ...ok.json, duplicate: true });
  const stored = await h.operation({
    operation: 'search_by_id',
    database: 'render_queue',
    table: 'RenderedPage',
    ids: [key(url)],
    get_attributes: ['*'],
  });
  assert.equal(stored[0]?.url, url);
  assert.equal(String(stored[0]?.body), page.toString('utf8'));
});

test("a result's verdict fields (redirectedTo, reason, isIndexable) are accepted over HTTP, and a malformed one is refused by name and changes nothing", async () => {
  const urls = ['https://verdict.example.com/a', 'https://verdict.example.com/b'];
  await fileTargets(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() - MIN })),
  );
  const jobs = await claimAll(fleetA, (j) => urls.includes(j.url), 2);
  const [a, b] = urls.map((u) => jobs.find((j) => j.url === u)!);
  const beforeB = await row(b!.url);
  const r = await h.fetch('/render_queue/job_results', {
    auth: fleetA,
    body: {
      results: [
        result(a!, {
          outcome: 'redirected',
          statusCode: 301,
          redirectedTo: 'https://verdict.example.com/a2',
          reason: 'redirect',
          isIndexable: false,
        }),
        result(b!, { outcome: 'non-indexable', reason: 'bored', isIndexable: false }),
      ],
    },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.results[0].accepted, true, r.text);
  assert.equal(r.json.results[1].code, 'invalid', r.text);
  assert.match(r.json.results[1].error, /^reason must be one of noindex, canonical-mismatch/);
  assert.deepEqual(await row(b!.url), beforeB, 'the refused result wrote nothing');
  const bad = await h.fetch('/render_queue/job_result', {
    auth: fleetA,
    body: result(b!, { outcome: 'redirected', redirectedTo: 'ftp://verdict.example.com/b' }),
  });
  assert.equal(bad.status, 400, bad.text);
  assert.equal(bad.json.code, 'invalid_body');
  assert.match(bad.json.error, /redirectedTo/);
});
