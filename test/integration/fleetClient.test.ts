// The reference fleet client (client/, @queue-keeper/fleet-client) against a real Harper (2 worker
// threads), all on 127.0.0.1: a fleet-bound user scoped to one queue drains that queue's targets with
// the fetch renderer from a small site served here, the rows are rescheduled at their cadence and the
// pages stored; the other queue is left alone. An idle client is woken early by MQTT and by a signed
// webhook from the stall sweep, long before its idle backoff would have claimed.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  FleetClient,
  fetchRenderer,
  silentLogger,
  type FleetClientOptions,
} from '@queue-keeper/fleet-client';
import { freePort, startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const fleetUser: Credentials = { username: 'site-fleet', password: 'site-fleet-pass' };
// Far longer than any wait below: a claim that comes sooner was woken, not polled.
const LONG_IDLE = { baseMs: 120_000, capMs: 120_000 };

let h: HarperInstance;
let site: http.Server;
let siteBase = '';
let fleetId = '';
const clients: FleetClient[] = [];

before(
  async () => {
    site = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(`<!doctype html><html><body><h1>page ${req.url}</h1></body></html>`);
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    siteBase = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;

    h = await startHarper();
    await h.addUser(fleetUser.username, fleetUser.password, 'render_fleet');
    const cfg = await h.fetch('/prerender_admin/config', {
      body: {
        queue: { keeper: { publishInterval: 200, stateInterval: 1000 }, statusSyncInterval: 250 },
        render: {
          routes: [
            { name: 'site', match: 'prefix', path: '/p/' },
            { name: 'other', match: 'prefix', path: '/o/' },
          ],
        },
        notify: { allowHttp: true, allowCidrs: ['127.0.0.1'] },
        stall: { after: 1000 },
        maintenance: { tickInterval: 250 },
      },
    });
    assert.equal(cfg.status, 200, cfg.text);
    const f = await h.fetch('/prerender_admin/fleets', {
      body: { name: 'site-fleet', queues: ['site'], username: fleetUser.username },
    });
    assert.equal(f.status, 200, f.text);
    fleetId = f.json.id;
  },
  { timeout: 180_000 },
);

after(async () => {
  for (const c of clients) await c.stop({ drainTimeoutMs: 0 });
  await h?.destroy();
  await new Promise<void>((r) => site?.close(() => r()));
});

function client(opts: Partial<FleetClientOptions>): FleetClient {
  const c = new FleetClient({
    url: h.url,
    ...fleetUser,
    concurrency: 4,
    render: fetchRenderer(),
    logger: silentLogger,
    idleBackoff: LONG_IDLE,
    ...opts,
  });
  clients.push(c);
  return c;
}

async function file(urls: string[]) {
  const r = await h.fetch('/render_queue/targets', {
    body: { targets: urls.map((url) => ({ url, cadenceMs: HOUR, dueAt: Date.now() - MIN })) },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.upserted, urls.length, r.text);
}

async function explain(url: string) {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  return r.json as { queue: string; row: { nextRenderTime: number } | null; lease: { state: string } | null };
}

test('an idle client woken over MQTT drains its queue: rows rescheduled at their cadence, pages stored, other queues untouched', async () => {
  const mqttUrl = `mqtt://127.0.0.1:${h.ports.mqtt}`;
  const fleet = client({ mqtt: { url: mqttUrl } });
  await fleet.start();
  // The queue is empty: the first claim found nothing and the client now waits out its long backoff.
  assert.equal(fleet.counters.idleWaits, 1);
  assert.equal(fleet.state, 'idle');

  const mine = Array.from({ length: 12 }, (_, i) => `${siteBase}/p/${i}`);
  const others = [`${siteBase}/o/1`, `${siteBase}/o/2`];
  const startedAt = Date.now();
  await file([...mine, ...others]);
  await until('every site row reported', () => fleet.counters.reported >= mine.length, 30_000);
  assert.ok(Date.now() - startedAt < LONG_IDLE.baseMs / 2, 'claimed long before the idle backoff ended');
  assert.ok(fleet.counters.mqttWakes >= 1, 'woken by queue_status over MQTT');
  const c = fleet.counters;
  assert.equal(c.claimed, mine.length, 'the fleet-bound client got its queue and nothing else');
  assert.equal(c.rendered, mine.length);
  assert.equal(c.superseded + c.dropped + c.unreported + c.failed, 0);

  const done = Date.now();
  for (const url of mine) {
    const ex = await explain(url);
    assert.equal(ex.queue, 'site');
    // Released: gone, or in the short release grace that refuses an immediate re-grant.
    assert.ok(ex.lease === null || ex.lease.state === 'grace', `${url} lease ${JSON.stringify(ex.lease)}`);
    assert.ok(ex.row!.nextRenderTime >= done + HOUR - 2 * MIN, `${url} rescheduled a cadence ahead`);
  }
  for (const url of others) {
    const ex = await explain(url);
    assert.equal(ex.queue, 'other');
    assert.ok(ex.row!.nextRenderTime <= done, 'the other queue is still due');
    assert.equal(ex.lease, null, 'and was never leased');
  }
  const pages = await h.operation({
    operation: 'search_by_id',
    database: 'render_queue',
    table: 'RenderedPage',
    ids: mine.map(key),
    get_attributes: ['id', 'url', 'deviceType', 'statusCode', 'body'],
  });
  assert.equal(pages.length, mine.length);
  for (const p of pages as Array<{
    id: string;
    url: string;
    deviceType: string;
    statusCode: number;
    body: string;
  }>) {
    assert.equal(p.id, key(p.url), 'the page is the desktop page of its URL');
    assert.equal(p.deviceType, 'desktop');
    assert.equal(p.statusCode, 200);
    assert.ok(p.body.includes(`<h1>page ${new URL(p.url).pathname}</h1>`), p.body);
  }
  // queue-state agrees: only the other queue's rows are due, nothing is in flight.
  await until('queue-state with only the other queue due', async () => {
    const s = await h.fetch('/prerender_admin/queue-state');
    return s.status === 200 && s.json.now.due === others.length && s.json.now.inFlight === 0;
  });
  await fleet.stop();
  assert.equal(fleet.state, 'stopped');
});

test('a signed webhook from the stall sweep reaches the receiver and makes an idle client claim before its backoff would have', async () => {
  const port = await freePort();
  const hook = await h.fetch('/prerender_admin/hooks', {
    body: { fleetId, url: `http://127.0.0.1:${port}/wake` },
  });
  assert.equal(hook.status, 200, hook.text);
  const fleet = client({ webhook: { port, host: '127.0.0.1', path: '/wake', secrets: [hook.json.secret] } });
  await fleet.start();
  assert.equal(fleet.state, 'idle');
  const url = `${siteBase}/p/woken`;
  const startedAt = Date.now();
  await file([url]);
  await until('the woken row reported', () => fleet.counters.reported >= 1, 30_000);
  assert.ok(Date.now() - startedAt < LONG_IDLE.baseMs / 2, 'claimed long before the idle backoff ended');
  assert.ok(fleet.counters.webhookWakes >= 1, 'woken by the webhook');
  assert.equal(fleet.counters.webhookRejected, 0, 'every delivery verified');
  assert.ok((await explain(url)).row!.nextRenderTime > Date.now() + HOUR - 2 * MIN);
  await fleet.stop();
});
