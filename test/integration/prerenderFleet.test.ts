// The prerender fleet protocol against a real Harper (2 worker threads), driven by a client that acts as
// an unchanged prerender render fleet does (test/prerenderFleet.ts): discovery over MQTT, claims with
// x-worker-id, results framed as metadata plus a gzip, br or identity page, posted without a lease token
// to the job's callbackOrigin. Every well-formed result is answered 204 with x-result-status; fencing is
// by grantee (user and worker id) and only the key's latest grant; decompression bombs and bytes that do
// not decode are failure strikes; malformed framing is a 400 naming the field; each answer is counted.
import { after, before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { ADMIN_PASS, ADMIN_USER, startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { configForTest, fileTargets, postConfig } from '../api.js';
import { parseExposition } from '../promLint.js';
import {
  PrerenderFleetWorker,
  encodePage,
  frame,
  hostOrigin,
  isOrigin,
  resultStatus,
  zeroBomb,
  type FleetAnswer,
  type PrerenderJob,
} from '../prerenderFleet.js';
import { until } from '../wait.js';
import { key, rowKey } from '../rowKeys.js';

const MIN = 60_000;
/** Every row's cadence: a result applied (or a failure backed off, fastRetries 0) moves it this far. */
const CADENCE = 30 * MIN;
/** render.maxBodyBytes here: small, so that a bomb far smaller than it decodes to a thousand times more. */
const MAX_BODY = 256 * 1024;
/** The host every fleet here finds over MQTT: the host of render.callbackOrigin. */
const HOST = '127.0.0.1';
const MiB = 1 << 20;

const fleetUser: Credentials = { username: 'pf-fleet', password: 'pf-fleet-pass' };
const otherUser: Credentials = { username: 'pf-other', password: 'pf-other-pass' };
const admin: Credentials = { username: ADMIN_USER, password: ADMIN_PASS };

let h: HarperInstance;
let node = '';
/** The origin the node is configured to advertise. */
let origin = '';
/** A job claimed before render.callbackOrigin was set (the derived origin). */
let derivedJob: PrerenderJob | undefined;
/** Fleet A and fleet B: one user, two worker ids. */
let workerA: PrerenderFleetWorker;
let workerB: PrerenderFleetWorker;

before(
  async () => {
    // No QUEUE_KEEPER_CALLBACK_ORIGIN (the harness sets one, as npm start does): the first job shows the
    // origin derived from the node name and the HTTP port; the rest run under render.callbackOrigin.
    h = await startHarper({ env: { QUEUE_KEEPER_CALLBACK_ORIGIN: '' } });
    await h.addUser(fleetUser.username, fleetUser.password, 'render_fleet');
    await h.addUser(otherUser.username, otherUser.password, 'render_fleet');
    await postConfig(h, {
      queue: { keeper: { publishInterval: 200, stateInterval: 1000 }, statusSyncInterval: 250 },
      render: { maxBodyBytes: MAX_BODY, failureRetry: { fastRetries: 0 } },
    });
    node = (await h.fetch('/prerender_admin/overview')).json.node as string;
    workerA = new PrerenderFleetWorker(fleetUser, 'pf-worker-a', h.ports.http!);
    workerB = new PrerenderFleetWorker(fleetUser, 'pf-worker-b', h.ports.http!);

    // One job claimed while render.callbackOrigin is unset: it carries the derived origin.
    const probe = 'https://pf.example.com/derived/probe';
    await fileDue(undefined, [probe]);
    [derivedJob] = await claimJobs(workerA, [probe]);
    // Reported through the token protocol, so that nothing is due or leased when the origin is set.
    const done = await h.fetch('/render_queue/job_result', {
      auth: fleetUser,
      body: {
        id: derivedJob!.id,
        leaseToken: derivedJob!.leaseToken,
        outcome: 'rendered',
        statusCode: 200,
        body: '<p>probe</p>',
      },
    });
    assert.equal(done.status, 200, done.text);

    origin = `http://${HOST}:${h.ports.http!}`;
    await postConfig(h, { render: { callbackOrigin: origin } });
    // Nothing is due or leased (a leased due row keeps the node `queued`): the status a subscriber is
    // sent first is not `queued`, so the first `queued` it sees was written after the origin was set.
    await until('the node to report empty', async () => {
      const o = await h.fetch('/prerender_admin/overview');
      return o.json.status === 'empty';
    });
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

// ------------------------------------------------------------------ helpers

/**
 * Files `urls` due a minute ago at the file's cadence. When the test ends, pass or fail, they are
 * deleted and the node is let settle to `empty`, so that no row of a failed test is claimed by the next.
 */
async function fileDue(t: TestContext | undefined, urls: string[]) {
  t?.after(async () => {
    const r = await h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls } });
    assert.equal(r.status, 200, r.text);
    await until('nothing due after the test', async () => {
      const o = await h.fetch('/prerender_admin/overview');
      return o.json.status === 'empty';
    });
  });
  const r = await fileTargets(
    h,
    urls.map((url) => ({ url, cadenceMs: CADENCE, dueAt: Date.now() - MIN })),
  );
  assert.equal(r.upserted, urls.length);
}

/**
 * Claims until `urls`' row for `device` is granted to `worker`, each job keyed `<url>|<device>`; any other
 * job is a stray of another test.
 */
async function claimJobs(
  worker: PrerenderFleetWorker,
  urls: string[],
  ms = 15_000,
  device = 'desktop',
): Promise<PrerenderJob[]> {
  const got = new Map<string, PrerenderJob>();
  await until(
    `${urls.length} jobs for ${worker.workerId}`,
    async () => {
      const r = await worker.claim(HOST, Math.max(1, urls.length - got.size));
      assert.equal(r.status, 200, r.text);
      assert.ok(r.jobs, `the claim answers a bare JSON array: ${r.text.slice(0, 200)}`);
      for (const j of r.jobs) {
        assert.ok(urls.includes(j.url), `only this test's rows are due, not ${j.id}`);
        assert.equal(j.id, rowKey(j.url, device), `the job of ${j.url} is its ${device} row`);
        got.set(j.url, j);
      }
      return got.size === urls.length;
    },
    ms,
    50,
  );
  return urls.map((url) => got.get(url)!);
}

interface Row {
  nextRenderTime: number;
  strikes: number;
  lastOutcome: string | null;
  lastStatusCode: number | null;
  lastRenderedAt: number | null;
}

async function explain(url: string) {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  return r.json as { row: Row | null; lease: { state: string } | null };
}

async function row(url: string): Promise<Row | null> {
  return (await explain(url)).row;
}

interface StoredPage {
  url: string;
  deviceType: string | null;
  statusCode: number | null;
  contentType: string | null;
  body: unknown;
  headers?: unknown;
  renderedAt: number;
}

/** The desktop page of `url`, which carries its URL and device. */
async function storedPage(url: string): Promise<StoredPage | undefined> {
  const r = (await h.operation({
    operation: 'search_by_id',
    database: 'render_queue',
    table: 'RenderedPage',
    ids: [key(url)],
    get_attributes: ['*'],
  })) as StoredPage[];
  if (r[0]) {
    assert.equal(r[0].url, url, 'the page carries its URL');
    assert.equal(r[0].deviceType, 'desktop', 'and its device');
  }
  return r[0];
}

/** A 204 with no body and the x-result-status given. */
function assertAnswered(a: FleetAnswer, want: string, what: string) {
  assert.equal(a.status, 204, `${what}: status ${a.status} ${a.text.slice(0, 300)}`);
  assert.equal(a.text, '', `${what}: a 204 has no body`);
  assert.equal(resultStatus(a), want, `${what}: x-result-status`);
}

/** The row was rescheduled a cadence out by a result taken at about `at`. */
function assertCadenceOut(r: Row | null, at: number, what: string) {
  assert.ok(r, `${what}: the row exists`);
  const ahead = r.nextRenderTime - at;
  assert.ok(Math.abs(ahead - CADENCE) < 2 * MIN, `${what}: next render ${ahead} ms ahead, not a cadence`);
}

const page = (title: string) =>
  `<!doctype html><html><head><title>${title}</title></head><body><h1>${title}</h1><p>ünïcødé — 日本語 🎉</p></body></html>`;

const rendered = (over: Record<string, unknown> = {}) => ({
  statusCode: 200,
  outcome: 'rendered',
  renderTime: 850,
  headers: { 'content-type': 'text/html; charset=utf-8' },
  ...over,
});

/** Sum of a counter's samples whose labels include `labels` (0 when the family or sample is absent). */
function counter(text: string, name: string, labels: Record<string, string> = {}): number {
  const f = parseExposition(text).get(name);
  if (!f) return 0;
  return f.samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
}

async function scrape(): Promise<string> {
  const r = await h.fetch('/prerender_admin/metrics');
  assert.equal(r.status, 200, r.text);
  return r.text;
}

/** Peak resident memory of the Harper process (VmHWM, bytes): every worker thread is in it. */
function peakRss(pid: number): number {
  const m = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  assert.ok(m, `VmHWM of pid ${pid}`);
  return Number(m[1]) * 1024;
}

// ------------------------------------------------------------------ jobs and the advertised origin

test('a job claimed while render.callbackOrigin is unset carries the origin derived from the node name and HTTP port, and deviceType "desktop"', () => {
  assert.ok(derivedJob, 'the probe was claimed');
  const scheme = node === 'localhost' || node === '127.0.0.1' ? 'http' : 'https';
  assert.equal(derivedJob.callbackOrigin, `${scheme}://${node}:${h.ports.http!}`);
  assert.equal(derivedJob.deviceType, 'desktop');
});

test('render.callbackOrigin drops a trailing slash and refuses a path; render.deviceTypes reaches every job', async (t) => {
  const slash = await h.fetch('/prerender_admin/config', {
    body: { render: { callbackOrigin: `${origin}/` } },
  });
  assert.equal(slash.status, 200, slash.text);
  assert.equal(slash.json.render?.callbackOrigin, origin, 'the trailing slash is dropped');

  const withPath = await h.fetch('/prerender_admin/config', {
    body: { render: { callbackOrigin: `${origin}/render_queue` } },
  });
  assert.equal(withPath.status, 400, withPath.text);
  assert.equal(typeof withPath.json?.code, 'string');
  assert.match(String(withPath.json?.error), /callbackOrigin/);
  const now = await h.fetch('/prerender_admin/config');
  assert.equal(now.json.render?.callbackOrigin, origin, 'the refused value changed nothing');

  await configForTest(t, h, { render: { deviceTypes: ['mobile'] } });
  const urls = ['https://pf.example.com/device/0', 'https://pf.example.com/device/1'];
  await fileDue(t, urls);
  const jobs = await claimJobs(workerA, urls, undefined, 'mobile');
  for (const j of jobs) {
    assert.equal(j.deviceType, 'mobile');
    assert.equal(j.callbackOrigin, origin);
  }
  for (const j of jobs) assertAnswered(await workerA.report(j, rendered(), page(j.url)), 'applied', j.id);
});

// ------------------------------------------------------------------ the fleet's round trip

test('an unchanged prerender fleet finds the node over MQTT, claims, and reports gzip and br pages: 204 applied, rows rescheduled a cadence out, pages stored with their allowed headers', async (t) => {
  const watch = await workerA.watch(`mqtt://127.0.0.1:${h.ports.mqtt!}`);
  t.after(() => watch.close());
  const urls = ['https://pf.example.com/round-trip/gzip', 'https://pf.example.com/round-trip/br'];
  await fileDue(t, urls);

  const host = await until('a queued host over MQTT', () => watch.eligible()[0], 15_000);
  assert.equal(host, HOST, 'queue_status hostname is the host of render.callbackOrigin');
  const seen = [...watch.messages].reverse().find((m) => m.message.hostname === host)!;
  assert.equal(seen.topic, `queue_status/${node}`, 'the topic stays the node name');
  assert.equal(seen.message.node, node, 'the message names the node when it differs from the hostname');
  const updated = seen.message.updatedTime;
  assert.ok(
    typeof updated === 'number' || (typeof updated === 'string' && Number.isFinite(Date.parse(updated))),
    `updatedTime ${JSON.stringify(updated)} is epoch ms or an ISO string`,
  );

  const jobs = await claimJobs(workerA, urls);
  for (const j of jobs) {
    assert.ok(isOrigin(j.callbackOrigin), `callbackOrigin ${JSON.stringify(j.callbackOrigin)} is an origin`);
    assert.equal(
      j.callbackOrigin,
      hostOrigin(host, h.ports.http!),
      'the fleet dials the node that granted it',
    );
    assert.equal(j.deviceType, 'desktop');
    assert.equal(j.id, key(j.url), 'the job is the desktop row of its URL');
    assert.equal(typeof j.isFromSitemap, 'boolean');
    assert.ok(j.expiresAt - Date.now() > 30_000, 'the fleet renders only a job with 30 s of lease left');
  }

  const originHeaders = {
    etag: '"v1-abc"',
    'last-modified': 'Wed, 02 Dec 2026 10:00:00 GMT',
    link: '<https://pf.example.com/round-trip>; rel="canonical"',
    'cache-control': 'max-age=60',
    'content-type': 'text/html; charset=utf-8',
    vary: 'accept-encoding',
  };
  const at = Date.now();
  for (const j of jobs) {
    const encoding = j.url.endsWith('/gzip') ? 'gzip' : 'br';
    // A header outside the fleet's list must not reach the stored page either.
    const a = await workerA.report(
      j,
      rendered({ headers: { ...originHeaders, 'x-cache': 'HIT' } }),
      page(j.url),
      encoding,
    );
    assertAnswered(a, 'applied', `${encoding} result`);
  }
  for (const url of urls) {
    const ex = await explain(url);
    assertCadenceOut(ex.row, at, url);
    assert.equal(ex.row!.strikes, 0);
    assert.equal(ex.row!.lastOutcome, 'rendered');
    assert.ok(ex.lease === null || ex.lease.state === 'grace', `${url} lease ${JSON.stringify(ex.lease)}`);
    const stored = await storedPage(url);
    assert.ok(stored, `${url} page stored`);
    assert.equal(String(stored.body), page(url), 'the decoded page, byte for byte');
    assert.equal(stored.statusCode, 200);
    assert.deepEqual(stored.headers, originHeaders, 'only the allowed headers, without content-encoding');
  }
});

test('the same result sent again is answered 204 duplicate and changes nothing', async (t) => {
  const url = 'https://pf.example.com/duplicate/a';
  await fileDue(t, [url]);
  const [job] = await claimJobs(workerA, [url]);
  assertAnswered(await workerA.report(job!, rendered(), page('first')), 'applied', 'the first send');
  const rowAfter = await row(url);
  const pageAfter = await storedPage(url);
  // A lost answer: the fleet retries the very same bytes.
  assertAnswered(await workerA.report(job!, rendered(), page('first')), 'duplicate', 'the retry');
  assert.deepEqual(await row(url), rowAfter, 'the duplicate wrote nothing to the row');
  assert.deepEqual(await storedPage(url), pageAfter, 'nor to the page');
});

test('a result framed with the leaseToken keeps the token protocol answer (200 JSON), one without it gets 204', async (t) => {
  const urls = ['https://pf.example.com/both/token', 'https://pf.example.com/both/tokenless'];
  await fileDue(t, urls);
  const [withToken, tokenless] = await claimJobs(workerA, urls);
  assert.equal(typeof withToken!.leaseToken, 'string', 'claims still carry the token');
  const { body, metadataSize } = frame(
    { id: withToken!.id, leaseToken: withToken!.leaseToken, outcome: 'rendered', statusCode: 200 },
    Buffer.from(page('token'), 'utf8'),
  );
  const tok = await workerA.postFramed(withToken!.callbackOrigin, body, metadataSize);
  assert.equal(tok.status, 200, tok.text);
  assert.equal(JSON.parse(tok.text).accepted, true);
  assertAnswered(await workerA.report(tokenless!, rendered(), page('tokenless')), 'applied', 'token-less');
});

// ------------------------------------------------------------------ fencing by grantee

test('two fleets of one user with different worker ids: the other worker id is superseded and changes nothing, the grantee then applies', async (t) => {
  const url = 'https://pf.example.com/fence/workers';
  await fileDue(t, [url]);
  const [job] = await claimJobs(workerA, [url]);
  const before1 = await row(url);
  const stolen = await workerB.report(job!, rendered(), page('from fleet B'));
  assertAnswered(stolen, 'superseded', "fleet B's result");
  assert.deepEqual(await row(url), before1, 'the row is unchanged');
  assert.equal(await storedPage(url), undefined, 'no page stored');
  assert.equal((await explain(url)).lease?.state, 'leased', 'the lease is still out with fleet A');

  const at = Date.now();
  assertAnswered(await workerA.report(job!, rendered(), page('from fleet A')), 'applied', "fleet A's result");
  assertCadenceOut(await row(url), at, url);
  assert.equal(String((await storedPage(url))?.body), page('from fleet A'));
  // Once applied, fleet B's result is still not its own: superseded, not a duplicate.
  assertAnswered(await workerB.report(job!, rendered(), page('from fleet B')), 'superseded', 'B after A');
  assert.equal(String((await storedPage(url))?.body), page('from fleet A'));
});

test("another user with the grantee's worker id, and a super_user, are superseded", async (t) => {
  const url = 'https://pf.example.com/fence/users';
  await fileDue(t, [url]);
  const [job] = await claimJobs(workerA, [url]);
  const before1 = await row(url);
  const sameIdOtherUser = new PrerenderFleetWorker(otherUser, workerA.workerId, h.ports.http!);
  const operator = new PrerenderFleetWorker(admin, workerA.workerId, h.ports.http!);
  assertAnswered(await sameIdOtherUser.report(job!, rendered(), page('x')), 'superseded', 'other user');
  assertAnswered(await operator.report(job!, rendered(), page('x')), 'superseded', 'super_user');
  assert.deepEqual(await row(url), before1);
  assert.equal(await storedPage(url), undefined);
  assert.equal((await explain(url)).lease?.state, 'leased');
  assertAnswered(await workerA.report(job!, rendered(), page('mine')), 'applied', 'the grantee');
});

test('only the latest grant takes a token-less result: once the lease expired and went to another worker, the first worker is superseded', async (t) => {
  await configForTest(t, h, { queue: { jobLeaseTime: 5000 } });
  const url = 'https://pf.example.com/fence/latest';
  await fileDue(t, [url]);
  const [first] = await claimJobs(workerA, [url]);
  // The lease runs out unreported and the row is granted again, to fleet B.
  const [second] = await claimJobs(workerB, [url], 30_000);
  assert.ok(second!.expiresAt > first!.expiresAt);
  const before1 = await row(url);
  assertAnswered(
    await workerA.report(first!, rendered(), page('late A')),
    'superseded',
    'the late first grantee',
  );
  assert.deepEqual(await row(url), before1);
  assert.equal(await storedPage(url), undefined);
  assertAnswered(await workerB.report(second!, rendered(), page('B')), 'applied', 'the latest grantee');
  assert.equal(String((await storedPage(url))?.body), page('B'));
});

test('a result for a row deleted after its claim is 204 unknown_job', async (t) => {
  const url = 'https://pf.example.com/deleted/a';
  await fileDue(t, [url]);
  const [job] = await claimJobs(workerA, [url]);
  const del = await h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls: [url] } });
  assert.equal(del.status, 200, del.text);
  assert.equal(del.json.deleted, 1);
  assertAnswered(await workerA.report(job!, rendered(), page('gone')), 'unknown_job', 'deleted row');
  assert.equal(await row(url), null);
  assert.equal(await storedPage(url), undefined);
});

