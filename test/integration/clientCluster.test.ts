// The fleet client behind a balancer that spreads requests over two linked nodes: a small proxy on
// 127.0.0.1 sends each request to the next node in turn, and the client claims through it. Each node
// grants only its own rows, and a result is accepted only by the node that granted its lease, so the
// client must send each result to its job's callbackOrigin (the granting node), not back through the
// proxy. Every row is rendered with the fetch renderer from a loopback site and rescheduled a cadence
// ahead on both nodes, no result is superseded, and no result passes through the proxy.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { FleetClient, fetchRenderer, silentLogger } from '@queue-keeper/fleet-client';
import { ADMIN_PASS, ADMIN_USER, startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { heldByOneView, untilRowsStream } from '../clusterJoin.js';
import { startTogether } from '../startTogether.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const fleetUser: Credentials = { username: 'spread-fleet', password: 'spread-fleet-pass' };
const PAGES = 16;
const REDIRECTS = 4;

let a: HarperInstance;
let b: HarperInstance;
let site: http.Server;
let siteBase = '';
let proxy: http.Server;
let proxyUrl = '';

/** What passed through the proxy. */
interface Passed {
  path: string;
  node: string;
  /** Results the request carried (a `next` or `job_results` body, or 1 for a framed `job_result`). */
  results: number;
  /** The callbackOrigin of each job the answer granted. */
  granted: string[];
}
const passed: Passed[] = [];

/** Each request goes to the next node in turn: a balancer that keeps no affinity. */
function roundRobin(targets: string[]): http.Server {
  let turn = 0;
  return http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const target = new URL(targets[turn++ % targets.length]!);
      const headers = { ...req.headers, host: target.host };
      delete headers.connection;
      const up = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
        (answer) => {
          const got: Buffer[] = [];
          answer.on('data', (c: Buffer) => got.push(c));
          answer.on('end', () => {
            const text = Buffer.concat(got);
            passed.push(describe(req, body, target.origin, text));
            const out = { ...answer.headers, 'content-length': String(text.length) };
            delete out['transfer-encoding'];
            delete out.connection;
            res.writeHead(answer.statusCode ?? 502, out).end(text);
          });
        },
      );
      up.on('error', (e) => res.writeHead(502).end(String(e)));
      up.end(body);
    });
  });
}

function describe(req: http.IncomingMessage, body: Buffer, node: string, answer: Buffer): Passed {
  const path = req.url ?? '/';
  const json = (b: Buffer): Record<string, unknown> => {
    try {
      return JSON.parse(b.toString('utf8')) as Record<string, unknown>;
    } catch {
      return {};
    }
  };
  let results = 0;
  if (req.headers['content-type'] === 'application/octet-stream') results = 1;
  else {
    const r = json(body).results;
    results = Array.isArray(r) ? r.length : 0;
  }
  const jobs = path === '/render_queue/next' ? json(answer).jobs : undefined;
  const granted = Array.isArray(jobs)
    ? jobs.map((j) => String((j as { callbackOrigin?: unknown }).callbackOrigin))
    : [];
  return { path, node, results, granted };
}

