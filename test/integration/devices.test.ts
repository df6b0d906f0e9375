// Device variants against a real Harper (docs/feeding.md "Devices"): with render.deviceTypes [desktop,
// mobile] a filed URL is a row per device, both due in the same minute; the prerender fleet protocol renders
// each once per device and the pages are stored and served per device; delete, revalidate and explain act on
// every device; a permanent redirect retires only the reporting device's row; adding a device files its rows,
// taking one out of the list orphans them (never claimed), and DELETE /prerender_admin/devices/{name} deletes
// them with their pages once the name is out of the list.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { fileTargets, postConfig } from '../api.js';
import { PrerenderFleetWorker, resultStatus, type PrerenderJob } from '../prerenderFleet.js';
import { until } from '../wait.js';

let h: HarperInstance;
let fleet: PrerenderFleetWorker;
const fleetUser: Credentials = { username: 'device-fleet', password: 'device-fleet-pass' };
const MIN = 60_000;
const HOST = 'devices.example.com';

before(
  async () => {
    h = await startHarper();
    await h.addUser(fleetUser.username, fleetUser.password, 'render_fleet');
    fleet = new PrerenderFleetWorker(fleetUser, 'device-worker', h.ports.http!);
    await postConfig(h, {
      queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
      render: { callbackOrigin: `http://127.0.0.1:${h.ports.http}`, deviceTypes: ['desktop', 'mobile'] },
      serving: { hosts: [HOST], onMiss: 'notFound' },
    });
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

/** Jobs granted and not yet asked for, by id (`<url>|<device>`). */
const granted = new Map<string, PrerenderJob>();

/** Claims through the prerender fleet protocol until every one of `ids` has been granted. */
async function claimAll(ids: string[]): Promise<PrerenderJob[]> {
  await until(
    `grants of ${ids.join(', ')}`,
    async () => {
      const r = await fleet.claim('127.0.0.1', 25);
      assert.equal(r.status, 200, r.text);
      for (const j of r.jobs ?? []) {
        assert.ok(!granted.has(j.id), `${j.id} is granted once`);
        granted.set(j.id, j);
      }
      return ids.every((id) => granted.has(id));
    },
    20_000,
    50,
  );
  return ids.map((id) => {
    const j = granted.get(id)!;
    granted.delete(id);
    return j;
  });
}

async function explain(url: string) {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  return r.json as {
    row: { nextRenderTime: number } | null;
    devices: Array<{ deviceType: string; row: { nextRenderTime: number; state: string } | null }>;
  };
}

async function page(key: string): Promise<{ body: string; url: string; deviceType: string } | undefined> {
  const r = (await h.operation({
    operation: 'search_by_id',
    database: 'render_queue',
    table: 'RenderedPage',
    ids: [key],
    get_attributes: ['id', 'url', 'deviceType', 'size'],
  })) as Array<{ url: string; deviceType: string }>;
  return r[0] as { body: string; url: string; deviceType: string } | undefined;
}

async function rowCount(device: string): Promise<number> {
  const r = (await h.operation({
    operation: 'sql',
    sql: `SELECT COUNT(*) AS c FROM render_schedule.RenderSchedule WHERE cacheKey LIKE '%|${device}'`,
  })) as Array<{ c: number }>;
  return r[0]?.c ?? 0;
}

async function queueState() {
  const r = await h.fetch('/prerender_admin/queue-state');
  return r;
}

/** What a crawler gets for `url` with an `x-device-type` header. */
function crawl(url: string, device: string) {
  return h.fetch(`/p/${url}`, { auth: null, headers: { 'x-device-type': device } });
}

test('two devices: a URL is a row per device due in the same minute, rendered once per device, its pages stored and served per device', async () => {
  const urls = [0, 1, 2].map((i) => `https://${HOST}/p/${i}`);
  await fileTargets(
    h,
    urls.map((url) => ({ url, cadenceMs: 60 * MIN })),
  );
  for (const url of urls) {
    const e = await explain(url);
    assert.deepEqual(
      e.devices.map((d) => d.deviceType),
      ['desktop', 'mobile'],
    );
    const [d, m] = e.devices.map((x) => x.row!.nextRenderTime);
    assert.equal(d, m, 'every device of a URL comes due in the same minute');
  }
  await fileTargets(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() - MIN })),
  );
  const ids = urls.flatMap((u) => [`${u}|desktop`, `${u}|mobile`]);
  const jobs = await claimAll(ids);
  for (const j of jobs) {
    const [url, device] = [j.id.slice(0, j.id.lastIndexOf('|')), j.id.slice(j.id.lastIndexOf('|') + 1)];
    assert.equal(j.url, url, 'the job carries the URL');
    assert.equal(j.deviceType, device, 'and the device of its row');
    const a = await fleet.report(
      j,
      { statusCode: 200, headers: { 'content-type': 'text/html; charset=utf-8' } },
      `<html>${device} ${url}</html>`,
    );
    assert.equal(a.status, 204, a.text);
    assert.equal(resultStatus(a), 'applied');
  }
  for (const url of urls) {
    for (const device of ['desktop', 'mobile']) {
      const p = await page(`${url}|${device}`);
      assert.deepEqual(p && [p.url, p.deviceType], [url, device], 'the page carries its URL and device');
      const served = await crawl(url, device);
      assert.equal(served.status, 200, served.text);
      assert.equal(served.text, `<html>${device} ${url}</html>`, `${device} gets its own page`);
    }
  }
});