// ------------------------------------------------------------------ pages that must not be stored

test('decompression bombs (gzip to 240 MiB, br to 1 GiB) are answered promptly with 204 too_large and a strike, without being inflated into memory', async (t) => {
  const urls = ['https://pf.example.com/bomb/gzip', 'https://pf.example.com/bomb/br'];
  const bombs = {
    gzip: await zeroBomb('gzip', 240 * MiB),
    br: await zeroBomb('br', 1024 * MiB),
  };
  // Each is smaller than render.maxBodyBytes as sent: only decoding can tell.
  for (const b of Object.values(bombs)) assert.ok(b.length < MAX_BODY, `a bomb of ${b.length} bytes`);
  await fileDue(t, urls);
  const jobs = await claimJobs(workerA, urls);
  const peakBefore = peakRss(h.pid);
  const at = Date.now();
  for (const j of jobs) {
    const encoding = j.url.endsWith('/gzip') ? 'gzip' : 'br';
    const a = await workerA.reportBytes(j, rendered(), bombs[encoding], encoding);
    assertAnswered(a, 'too_large', `${encoding} bomb`);
    assert.ok(a.ms < 5000, `${encoding} bomb answered in ${a.ms} ms`);
  }
  const grown = peakRss(h.pid) - peakBefore;
  assert.ok(grown < 160 * MiB, `Harper's peak memory grew ${Math.round(grown / MiB)} MiB`);
  for (const url of urls) {
    const r = await row(url);
    assert.equal(r?.strikes, 1, `${url} one strike`);
    assert.equal(r?.lastOutcome, 'failed');
    assertCadenceOut(r, at, `${url} backed off`);
    assert.equal(await storedPage(url), undefined);
  }
});

