// A real render end to end, all on 127.0.0.1: a small site whose pages build their content with
// JavaScript (a fetch to the same server, then a <p id="built"> appended), a fleet-bound user scoped
// to the site's queues, and the reference client with the Chromium renderer (headless Chromium from
// @sparticuz/chromium, like test/browser.ts). An idle client with a long backoff is woken by the
// stall sweep's signed webhook, drains the targets, and the pages stored hold the built DOM; the rows
// are rescheduled at their cadence. Pages go as raw bytes, and a 1 MB non-ASCII page reads back byte
// for byte through the example host-app resource (examples/bot-page.js).
import { after, before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  FleetClient,
  chromiumRenderer,
  silentLogger,
  type ChromiumRenderer,
  type FleetClientOptions,
  type RenderResult,
} from '@queue-keeper/fleet-client';
import {
  componentWithBotPage,
  freePort,
  startHarper,
  type Credentials,
  type HarperInstance,
} from '../harness.js';
import { startTogether } from '../startTogether.js';
import { fileTargets, postConfig } from '../api.js';
import { until } from '../wait.js';
import { builtText, jsPage, serveJsSite } from '../jsSite.js';

const MIN = 60_000;
/** The JS pages' cadence: inside queue-state's next60m and outside next15m once rescheduled. */
const JS_CADENCE = 30 * MIN;
/** The raw-bytes pages' cadence: far from the JS pages' hour, so neither test moves the other's figures. */
const RAW_CADENCE = 6 * 60 * MIN;
const fleetUser: Credentials = { username: 'browser-fleet', password: 'browser-fleet-pass' };
// Far longer than any wait below: a claim that comes sooner was woken, not polled.
const LONG_IDLE = { baseMs: 120_000, capMs: 120_000 };

let h: HarperInstance | undefined;
let chromium: ChromiumRenderer | undefined;
let site: http.Server | undefined;
let siteBase = '';
let appDir = '';
let fleetId = '';
const dataHits = new Map<string, number>();
const clients: FleetClient[] = [];

function serveSite(req: http.IncomingMessage, res: http.ServerResponse): void {
  if (serveJsSite(req, res, dataHits)) return;
  res.writeHead(404, { 'content-type': 'text/plain' }).end('not here');
}

before(
  async () => {
    site = http.createServer(serveSite);
    await new Promise<void>((r) => site!.listen(0, '127.0.0.1', r));
    siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
    appDir = componentWithBotPage();
    // Harper and the first browser boot side by side; if either fails, the other is stopped before the
    // hook fails, so the run ends instead of hanging.
    [h, chromium] = await startTogether<[HarperInstance, ChromiumRenderer]>(
      { start: startHarper({ componentDir: appDir }), stop: (x) => x.destroy() },
      { start: chromiumRenderer({ recycleEvery: 2 }), stop: (x) => x.close() },
    );
    await h.addUser(fleetUser.username, fleetUser.password, 'render_fleet');
    await postConfig(h, {
      queue: { keeper: { publishInterval: 200, stateInterval: 1000 }, statusSyncInterval: 250 },
      render: {
        routes: [
          { name: 'js', match: 'prefix', path: '/js/' },
          { name: 'raw', match: 'prefix', path: '/raw/' },
        ],
      },
      notify: { allowHttp: true, allowCidrs: ['127.0.0.1'] },
      stall: { after: 1000 },
      maintenance: { tickInterval: 250 },
    });
    const f = await h.fetch('/prerender_admin/fleets', {
      body: { name: 'browser-fleet', queues: ['js', 'raw'], username: fleetUser.username },
    });
    assert.equal(f.status, 200, f.text);
    fleetId = f.json.id;
  },
  { timeout: 120_000 },
);

after(async () => {
  for (const c of clients) await c.stop({ drainTimeoutMs: 0 });
  await chromium?.close();
  await h?.destroy();
  if (site) await new Promise<void>((r) => site!.close(() => r()));
  if (appDir) rmSync(appDir, { recursive: true, force: true });
});

/** A client of the fleet's user, stopped when the test ends (pass or fail), so no test sees another's. */
function client(
  t: TestContext,
  opts: Partial<FleetClientOptions> & Pick<FleetClientOptions, 'render'>,
): FleetClient {
  const c = new FleetClient({
    url: h!.url,
    ...fleetUser,
    concurrency: 2,
    logger: silentLogger,
    idleBackoff: LONG_IDLE,
    ...opts,
  });
  clients.push(c);
  t.after(() => c.stop({ drainTimeoutMs: 0 }));
  return c;
}

async function file(urls: string[], cadenceMs: number) {
  const r = await fileTargets(
    h!,
    urls.map((url) => ({ url, cadenceMs, dueAt: Date.now() - MIN })),
  );
  assert.equal(r.upserted, urls.length);
}

/** What a bot gets from the example resource (no credentials): the stored page as served. */
function botGet(url: string) {
  return h!.fetch(`/prerendered?url=${encodeURIComponent(url)}`, { auth: null });
}