test('delete, revalidate and explain take a URL and act on every device of it', async () => {
  const url = `https://${HOST}/every-device`;
  await fileTargets(h, [{ url, cadenceMs: 60 * MIN }]);
  const r = await h.fetch('/prerender_admin/revalidate', { body: { url } });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.devices.map((d: { deviceType: string }) => d.deviceType).sort(), [
    'desktop',
    'mobile',
  ]);
  assert.ok(r.json.devices.every((d: { nextRenderTime: number }) => d.nextRenderTime <= Date.now()));
  const d = await h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls: [url] } });
  assert.equal(d.status, 200, d.text);
  assert.equal(d.json.deleted, 1, 'one URL deleted');
  const e = await explain(url);
  assert.deepEqual(
    e.devices.map((x) => x.row),
    [null, null],
    'both rows are gone',
  );
});

test("a 301 on one device's row retires that row only and files the destination for every device", async () => {
  const src = `https://${HOST}/m-only`;
  const dest = `https://${HOST}/m-only-moved`;
  await fileTargets(h, [{ url: src, dueAt: Date.now() - MIN, cadenceMs: 60 * MIN }]);
  const [desktop, mobile] = await claimAll([`${src}|desktop`, `${src}|mobile`]);
  assert.equal((await fleet.report(mobile!, { statusCode: 301, redirectedTo: dest })).status, 204);
  assert.equal((await fleet.report(desktop!, { statusCode: 200 }, '<html>desktop</html>')).status, 204);
  const e = await explain(src);
  assert.equal(e.devices.find((x) => x.deviceType === 'mobile')?.row ?? null, null, 'the mobile row retired');
  assert.ok(e.devices.find((x) => x.deviceType === 'desktop')?.row, 'the desktop row stays');
  const retired = await h.fetch('/prerender_admin/retired');
  assert.ok(
    retired.json.rows.some(
      (x: { url: string; deviceType: string; reason: string }) =>
        x.url === src && x.deviceType === 'mobile' && x.reason === 'redirect',
    ),
    retired.text,
  );
  const filed = await explain(dest);
  assert.deepEqual(
    filed.devices.map((x) => [x.deviceType, x.row !== null]),
    [
      ['desktop', true],
      ['mobile', true],
    ],
    'the destination is filed for every device',
  );
  await claimAll([`${dest}|desktop`, `${dest}|mobile`]); // claimable; the leases are left to run out
});

test('adding a device files its rows; taking it out orphans them; DELETE /prerender_admin/devices/{name} deletes them once it is out of the list', async () => {
  const urls = [0, 1, 2, 3].map((i) => `https://${HOST}/t/${i}`);
  await fileTargets(
    h,
    urls.map((url) => ({ url, cadenceMs: 60 * MIN })),
  );
  const before = await explain(urls[0]!);
  await postConfig(h, { render: { deviceTypes: ['desktop', 'mobile', 'tablet'] } });
  await until(
    'every URL has a tablet row',
    async () => (await rowCount('tablet')) >= (await rowCount('desktop')),
    30_000,
  );
  const withTablet = await explain(urls[0]!);
  assert.equal(
    withTablet.devices.find((x) => x.deviceType === 'tablet')?.row?.nextRenderTime,
    before.row!.nextRenderTime,
    "the added device's row comes due with the URL's other rows",
  );
  const state = await queueState();
  assert.equal(state.status, 200, state.text);
  assert.deepEqual(state.json.devices.configured, ['desktop', 'mobile', 'tablet']);
  assert.ok(
    state.json.devices.duties.some(
      (d: { kind: string; device: string }) => d.kind === 'add' && d.device === 'tablet',
    ),
    state.text,
  );

  // Refused while listed, and for a name that is no device.
  const listed = await h.fetch('/prerender_admin/devices/tablet', { method: 'DELETE' });
  assert.equal(listed.status, 409, listed.text);
  assert.equal(listed.json.code, 'device_listed');
  const bad = await h.fetch('/prerender_admin/devices/Not%20A%20Device', { method: 'DELETE' });
  assert.equal(bad.status, 400, bad.text);
  assert.equal(bad.json.code, 'invalid_device');

  // Out of the list: the rows stay, counted as orphaned, and no claim hands them out.
  const tabletRows = await rowCount('tablet');
  await postConfig(h, { render: { deviceTypes: ['desktop', 'mobile'] } });
  await fileTargets(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() - MIN })),
  );
  await until(
    'queue-state counts the tablet rows as orphaned',
    async () => (await queueState()).json?.devices?.orphanedRows === tabletRows,
    30_000,
  );
  await claimAll(urls.flatMap((u) => [`${u}|desktop`, `${u}|mobile`]));
  const more = await fleet.claim('127.0.0.1', 25);
  assert.ok(!(more.jobs ?? []).some((j) => j.id.endsWith('|tablet')), 'an orphaned row is never claimed');
  assert.equal(await rowCount('tablet'), tabletRows, 'taking a device out deletes nothing');

  const go = await h.fetch('/prerender_admin/devices/tablet', { method: 'DELETE' });
  assert.equal(go.status, 202, go.text);
  assert.equal(go.json.device, 'tablet');
  await until('the tablet rows are deleted', async () => (await rowCount('tablet')) === 0, 30_000);
  await until(
    'queue-state shows the removal done',
    async () =>
      (await queueState()).json?.devices?.duties?.some(
        (d: { kind: string; device: string; phase: string }) =>
          d.kind === 'remove' && d.device === 'tablet' && d.phase === 'done',
      ) === true,
    30_000,
  );
  assert.ok((await rowCount('desktop')) >= urls.length, 'the other devices keep their rows');
});