test('corrupt gzip, corrupt br, a truncated gzip and a page that is not UTF-8 are 204 undecodable, each with a strike', async (t) => {
  const good = gzipSync(Buffer.from(page('cut short'), 'utf8'));
  const notUtf8 = Buffer.from([0x3c, 0x70, 0x3e, 0xff, 0xfe, 0xc3, 0x28, 0x3c, 0x2f, 0x70, 0x3e]);
  const cases = [
    // A gzip header, then a deflate block of the reserved type 3.
    { name: 'gzip', bytes: Buffer.concat([good.subarray(0, 10), Buffer.alloc(64, 0xff)]), enc: 'gzip' },
    { name: 'br', bytes: Buffer.from('this is not brotli at all, just text', 'utf8'), enc: 'br' },
    { name: 'truncated', bytes: good.subarray(0, good.length - 6), enc: 'gzip' },
    { name: 'latin', bytes: notUtf8, enc: 'identity' },
    { name: 'latin-gzip', bytes: encodePage(notUtf8, 'gzip'), enc: 'gzip' },
  ] as const;
  const urls = cases.map((c) => `https://pf.example.com/undecodable/${c.name}`);
  await fileDue(t, urls);
  const jobs = await claimJobs(workerA, urls);
  const at = Date.now();
  for (const [i, c] of cases.entries())
    assertAnswered(await workerA.reportBytes(jobs[i]!, rendered(), c.bytes, c.enc), 'undecodable', c.name);
  for (const url of urls) {
    const r = await row(url);
    assert.equal(r?.strikes, 1, `${url} one strike`);
    assertCadenceOut(r, at, `${url} backed off`);
    assert.equal(await storedPage(url), undefined, `${url} nothing stored`);
  }
});

