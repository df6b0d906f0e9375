// A real render end to end through the prerender fleet protocol, all on 127.0.0.1: a small site whose
// pages build their content with JavaScript (a fetch to the same server, then a <p id="built">
// appended), and a fleet that works as an unchanged prerender render fleet does (test/prerenderFleet.ts)
// with headless Chromium (test/browser.ts): it finds the node over MQTT, claims while the node reports
// `queued`, skips a job with under 30 s of lease left, renders each page with the device its job names,
// keeps the fleet's allowed response headers, and posts the page gzip-framed, without a token, with its
// worker id, to the job's callbackOrigin. Every result must be answered 204 applied; every row is
// rescheduled a cadence out and its stored page holds the built DOM.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { launchChromium } from '../browser.js';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { startTogether } from '../startTogether.js';
import { fileTargets, postConfig } from '../api.js';
import {
  FORWARDED_HEADERS,
  PrerenderFleetWorker,
  resultStatus,
  type FleetAnswer,
  type PrerenderJob,
} from '../prerenderFleet.js';
import { sleep, until } from '../wait.js';
import { builtText, jsPage, serveJsSite } from '../jsSite.js';
import { key } from '../rowKeys.js';

const MIN = 60_000;
/** The pages' cadence: a rendered row comes due again this far out. */
const CADENCE = 30 * MIN;
const fleetUser: Credentials = { username: 'pfb-fleet', password: 'pfb-fleet-pass' };
/** The response headers the site sends with every page; the fleet forwards only its allowed ones. */
const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'max-age=300',
  etag: '"page-v1"',
  'x-powered-by': 'test-site',
};
/** Viewports by the job's deviceType; an unknown device falls back to the default, as the fleet does. */
const DEVICES: Record<string, { width: number; height: number }> = {
  desktop: { width: 1366, height: 768 },
  mobile: { width: 390, height: 844 },
};
/** The fleet's rule: a job with less lease than this left is neither rendered nor reported. */
const MIN_LEASE_LEFT_MS = 30_000;

let h: HarperInstance | undefined;
let browser: Browser | undefined;
let site: http.Server | undefined;
let siteBase = '';
const dataHits = new Map<string, number>();

/** /viewport/<n>: a page whose script writes the window's width, so a stored page tells its device. */
const viewportPage = (n: string) =>
  `<!doctype html><html><body><h1>viewport ${n}</h1><script>const p = document.createElement('p');` +
  `p.id = 'width'; p.textContent = String(window.innerWidth); document.body.append(p);</script></body></html>`;

function serveSite(req: http.IncomingMessage, res: http.ServerResponse): void {
  if (serveJsSite(req, res, dataHits, PAGE_HEADERS)) return;
  const vp = /^\/viewport\/(\w+)$/.exec(req.url ?? '');
  if (vp) {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(viewportPage(vp[1]!));
    return;
  }
  res.writeHead(404, { 'content-type': 'text/plain' }).end('not here');
}

before(
  async () => {
    site = http.createServer(serveSite);
    await new Promise<void>((r) => site!.listen(0, '127.0.0.1', r));
    siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
    [h, browser] = await startTogether<[HarperInstance, Browser]>(
      { start: startHarper(), stop: (x) => x.destroy() },
      { start: launchChromium(), stop: (x) => x.close() },
    );
    await h.addUser(fleetUser.username, fleetUser.password, 'render_fleet');
    await postConfig(h, {
      queue: { keeper: { publishInterval: 200, stateInterval: 1000 }, statusSyncInterval: 250 },
      render: { callbackOrigin: `http://127.0.0.1:${h.ports.http}` },
    });
  },
  { timeout: 120_000 },
);

after(async () => {
  await browser?.close();
  await h?.destroy();
  if (site) await new Promise<void>((r) => site!.close(() => r()));
});

interface Rendered {
  statusCode: number;
  headers: Record<string, string>;
  renderTime: number;
  content: string;
}