before(
  async () => {
    site = http.createServer((req, res) => {
      if (req.url?.startsWith('/p/r-')) {
        res.writeHead(301, { location: '/elsewhere' }).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(`<!doctype html><html><body><h1>page ${req.url}</h1></body></html>`);
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;

    [a, b] = await startTogether<[HarperInstance, HarperInstance]>(
      { start: startHarper({ replicationHostname: 'node-a' }), stop: (h) => h.destroy() },
      { start: startHarper({ replicationHostname: 'node-b' }), stop: (h) => h.destroy() },
    );
    for (const n of [a, b]) {
      await n.addUser(fleetUser.username, fleetUser.password, 'render_fleet');
      const r = await n.fetch('/prerender_admin/config', {
        body: {
          queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
          maintenance: { tickInterval: 500 },
          render: { routes: [{ name: 'site', match: 'prefix', path: '/p/' }] },
        },
      });
      assert.equal(r.status, 200, r.text);
    }
    await b.operation({
      operation: 'add_node',
      hostname: 'node-a',
      url: a.replicationUrl,
      authorization: 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64'),
      retain_authorization: true,
    });
    const nodes = [
      { name: 'node-a', inst: a },
      { name: 'node-b', inst: b },
    ];
    await until('both nodes to publish the two-node view', () => heldByOneView(nodes), 30_000, 250);
    await untilRowsStream(nodes);

    proxy = roundRobin([a.url, b.url]);
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  },
  { timeout: 300_000 },
);

after(async () => {
  await Promise.all([a?.destroy(), b?.destroy()]);
  for (const s of [proxy, site]) {
    s?.closeAllConnections();
    await new Promise<void>((r) => (s ? s.close(() => r()) : r()));
  }
});

test('claiming through a round-robin balancer, every result reaches the node that granted it: all rows rendered and rescheduled, none superseded', async (t) => {
  const urls = [
    ...Array.from({ length: PAGES }, (_, i) => `${siteBase}/p/${i}`),
    ...Array.from({ length: REDIRECTS }, (_, i) => `${siteBase}/p/r-${i}`),
  ];
  const filed = await a.fetch('/render_queue/targets', {
    body: { targets: urls.map((url) => ({ url, cadenceMs: HOUR, dueAt: Date.now() - MIN })) },
  });
  assert.equal(filed.status, 200, filed.text);
  assert.equal(filed.json.upserted, urls.length, filed.text);

  const fleet = new FleetClient({
    url: proxyUrl,
    ...fleetUser,
    concurrency: 4,
    render: fetchRenderer(),
    logger: silentLogger,
    idleBackoff: { baseMs: 200, capMs: 1000 },
  });
  await fleet.start();
  t.after(() => fleet.stop({ drainTimeoutMs: 0 }));
  // Every result answered one way or another (a superseded row would come back only after its lease).
  const answered = () => {
    const c = fleet.counters;
    return c.reported + c.superseded + c.dropped + c.unreported;
  };
  await until('every result answered', () => answered() >= urls.length, 90_000, 200);
  await fleet.stop();

  const c = fleet.counters;
  t.diagnostic(
    `claimed ${c.claimed}, requests ${c.requests}, through the proxy ${passed.length} ` +
      `(${passed.filter((p) => p.node === a.url).length} to node-a)`,
  );
  assert.equal(c.claimed, urls.length);
  assert.equal(c.rendered, PAGES);
  assert.equal(c.redirected, REDIRECTS);
  assert.deepEqual(
    { superseded: c.superseded, dropped: c.dropped, unreported: c.unreported, failed: c.failed },
    { superseded: 0, dropped: 0, unreported: 0, failed: 0 },
  );
  assert.equal(c.originsIgnored, 0);

  // Both nodes granted rows through the proxy, each job naming its own node.
  const granted = passed.flatMap((p) => p.granted);
  assert.equal(granted.length, urls.length);
  assert.deepEqual([...new Set(granted)].sort(), [a.url, b.url].sort());
  // No result went through the proxy: only claims did.
  assert.deepEqual(
    passed.filter((p) => p.results > 0 || p.path !== '/render_queue/next'),
    [],
  );

  // Every page's row is rescheduled a cadence ahead, as both nodes read it, and every page is stored; a
  // page that moved for good (301) retired its row (docs/feeding.md, render verdicts).
  const done = Date.now();
  for (const n of [a, b])
    await until(
      `every row rescheduled or retired on ${n.url}`,
      async () => {
        for (const [i, url] of urls.entries()) {
          const ex = await n.fetch('/prerender_admin/explain', { body: { url } });
          if (ex.status !== 200) return false;
          if (i >= PAGES ? ex.json.row !== null : !(ex.json.row?.nextRenderTime >= done + HOUR - 5 * MIN))
            return false;
        }
        return true;
      },
      30_000,
      500,
    );
  for (const n of [a, b])
    await until(
      `every page stored on ${n.url}`,
      async () => {
        const pages = (await n.operation({
          operation: 'search_by_id',
          database: 'render_queue',
          table: 'RenderedPage',
          ids: urls.slice(0, PAGES).map(key),
          get_attributes: ['id', 'url', 'deviceType', 'statusCode', 'body'],
        })) as Array<{ id: string; url: string; deviceType: string; statusCode: number; body: string }>;
        return (
          pages.length === PAGES &&
          pages.every(
            (p) =>
              p.id === key(p.url) &&
              p.deviceType === 'desktop' &&
              p.statusCode === 200 &&
              p.body.includes(`<h1>page ${new URL(p.url).pathname}</h1>`),
          )
        );
      },
      30_000,
      500,
    );
});