// ------------------------------------------------------------------ outcomes

test("an older fleet's result without outcome is taken as it means: content → rendered, redirectedTo → redirected, isIndexable false → non-indexable, else error", async (t) => {
  const base = 'https://pf.example.com/no-outcome';
  const urls = [`${base}/content`, `${base}/redirect`, `${base}/noindex`, `${base}/nothing`];
  await fileDue(t, urls);
  const [content, redirect, noindex, nothing] = await claimJobs(workerA, urls);
  const old = (over: Record<string, unknown>) => ({ headers: {}, ...over });
  const at = Date.now();
  assertAnswered(
    await workerA.report(content!, old({ statusCode: 200, renderTime: 400 }), page('old fleet')),
    'applied',
    'content',
  );
  assertAnswered(
    await workerA.report(
      redirect!,
      old({ statusCode: 302, redirectedTo: 'https://pf.example.com/elsewhere' }),
    ),
    'applied',
    'redirect',
  );
  assertAnswered(
    await workerA.report(noindex!, old({ statusCode: 200, isIndexable: false })),
    'applied',
    'noindex',
  );
  assertAnswered(await workerA.report(nothing!, old({ statusCode: 500 })), 'applied', 'nothing');

  const want: Array<[string, string, number]> = [
    [urls[0]!, 'rendered', 0],
    [urls[1]!, 'redirected', 0],
    [urls[3]!, 'failed', 1],
  ];
  for (const [url, outcome, strikes] of want) {
    const r = await row(url);
    assert.equal(r?.lastOutcome, outcome, url);
    assert.equal(r?.strikes, strikes, `${url} strikes`);
    assertCadenceOut(r, at, url);
  }
  // A page found not indexable is suppressed: rechecked in a week, not a cadence (docs/feeding.md).
  const n = (await row(urls[2]!)) as (Row & { state?: string }) | null;
  assert.equal(n?.lastOutcome, 'non-indexable');
  assert.equal(n?.state, 'suppressed');
  assert.equal(n?.strikes, 0);
  assert.equal(String((await storedPage(urls[0]!))?.body), page('old fleet'));
  assert.equal(await storedPage(urls[1]!), undefined, 'a redirect stores no page');
});