test(
  'a Chromium fleet woken by a webhook stores the DOM that JavaScript built and reschedules the rows at their cadence',
  { timeout: 90_000 },
  async (t) => {
    const port = await freePort();
    const hook = await h!.fetch('/prerender_admin/hooks', {
      body: { fleetId, url: `http://127.0.0.1:${port}/wake` },
    });
    assert.equal(hook.status, 200, hook.text);
    const fleet = client(t, {
      render: chromium!.render,
      queues: ['js'],
      webhook: { port, host: '127.0.0.1', path: '/wake', secrets: [hook.json.secret] },
    });
    await fleet.start();
    // Nothing is due yet: the first claim found nothing and the client waits out its long backoff.
    assert.equal(fleet.counters.idleWaits, 1);
    assert.equal(fleet.state, 'idle');

    const ids = ['0', '1', '2', '3', '4'];
    const urls = ids.map((n) => `${siteBase}/js/${n}`);
    const launchesBefore = chromium!.stats().launches;
    const startedAt = Date.now();
    await file(urls, JS_CADENCE);
    await until('every page reported', () => fleet.counters.reported >= urls.length, 60_000);
    assert.ok(Date.now() - startedAt < LONG_IDLE.baseMs / 2, 'claimed long before the idle backoff ended');
    assert.ok(fleet.counters.webhookWakes >= 1, 'woken by the webhook (no MQTT is configured)');
    assert.equal(fleet.counters.webhookRejected, 0, 'every delivery verified');
    const c = fleet.counters;
    assert.equal(c.claimed, urls.length);
    assert.equal(c.rendered, urls.length);
    assert.equal(c.failed + c.superseded + c.dropped + c.unreported, 0);
    assert.equal(c.rawPagesSent, urls.length, 'each page went as raw bytes');

    // The browser ran each page's script: it fetched the data, and the stored page holds the result.
    for (const n of ids) assert.equal(dataHits.get(n), 1, `/data/${n} fetched by the page's script`);
    for (const [i, url] of urls.entries()) {
      const served = jsPage(ids[i]!);
      assert.ok(!served.includes('id="built"'), 'the served HTML has no built paragraph');
      const got = await botGet(url);
      assert.equal(got.status, 200, got.text);
      assert.equal(got.headers['content-type'], 'text/html; charset=utf-8');
      assert.ok(got.text.includes(`<p id="built">${builtText(ids[i]!)}</p>`), got.text);
      assert.ok(got.text.includes(`<h1>page ${ids[i]}</h1>`), got.text);
    }

    // Five pages, a new browser every two: the first browser and two recycles, old ones closed.
    const s = chromium!.stats();
    assert.equal(s.launches - launchesBefore, 2);
    assert.equal(s.openBrowsers, 1, 'every replaced browser was closed');
    assert.equal(s.takenBusy, 0, 'every page was taken once its network went quiet');

    const done = Date.now();
    for (const url of urls) {
      const ex = await h!.fetch('/prerender_admin/explain', { body: { url } });
      assert.equal(ex.status, 200, ex.text);
      assert.equal(ex.json.queue, 'js');
      assert.ok(
        ex.json.lease === null || ex.json.lease.state === 'grace',
        `${url} lease ${JSON.stringify(ex.json.lease)}`,
      );
      const next = ex.json.row.nextRenderTime as number;
      assert.ok(Math.abs(next - (done + JS_CADENCE)) < 2 * MIN, `${url} next render ${next - done} ms ahead`);
    }
    // queue-state agrees: nothing due or in flight, the five rows come due again within the hour but
    // not within 15 minutes, and the flow counted them rescheduled.
    await until('queue-state with the rows rescheduled a cadence ahead', async () => {
      const q = await h!.fetch('/prerender_admin/queue-state');
      if (q.status !== 200) return false;
      const flow = q.json.flow as Array<{ rescheduled: number }>;
      return (
        q.json.now.due === 0 &&
        q.json.now.inFlight === 0 &&
        q.json.coming.next15m === 0 &&
        q.json.coming.next60m === urls.length &&
        flow.reduce((a, m) => a + m.rescheduled, 0) >= urls.length
      );
    });
    await fleet.stop();
    assert.equal(fleet.state, 'stopped');
  },
);

/** About 1 MB of page in several scripts, with quotes and backslashes JSON would have escaped. */
function bigPage(): string {
  const chunk = '<p class="x">ünïcødé — 日本語 🎉 "q" \\ </p>\n';
  return `<!doctype html><html><body>${chunk.repeat(Math.ceil(1_000_000 / Buffer.byteLength(chunk)))}</body></html>`;
}

test(
  'pages reported as raw bytes are stored byte for byte: non-ASCII text and a 1 MB page',
  { timeout: 60_000 },
  async (t) => {
    const bodies = new Map([
      [`${siteBase}/raw/small`, '<p>ünïcødé ✓ 日本語 🎉 "quoted" \\ slash</p>'],
      [`${siteBase}/raw/big`, bigPage()],
    ]);
    assert.ok(Buffer.byteLength(bodies.get(`${siteBase}/raw/big`)!) >= 1_000_000);
    const render = async (job: { url: string }): Promise<RenderResult> => ({
      outcome: 'rendered',
      statusCode: 200,
      contentType: 'text/html; charset=utf-8',
      body: bodies.get(job.url)!,
    });
    await file([...bodies.keys()], RAW_CADENCE);
    // Not a wake test: a short idle backoff, so a first claim that ran before the keeper published the
    // rows is soon followed by another.
    const fleet = client(t, { render, queues: ['raw'], idleBackoff: { baseMs: 100, capMs: 500 } });
    await fleet.start();
    await until('both pages reported', () => fleet.counters.reported >= bodies.size, 30_000);
    assert.equal(fleet.counters.rawPagesSent, bodies.size);
    assert.equal(fleet.counters.dropped + fleet.counters.failed, 0);
    for (const [url, body] of bodies) {
      const got = await botGet(url);
      assert.equal(got.status, 200, got.text.slice(0, 200));
      assert.equal(Buffer.byteLength(got.text), Buffer.byteLength(body), url);
      assert.ok(Buffer.from(got.text, 'utf8').equals(Buffer.from(body, 'utf8')), `${url} byte for byte`);
    }
    await fleet.stop();
  },
);
