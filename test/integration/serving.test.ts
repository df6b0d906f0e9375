// Serving stored pages to crawlers (`GET`/`HEAD /p/<absolute url>`, docs/serving.md) against a real Harper
// (2 worker threads): a rendered page is served for its device with its stored headers, `age` and
// `x-prerender: hit`; validators give 304s; a due row's page is served stale and the row made urgent; a
// miss is fetched from a loopback origin allow-listed exactly (and refused by the default policy); an
// origin fetch sent back to /p/ is refused (508); suppressed and gone rows are never served; a URL with
// no row answers exactly as any other miss; render-now renders through the prerender fleet protocol, only
// with the token, and holds at most maxWaiting waiters while answering every request.
import { after, before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { configForTest, fileTargets, postConfig } from '../api.js';
import { PrerenderFleetWorker, type PrerenderJob } from '../prerenderFleet.js';
import { sleep, until } from '../wait.js';
import { key } from '../rowKeys.js';

const MIN = 60_000;
const HOST = 'serve.example.com';
const fleet: Credentials = { username: 'serve-fleet', password: 'serve-fleet-pass' };

let h: HarperInstance;
let worker: PrerenderFleetWorker;

/** A loopback origin: answers every GET with a page naming its path, and counts what it was sent. */
interface Origin {
  host: string;
  seen: Array<{ path: string; headers: http.IncomingHttpHeaders }>;
  server: http.Server;
}
let origin: Origin;

function startOrigin(): Promise<Origin> {
  const seen: Origin['seen'] = [];
  const server = http.createServer((req, res) => {
    seen.push({ path: req.url ?? '', headers: req.headers });
    res.writeHead(200, {
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'max-age=60',
      'set-cookie': 'a=b',
    });
    res.end(`<p>origin ${req.url}</p>`);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ host: `127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server }),
    ),
  );
}

before(
  async () => {
    origin = await startOrigin();
    h = await startHarper();
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    await postConfig(h, {
      queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
      serving: { hosts: [HOST, origin.host], onMiss: 'notFound' },
    });
    worker = new PrerenderFleetWorker(fleet, 'serve-worker', h.ports.http!);
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
  await new Promise((r) => origin?.server.close(r));
});

/** What a crawler gets (no credentials). */
function crawl(url: string, headers: Record<string, string> = {}, method = 'GET') {
  return h.fetch(`/p/${url}`, { auth: null, headers, method });
}

/** Claims until `url` is handed out: its desktop row. */
async function claimOf(url: string): Promise<PrerenderJob> {
  const job = await until(`a claim of ${url}`, async () => {
    const r = await worker.claim('127.0.0.1', 25);
    assert.equal(r.status, 200, r.text);
    return r.jobs?.find((j) => j.url === url);
  });
  assert.equal(job.id, key(url), 'the job is the desktop row of its URL');
  return job;
}

/** Files the URL due now, claims it and reports it rendered through the prerender fleet protocol. */
async function render(url: string, body: string, headers: Record<string, string> = {}) {
  await fileTargets(h, [{ url, dueAt: Date.now() - MIN, cadenceMs: 60 * MIN }]);
  const job = await claimOf(url);
  const a = await worker.report(
    job,
    { statusCode: 200, headers: { 'content-type': 'text/html; charset=utf-8', ...headers } },
    body,
  );
  assert.equal(a.status, 204, a.text);
}

/**
 * Writes fields of `url`'s desktop row directly (the operations API), as another writer of the row would.
 */
async function setRow(url: string, fields: Record<string, unknown>) {
  const r = await h.operation({
    operation: 'update',
    database: 'render_schedule',
    table: 'RenderSchedule',
    records: [{ cacheKey: key(url), ...fields }],
  });
  assert.ok(r.update_hashes?.length === 1, JSON.stringify(r));
}

/** `url`'s desktop row as stored. */
async function rowOf(url: string): Promise<Record<string, unknown> | undefined> {
  const r = (await h.operation({
    operation: 'search_by_id',
    database: 'render_schedule',
    table: 'RenderSchedule',
    ids: [key(url)],
    get_attributes: ['*'],
  })) as Array<Record<string, unknown>>;
  return r[0];
}

const big = (tag: string) => `<html><body>${`<p>${tag} ünïcødé 日本語</p>`.repeat(400)}</body></html>`;

test('a URL of a served host without a row is filed as discovered, at most discoverPerMinute a minute', async (t) => {
  // The first test that misses on a URL without a row, so the node's budget of this minute is untouched;
  // the four requests are kept inside one minute.
  await configForTest(t, h, { serving: { discoverPerMinute: 2 } });
  if (Date.now() % MIN > MIN - 5000) await sleep(MIN - (Date.now() % MIN) + 100);
  const urls = [1, 2, 3, 4].map((i) => `https://${HOST}/discover-${i}-${Date.now()}`);
  for (const u of urls) assert.equal((await crawl(u)).status, 404);
  const filed = await until('two discovered rows', async () => {
    const rows = await Promise.all(urls.map(rowOf));
    return rows.filter((r) => r !== undefined).length >= 2 ? rows : undefined;
  });
  assert.equal(filed.filter((r) => r !== undefined).length, 2, 'the budget of 2 a minute held');
  assert.equal(filed.find((r) => r !== undefined)?.verified, false, 'filed unverified');
  // Another host's URL is never filed.
  const other = `https://not-served.example.org/discover-${Date.now()}`;
  assert.equal((await crawl(other)).status, 404);
  assert.equal(await rowOf(other), undefined);
});

test('a fresh page is served for its device with its stored headers, age and x-prerender: hit', async () => {
  const url = `https://${HOST}/hit`;
  const body = big('hit');
  await render(url, body, {
    'cache-control': 'max-age=300',
    link: '</a.css>; rel=preload',
    'x-cache': 'HIT',
  });
  for (const device of [undefined, 'desktop', 'unknown-device']) {
    const r = await crawl(url, device === undefined ? {} : { 'x-device-type': device });
    assert.equal(r.status, 200, r.text.slice(0, 300));
    assert.equal(r.text, body, 'the stored page, byte for byte');
    assert.equal(r.headers['x-prerender'], 'hit');
    assert.equal(r.headers['content-type'], 'text/html; charset=utf-8');
    assert.equal(r.headers['cache-control'], 'max-age=300');
    assert.equal(r.headers.link, '</a.css>; rel=preload');
    assert.equal(r.headers['x-cache'], undefined, 'a header the fleet does not keep is not served');
    assert.match(String(r.headers.etag), /^"[A-Za-z0-9_-]{22}"$/, 'a strong ETag computed from the bytes');
    assert.match(String(r.headers.age), /^\d+$/);
    assert.ok(Number(r.headers.age) < 120);
  }
  const head = await crawl(url, {}, 'HEAD');
  assert.equal(head.status, 200);
  assert.equal(head.text, '');
  assert.equal(head.headers['content-length'], String(Buffer.byteLength(body)));
  assert.equal(head.headers['x-prerender'], 'hit');

  const gz = await rawCrawl(url, { 'accept-encoding': 'gzip' });
  assert.equal(gz.headers['content-encoding'], 'gzip');
  assert.equal(gunzipSync(gz.body).toString('utf8'), body);
  assert.match(String(gz.headers.vary), /accept-encoding/i);
  const br = await rawCrawl(url, { 'accept-encoding': 'gzip, br' });
  assert.equal(br.headers['content-encoding'], 'br');
  assert.equal(brotliDecompressSync(br.body).toString('utf8'), body);
  assert.ok(br.body.length < Buffer.byteLength(body) / 4, 'the compressed copy is served');
});

/** A GET whose body is kept as bytes (a compressed answer is not text). */
function rawCrawl(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  const u = new URL(h.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: `/p/${url}`, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

test('a page over serving.inlineMaxBytes streams from its blob, byte for byte, with its length', async (t) => {
  const url = `https://${HOST}/streamed`;
  const body = big('streamed');
  await render(url, body);
  await configForTest(t, h, { serving: { inlineMaxBytes: 0 } });
  const r = await rawCrawl(url, {});
  assert.equal(r.status, 200);
  assert.equal(r.body.toString('utf8'), body);
  assert.equal(r.headers['content-length'], String(Buffer.byteLength(body)));
  const br = await rawCrawl(url, { 'accept-encoding': 'br' });
  assert.equal(brotliDecompressSync(br.body).toString('utf8'), body, 'the brotli copy streams too');
});

test('matching validators answer 304 with only validators and caching headers; If-None-Match wins', async () => {
  const url = `https://${HOST}/conditional`;
  const lastModified = 'Wed, 02 Dec 2026 10:00:00 GMT';
  await render(url, big('cond'), {
    etag: '"v1"',
    'last-modified': lastModified,
    'cache-control': 'max-age=60',
  });
  const cases: Array<[Record<string, string>, number]> = [
    [{ 'if-none-match': '"v1"' }, 304],
    [{ 'if-none-match': 'W/"v1"' }, 304],
    [{ 'if-none-match': '"x", "v1"' }, 304],
    [{ 'if-none-match': '*' }, 304],
    [{ 'if-none-match': '"v0"' }, 200],
    [{ 'if-modified-since': lastModified }, 304],
    [{ 'if-modified-since': 'Tue, 01 Dec 2026 10:00:00 GMT' }, 200],
    // If-None-Match decides alone: a non-matching tag is a 200 whatever If-Modified-Since says.
    [{ 'if-none-match': '"v0"', 'if-modified-since': lastModified }, 200],
  ];
  for (const [headers, want] of cases) {
    const r = await crawl(url, headers);
    assert.equal(r.status, want, JSON.stringify(headers));
    if (want === 304) {
      assert.equal(r.text, '');
      assert.equal(r.headers.etag, '"v1"');
      assert.equal(r.headers['last-modified'], lastModified);
      assert.equal(r.headers['cache-control'], 'max-age=60');
      assert.equal(r.headers['content-type'], undefined, 'a 304 carries no content headers');
    }
  }
});

test('a due page is served stale within the window and its row made urgent; past the window it is a miss', async () => {
  const url = `https://${HOST}/stale`;
  const body = big('stale');
  await render(url, body);
  await setRow(url, { nextRenderTime: Date.now() - 10 * MIN, urgentAt: null });
  const r = await crawl(url);
  assert.equal(r.status, 200);
  assert.equal(r.headers['x-prerender'], 'stale');
  assert.equal(r.text, body);
  const row = await until('the stale row made urgent', async () => {
    const got = await rowOf(url);
    return typeof got?.urgentAt === 'number' ? got : undefined;
  });
  assert.ok((row.nextRenderTime as number) <= Date.now(), 'due now');

  await setRow(url, { nextRenderTime: Date.now() - 4 * 60 * MIN });
  assert.equal((await crawl(url)).status, 404, 'past the 3 h window: the miss policy (notFound) answers');
});

test('a miss with onMiss stale serves the expired page when there is one', async (t) => {
  await configForTest(t, h, { serving: { onMiss: 'stale' } });
  const url = `https://${HOST}/expired`;
  await render(url, big('expired'));
  await setRow(url, { nextRenderTime: Date.now() - 4 * 60 * MIN });
  const r = await crawl(url);
  assert.equal(r.status, 200);
  assert.equal(r.headers['x-prerender'], 'stale');
  assert.equal((await crawl(`https://${HOST}/never-filed-stale`)).status, 404);
});

test('suppressed and gone rows are never served; a URL with no row answers as any other miss', async () => {
  const url = `https://${HOST}/suppressed`;
  await render(url, big('suppressed'));
  assert.equal((await crawl(url)).status, 200);
  const misses: string[] = [];
  for (const state of ['suppressed', 'gone']) {
    await setRow(url, { state });
    const r = await crawl(url);
    assert.equal(r.status, 404, state);
    misses.push(JSON.stringify([r.status, r.text, r.headers['content-type']]));
  }
  const none = await crawl(`https://${HOST}/no-such-row`);
  const other = await crawl('https://not-served.example.org/suppressed');
  misses.push(JSON.stringify([none.status, none.text, none.headers['content-type']]));
  misses.push(JSON.stringify([other.status, other.text, other.headers['content-type']]));
  assert.equal(new Set(misses).size, 1, `every miss answers the same: ${misses.join(' | ')}`);
  assert.deepEqual(JSON.parse(none.text), { error: 'no page is served for this URL', code: 'not_found' });
  for (const forbidden of ['nextRenderTime', 'urgentAt', 'strikes', 'state', 'lastOutcome'])
    assert.ok(!none.text.includes(forbidden));
  await setRow(url, { state: 'active' });
  assert.equal((await crawl(url)).status, 200, 'an active row serves again');
});

test('an empty serving.hosts turns the route off: every request is a 404', async (t) => {
  const url = `https://${HOST}/off`;
  await render(url, big('off'));
  assert.equal((await crawl(url)).status, 200);
  await configForTest(t, h, { serving: { hosts: [] } });
  const r = await crawl(url);
  assert.equal(r.status, 404);
  assert.equal(r.headers['x-prerender'], undefined);
});

test('a miss streams the page from a loopback origin allow-listed exactly; the default policy refuses it', async (t) => {
  const url = `http://${origin.host}/from-origin?q=1`;
  await configForTest(t, h, { serving: { onMiss: 'origin', allowHttp: true } });
  const before = origin.seen.length;
  const refused = await crawl(url);
  assert.equal(refused.status, 502, refused.text);
  assert.deepEqual(JSON.parse(refused.text), {
    error: 'the page could not be fetched from its origin',
    code: 'origin_failed',
  });
  assert.equal(origin.seen.length, before, 'the default policy never dials loopback');

  await postConfig(h, { serving: { allowCidrs: ['127.0.0.1'] } });
  t.after(() => postConfig(h, { serving: { allowCidrs: [] } }));
  const r = await crawl(url, { 'user-agent': 'Googlebot/2.1' });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.text, '<p>origin /from-origin?q=1</p>');
  assert.equal(r.headers['x-prerender'], 'origin');
  assert.equal(r.headers['cache-control'], 'max-age=60');
  assert.equal(r.headers['set-cookie'], undefined, "the origin's cookies are not passed on");
  const sent = origin.seen.at(-1)!;
  assert.equal(sent.headers['x-queue-keeper-origin'], '1');
  assert.equal(sent.headers['user-agent'], 'Googlebot/2.1');
  // Nothing is cached: the next miss fetches again.
  await crawl(url);
  assert.equal(origin.seen.length, before + 2);
});

test('a /p/ request carrying the origin header is refused (508) without a fetch', async (t) => {
  await configForTest(t, h, { serving: { onMiss: 'origin', allowHttp: true, allowCidrs: ['127.0.0.1'] } });
  const before = origin.seen.length;
  const r = await crawl(`http://${origin.host}/loop`, { 'x-queue-keeper-origin': '1' });
  assert.equal(r.status, 508, r.text);
  assert.equal(JSON.parse(r.text).code, 'loop_detected');
  assert.equal(origin.seen.length, before);
});

async function fileDueLater(url: string) {
  await fileTargets(h, [{ url, dueAt: Date.now() + 30 * MIN, cadenceMs: 60 * MIN }]);
}

test('a wrong or empty render-now token never triggers a render', async (t) => {
  await configForTest(t, h, {
    serving: { renderNow: { enabled: true, token: 'sesame-0123456789', timeoutMs: 2000 } },
  });
  const url = `https://${HOST}/render-now-denied`;
  await fileDueLater(url);
  const before = await rowOf(url);
  for (const token of ['', 'sesame', 'sesame-0123456789x', 'SESAME-0123456789']) {
    const r = await crawl(url, { 'x-render-now': token });
    assert.equal(r.status, 404, `token ${JSON.stringify(token)}`);
  }
  const after = await rowOf(url);
  assert.equal(after?.nextRenderTime, before?.nextRenderTime, 'still due later');
  assert.equal(after?.urgentAt ?? null, null, 'never made urgent');
  const cfg = (await h.fetch('/prerender_admin/config')).json;
  assert.ok(!JSON.stringify(cfg).includes('sesame'), 'the config answer never shows the token');
  assert.equal(cfg.serving.renderNow.token, '(set; hidden)');
  // The control: the right token does ask for the render (and, with no fleet here, waits out its 2 s).
  const r = await crawl(url, { 'x-render-now': 'sesame-0123456789' });
  assert.equal(r.status, 404);
  const asked = await rowOf(url);
  assert.equal(typeof asked?.urgentAt, 'number', 'the right token made the row urgent');
  assert.ok((asked?.nextRenderTime as number) <= Date.now(), 'and due now');
});

test('render-now answers a miss with the fresh render made through the prerender fleet protocol', async (t) => {
  await configForTest(t, h, {
    serving: { renderNow: { enabled: true, token: 'sesame-0123456789', timeoutMs: 20_000 } },
  });
  const url = `https://${HOST}/render-now`;
  await fileDueLater(url);
  const body = big('rendered now');
  const asked = Date.now();
  const pending = crawl(url, { 'x-render-now': 'sesame-0123456789' });
  const job = await claimOf(url);
  const a = await worker.report(
    job,
    { statusCode: 200, headers: { 'content-type': 'text/html; charset=utf-8' } },
    body,
  );
  assert.equal(a.status, 204, a.text);
  const r = await pending;
  assert.equal(r.status, 200, r.text.slice(0, 300));
  assert.equal(r.headers['x-prerender'], 'rendered');
  assert.equal(r.text, body);
  assert.ok(Date.now() - asked < 20_000);
  assert.equal((await crawl(url)).headers['x-prerender'], 'hit', 'and the page is stored');
});

test('render-now answers the miss policy as soon as the render fails, not after its timeout', async (t) => {
  await configForTest(t, h, {
    render: { failureRetry: { fastRetries: 0 } },
    serving: { renderNow: { enabled: true, token: 'sesame-0123456789', timeoutMs: 20_000 } },
  });
  const url = `https://${HOST}/render-now-fails`;
  await fileDueLater(url);
  const asked = Date.now();
  const pending = crawl(url, { 'x-render-now': 'sesame-0123456789' });
  const job = await claimOf(url);
  const failed = await worker.report(job, { statusCode: 500, headers: {} });
  assert.equal(failed.status, 204, failed.text);
  const r = await pending;
  assert.equal(r.status, 404, 'the miss policy (notFound) answered');
  assert.ok(
    Date.now() - asked < 15_000,
    `answered ${Date.now() - asked} ms after asking, before the 20 s wait`,
  );
  assert.equal((await rowOf(url))?.lastOutcome, 'failed');
});

test('1,000 concurrent render-now misses hold at most maxWaiting waiters and every request is answered', async (t: TestContext) => {
  const maxWaiting = 20;
  await configForTest(t, h, {
    serving: { renderNow: { enabled: true, token: 'sesame-0123456789', timeoutMs: 3000, maxWaiting } },
  });
  const urls = Array.from({ length: 50 }, (_, i) => `https://${HOST}/crowd-${i}`);
  await fileTargets(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() + 30 * MIN, cadenceMs: 60 * MIN })),
  );
  // Each answer's time in the server (Harper's Server-Timing) and when it came: a request that waited
  // for a render spent at least the wait's timeout there. The most such intervals open at once is
  // the number of waiters held at once.
  const answers = await Promise.all(
    Array.from({ length: 1000 }, (_, i) =>
      crawl(urls[i % urls.length]!, { 'x-render-now': 'sesame-0123456789' }).then((r) => ({
        r,
        end: Date.now(),
        dur: Number(/dur=([\d.]+)/.exec(String(r.headers['server-timing']))?.[1] ?? NaN),
      })),
    ),
  );
  assert.equal(answers.length, 1000);
  assert.ok(
    answers.every(({ r }) => r.status === 404),
    'every request answered by the miss policy',
  );
  assert.ok(
    answers.every(({ dur }) => Number.isFinite(dur)),
    'every answer says its server time',
  );
  const waits = answers.filter(({ dur }) => dur >= 2900).map(({ end, dur }) => [end - dur, end] as const);
  assert.ok(waits.length >= maxWaiting, `${waits.length} requests waited; the slots were used`);
  const edges = waits
    .flatMap(([from, to]) => [[from, 1] as const, [to, -1] as const])
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let most = 0;
  for (const [, d] of edges) most = Math.max(most, (open += d));
  assert.ok(most <= maxWaiting, `${most} waited at once; at most ${maxWaiting} may`);
});