test('outcome "error" is a failure with a strike and backoff, with or without error {name, message, phase}; an error beside another outcome is not', async (t) => {
  const base = 'https://pf.example.com/error';
  const urls = [`${base}/timeout`, `${base}/bare`, `${base}/loop`];
  await fileDue(t, urls);
  const [timeout, bare, loop] = await claimJobs(workerA, urls);
  const at = Date.now();
  const error = {
    name: 'TimeoutError',
    message: 'Navigation timeout of 30000 ms exceeded',
    phase: 'navigation',
  };
  assertAnswered(
    await workerA.report(timeout!, { headers: {}, outcome: 'error', renderTime: 30_000, error }),
    'applied',
    'error with error',
  );
  assertAnswered(await workerA.report(bare!, { headers: {}, outcome: 'error' }), 'applied', 'bare error');
  // A redirect loop: non-indexable, with an error that says why.
  assertAnswered(
    await workerA.report(loop!, {
      headers: {},
      statusCode: 302,
      outcome: 'non-indexable',
      reason: 'redirect loop',
      error: { name: 'RedirectLoop', message: 'too many redirects', phase: 'navigation' },
    }),
    'applied',
    'redirect loop',
  );
  for (const url of [urls[0]!, urls[1]!]) {
    const r = await row(url);
    assert.equal(r?.strikes, 1, `${url} one strike`);
    assert.equal(r?.lastOutcome, 'failed');
    assertCadenceOut(r, at, `${url} backed off`);
    assert.equal(await storedPage(url), undefined);
  }
  const l = await row(urls[2]!);
  assert.equal(l?.strikes, 0, 'the outcome alone decides: no strike');
  assert.equal(l?.lastOutcome, 'non-indexable');
});