/** One page in Chromium, with the viewport of the job's device; the network must go quiet first. */
async function render(job: PrerenderJob): Promise<Rendered> {
  const startedAt = Date.now();
  const context = await browser!.newContext({ viewport: DEVICES[job.deviceType] ?? DEVICES.desktop });
  try {
    const page = await context.newPage();
    const response = await page.goto(job.url, { waitUntil: 'networkidle', timeout: 30_000 });
    assert.ok(response, `${job.url} answered`);
    const all = response.headers();
    const headers: Record<string, string> = {};
    for (const name of FORWARDED_HEADERS) if (all[name]) headers[name] = all[name];
    const content = await page.content();
    return { statusCode: response.status(), headers, renderTime: Date.now() - startedAt, content };
  } finally {
    await context.close();
  }
}

test(
  'an unchanged prerender fleet with headless Chromium finds the node over MQTT, renders every due row and reports it gzip-framed without a token: all 204 applied, rows rescheduled a cadence out, pages hold the built DOM',
  { timeout: 120_000 },
  async (t) => {
    const worker = new PrerenderFleetWorker(fleetUser, 'pfb-worker-1', h!.ports.http!);
    const watch = await worker.watch(`mqtt://127.0.0.1:${h!.ports.mqtt}`);
    t.after(() => watch.close());

    const ids = ['0', '1', '2', '3', '4', '5'];
    const urls = ids.map((n) => `${siteBase}/js/${n}`);
    const filed = await fileTargets(
      h!,
      urls.map((url) => ({ url, cadenceMs: CADENCE, dueAt: Date.now() - MIN })),
    );
    assert.equal(filed.upserted, urls.length);

    // The fleet: claim from a host that reports `queued`, render two pages at a time, report each.
    const answers = new Map<string, FleetAnswer>();
    const skipped: string[] = [];
    const hosts = new Set<string>();
    const deadline = Date.now() + 90_000;
    while (answers.size < urls.length) {
      assert.ok(Date.now() < deadline, `only ${answers.size} of ${urls.length} pages reported in time`);
      const host = watch.eligible()[0];
      if (!host) {
        await sleep(100);
        continue;
      }
      hosts.add(host);
      assert.equal(host, '127.0.0.1', 'queue_status names the host of render.callbackOrigin');
      const claimed = await worker.claim(host, 2);
      assert.equal(claimed.status, 200, claimed.text);
      assert.ok(claimed.jobs, `a bare JSON array: ${claimed.text.slice(0, 200)}`);
      if (claimed.jobs.length === 0) {
        await sleep(100);
        continue;
      }
      await Promise.all(
        claimed.jobs.map(async (job) => {
          if (job.expiresAt - Date.now() < MIN_LEASE_LEFT_MS) {
            skipped.push(job.id);
            return;
          }
          assert.equal(job.deviceType, 'desktop');
          assert.equal(job.id, key(job.url), 'the job is the desktop row of its URL');
          const r = await render(job);
          const meta = {
            statusCode: r.statusCode,
            headers: r.headers,
            renderTime: r.renderTime,
            outcome: 'rendered',
          };
          answers.set(job.url, await worker.report(job, meta, r.content, 'gzip'));
        }),
      );
    }
    const done = Date.now();
    assert.deepEqual(skipped, [], 'every job came with the lease the fleet needs');
    assert.deepEqual([...hosts], ['127.0.0.1']);
    assert.deepEqual([...answers.keys()].sort(), [...urls].sort(), 'each row claimed once and reported');
    for (const [id, a] of answers) {
      assert.equal(a.status, 204, `${id}: ${a.status} ${a.text.slice(0, 300)}`);
      assert.equal(a.text, '', `${id}: a 204 has no body`);
      assert.equal(resultStatus(a), 'applied', id);
    }

    // The browser ran each page's script: it fetched the data, and the stored page holds the result.
    for (const n of ids) assert.equal(dataHits.get(n), 1, `/data/${n} fetched by the page's script`);
    for (const [i, url] of urls.entries()) {
      assert.ok(!jsPage(ids[i]!).includes('id="built"'), 'the served HTML has no built paragraph');
      const stored = (await h!.operation({
        operation: 'search_by_id',
        database: 'render_queue',
        table: 'RenderedPage',
        ids: [key(url)],
        get_attributes: ['*'],
      })) as Array<{ url: string; body: unknown; statusCode: number | null; headers?: unknown }>;
      assert.equal(stored[0]?.url, url, 'the page carries its URL');
      const body = String(stored[0]?.body);
      assert.ok(body.includes(`<p id="built">${builtText(ids[i]!)}</p>`), body.slice(0, 500));
      assert.ok(body.includes(`<h1>page ${ids[i]}</h1>`), body.slice(0, 500));
      assert.equal(stored[0]?.statusCode, 200);
      assert.deepEqual(stored[0]?.headers, {
        'content-type': PAGE_HEADERS['content-type'],
        'cache-control': PAGE_HEADERS['cache-control'],
        etag: PAGE_HEADERS.etag,
      });

      const ex = await h!.fetch('/prerender_admin/explain', { body: { url } });
      assert.equal(ex.status, 200, ex.text);
      assert.ok(
        ex.json.lease === null || ex.json.lease.state === 'grace',
        `${url} lease ${JSON.stringify(ex.json.lease)}`,
      );
      assert.equal(ex.json.row.strikes, 0);
      assert.equal(ex.json.row.lastOutcome, 'rendered');
      const next = ex.json.row.nextRenderTime as number;
      assert.ok(Math.abs(next - (done + CADENCE)) < 2 * MIN, `${url} next render ${next - done} ms ahead`);
    }
    // With every row rendered, the node tells the fleet there is nothing left.
    await until('the node to report empty over MQTT', () => watch.hosts.get('127.0.0.1')?.status === 'empty');
  },
);