test('unknown metadata fields from a newer fleet are ignored and counted: still 204 applied', async (t) => {
  const url = 'https://pf.example.com/newer/a';
  await fileDue(t, [url]);
  const [job] = await claimJobs(workerA, [url]);
  const before1 = counter(await scrape(), 'queue_keeper_prerender_ignored_fields_total');
  const newer = rendered({ timings: { navTtfb: 120, settle: 300 }, screenshotHash: 'abc123', audit: [1, 2] });
  assertAnswered(await workerA.report(job!, newer, page('newer')), 'applied', 'newer fleet');
  assert.equal(String((await storedPage(url))?.body), page('newer'));
  const moved = counter(await scrape(), 'queue_keeper_prerender_ignored_fields_total') - before1;
  assert.equal(moved, 3, 'each of the three unknown fields counted once');
});

// ------------------------------------------------------------------ malformed results

test('malformed framing or metadata is a 400 {error, code} naming what is wrong, and changes nothing; the well-formed result then applies', async (t) => {
  const url = 'https://pf.example.com/malformed/a';
  await fileDue(t, [url]);
  const [job] = await claimJobs(workerA, [url]);
  const meta = { id: job!.id, url: job!.url, statusCode: 200, outcome: 'rendered', headers: {} };
  const pageBytes = Buffer.from(page('malformed'), 'utf8');
  const good = frame(meta, pageBytes);
  const withMeta = (m: unknown) => frame(m, pageBytes);
  const raw = (s: string) => frame(Buffer.from(s, 'utf8'), pageBytes);
  // [what, body, x-metadata-size (null: no header at all), what the error must name]
  const cases: Array<[string, Buffer, string | number | null, RegExp]> = [
    ['x-metadata-size not a number', good.body, 'abc', /x-metadata-size/],
    ['x-metadata-size missing', good.body, null, /x-metadata-size/],
    ['x-metadata-size negative', good.body, '-5', /x-metadata-size/],
    ['x-metadata-size past the body', good.body, good.body.length + 10, /x-metadata-size/],
    ['x-metadata-size huge', good.body, '99999999999999999999', /x-metadata-size/],
    ...(
      [
        ['metadata not JSON', raw('{"id": nope'), /metadata|JSON/i],
        ['metadata an array', raw('[1,2,3]'), /metadata|object/i],
        ['id missing', withMeta({ ...meta, id: undefined }), /\bid\b/],
        ['id not a string', withMeta({ ...meta, id: 42 }), /\bid\b/],
        ['outcome unknown', withMeta({ ...meta, outcome: 'exploded' }), /outcome/],
        ['headers not an object', withMeta({ ...meta, headers: 'etag: x' }), /headers/],
        ['statusCode a string', withMeta({ ...meta, statusCode: '200' }), /statusCode/],
        ['isIndexable a string', withMeta({ ...meta, isIndexable: 'no' }), /isIndexable/],
        ['error a string', withMeta({ ...meta, outcome: 'error', error: 'boom' }), /error/],
      ] as const
    ).map(([what, f, names]): [string, Buffer, number, RegExp] => [what, f.body, f.metadataSize, names]),
  ];
  const before1 = await row(url);
  for (const [what, body, size, names] of cases) {
    const a = await workerA.postFramed(job!.callbackOrigin, body, size ?? undefined);
    const res = `${what}: ${a.status} ${a.text.slice(0, 300)}`;
    assert.equal(a.status, 400, res);
    const j = JSON.parse(a.text) as { error?: unknown; code?: unknown };
    assert.equal(typeof j.error, 'string', res);
    assert.equal(typeof j.code, 'string', res);
    assert.match(j.error as string, names, `${what}: the error names it`);
  }
  assert.deepEqual(await row(url), before1, 'nothing changed');
  assert.equal(await storedPage(url), undefined);
  assertAnswered(
    await workerA.postFramed(job!.callbackOrigin, good.body, good.metadataSize),
    'applied',
    'well-formed',
  );
});