test(
  'with render.deviceTypes [desktop, mobile] the Chromium fleet renders every due URL once per device, each in its viewport, and each page is stored as its device',
  { timeout: 120_000 },
  async (t) => {
    await postConfig(h!, { render: { deviceTypes: ['desktop', 'mobile'] } });
    t.after(() => postConfig(h!, { render: { deviceTypes: ['desktop'] } }));
    const worker = new PrerenderFleetWorker(fleetUser, 'pfb-worker-devices', h!.ports.http!);
    const urls = ['a', 'b'].map((n) => `${siteBase}/viewport/${n}`);
    await fileTargets(
      h!,
      urls.map((url) => ({ url, cadenceMs: CADENCE, dueAt: Date.now() - MIN })),
    );
    const want = urls.flatMap((u) => [`${u}|desktop`, `${u}|mobile`]);
    const reported = new Map<string, FleetAnswer>();
    const deadline = Date.now() + 90_000;
    while (!want.every((id) => reported.has(id))) {
      assert.ok(Date.now() < deadline, `only ${[...reported.keys()].join(', ')} reported in time`);
      const claimed = await worker.claim('127.0.0.1', 4);
      assert.equal(claimed.status, 200, claimed.text);
      const jobs = (claimed.jobs ?? []).filter((j) => want.includes(j.id));
      if (jobs.length === 0) {
        await sleep(100);
        continue;
      }
      await Promise.all(
        jobs.map(async (job) => {
          assert.ok(!reported.has(job.id), `${job.id} is granted once`);
          assert.equal(job.id, `${job.url}|${job.deviceType}`);
          const r = await render(job);
          const meta = {
            statusCode: r.statusCode,
            headers: r.headers,
            renderTime: r.renderTime,
            outcome: 'rendered',
          };
          reported.set(job.id, await worker.report(job, meta, r.content, 'gzip'));
        }),
      );
    }
    for (const [id, a] of reported) assert.equal(resultStatus(a), 'applied', `${id}: ${a.status} ${a.text}`);
    for (const url of urls) {
      for (const device of ['desktop', 'mobile']) {
        const stored = (await h!.operation({
          operation: 'search_by_id',
          database: 'render_queue',
          table: 'RenderedPage',
          ids: [`${url}|${device}`],
          get_attributes: ['*'],
        })) as Array<{ url: string; deviceType: string; body: unknown }>;
        assert.deepEqual([stored[0]?.url, stored[0]?.deviceType], [url, device]);
        const width = /<p id="width">(\d+)<\/p>/.exec(String(stored[0]?.body))?.[1];
        assert.equal(Number(width), DEVICES[device]!.width, `${url} rendered as ${device}`);
      }
    }
  },
);