// ------------------------------------------------------------------ metrics and config

test('queue_keeper_prerender_results_total counts each x-result-status', async (t) => {
  const base = 'https://pf.example.com/counted';
  const urls = [`${base}/applied`, `${base}/superseded`, `${base}/gone`, `${base}/large`, `${base}/bad`];
  await fileDue(t, urls);
  const [applied, superseded, gone, large, bad] = await claimJobs(workerA, urls);
  const before1 = await scrape();
  const seen: string[] = [];
  const send = async (w: PrerenderFleetWorker, ...args: Parameters<PrerenderFleetWorker['reportBytes']>) => {
    const a = await w.reportBytes(...args);
    assert.equal(a.status, 204, a.text);
    seen.push(resultStatus(a) ?? `none (${a.status})`);
  };
  const html = (s: string) => Buffer.from(page(s), 'utf8');
  await send(workerA, applied!, rendered(), html('counted'), 'identity');
  await send(workerA, applied!, rendered(), html('counted'), 'identity');
  await send(workerB, superseded!, rendered(), html('not yours'), 'identity');
  const del = await h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls: [gone!.url] } });
  assert.equal(del.json.deleted, 1, del.text);
  await send(workerA, gone!, rendered(), html('gone'), 'identity');
  // Past render.maxBodyBytes, yet inside the request limit (maxBodyBytes + 64 KiB).
  await send(workerA, large!, rendered(), Buffer.alloc(MAX_BODY + 4096, 'a'), 'identity');
  await send(workerA, bad!, rendered(), Buffer.from([0xff, 0xfe, 0xfd]), 'identity');
  assert.deepEqual(seen, ['applied', 'duplicate', 'superseded', 'unknown_job', 'too_large', 'undecodable']);

  const after1 = await scrape();
  for (const result of ['applied', 'duplicate', 'superseded', 'unknown_job', 'too_large', 'undecodable']) {
    const d =
      counter(after1, 'queue_keeper_prerender_results_total', { result }) -
      counter(before1, 'queue_keeper_prerender_results_total', { result });
    assert.equal(d, 1, `queue_keeper_prerender_results_total{result="${result}"} moved by ${d}`);
  }
  // The row of the too-large page took a strike.
  assert.equal((await row(large!.url))?.strikes, 1);
});

test('a queue.jobLeaseTime of 30 s is accepted, and the config answer warns of the fleet rule that skips jobs with under 30 s of lease left', async (t) => {
  const warns = (warnings: unknown) =>
    Array.isArray(warnings) && warnings.some((w) => /\b30 ?s\b|30 seconds/i.test(JSON.stringify(w)));
  const before1 = await h.fetch('/prerender_admin/config');
  assert.ok(!warns(before1.json.warnings), 'no warning at the default lease');
  await configForTest(t, h, { queue: { jobLeaseTime: 30_000 } });
  const got = await h.fetch('/prerender_admin/config');
  assert.equal(got.json.queue.jobLeaseTime, 30_000);
  assert.ok(warns(got.json.warnings), `GET warnings: ${JSON.stringify(got.json.warnings)}`);
  const posted = await h.fetch('/prerender_admin/config', { body: { queue: { jobLeaseTime: 30_000 } } });
  assert.equal(posted.status, 200, posted.text);
  assert.ok(warns(posted.json.warnings), `POST warnings: ${JSON.stringify(posted.json.warnings)}`);
});
