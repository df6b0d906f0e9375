// The upgrade to device keys against a real Harper (docs/operating.md "Upgrading"): a data folder written in the layout
// before device variants (rows, failing entries and pages keyed by the bare URL; bodies in Harper blobs) is
// moved in place on the first start to `<url>|desktop`, losing no row, no failure history and no page; every
// body still reads after Harper's audit cleanup has passed the old versions (a moved blob reference would
// be deleted then); and a second start changes nothing.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { repoRoot, startHarper, type HarperInstance } from '../harness.js';
import { postConfig } from '../api.js';
import { sleep, until } from '../wait.js';

const HOST = 'upgrade.example.com';
const MIN = 60_000;
const HOUR = 60 * MIN;
/**
 * Harper deletes a replaced version's blob file when its audit entry expires (logging.auditRetention); a
 * short one lets the test read every body after that has happened.
 */
const AUDIT_RETENTION_S = 30;
const harperConfig = { logging: { auditRetention: `${AUDIT_RETENTION_S}s` } };

let h: HarperInstance | undefined;
let root: string;

/** Row fields as the layout before devices stored them, with failure history on every third row. */
function bareRows(now: number) {
  return Array.from({ length: 30 }, (_, i) => {
    const url = `https://${HOST}/page/${i}`;
    const failing = i % 3 === 0;
    return {
      cacheKey: url,
      nextRenderTime: Math.floor((now + HOUR + i * MIN) / MIN) * MIN,
      fromSitemap: i % 2 === 0,
      effectiveInterval: i % 4 === 0 ? 6 * HOUR : null,
      verified: i !== 7,
      urgentAt: null,
      changedAt: null,
      strikes: failing ? 2 : 0,
      lastOutcome: failing ? 'failed' : 'rendered',
      lastRenderedAt: now - HOUR,
      lastStatusCode: failing ? 500 : 200,
      lastError: failing ? { name: 'TimeoutError', message: `render ${i} timed out` } : null,
      failingSince: failing ? now - 2 * HOUR : null,
    };
  });
}

/** Pages of a third of the rows: bodies over 8 KiB (blob files of their own) and one small one. */
function barePages(now: number) {
  return Array.from({ length: 10 }, (_, i) => ({
    url: `https://${HOST}/page/${i + 1}`,
    statusCode: 200,
    contentType: 'text/html; charset=utf-8',
    headers: { 'content-type': 'text/html; charset=utf-8' },
    body:
      i === 0
        ? `<html>small ${i}</html>`
        : `<html><body>${`<p>page ${i} ünïcødé 日本語</p>`.repeat(600 + i)}</body></html>`,
    renderedAt: now - HOUR,
  }));
}

before(
  async () => {
    const now = Date.now();
    const bare = await startHarper({
      componentDir: join(repoRoot, 'test', 'fixtures', 'bare-layout'),
      readyPath: '/BareLayout',
      harperConfig,
    });
    root = bare.root;
    try {
      const w = await bare.fetch('/BareLayout', {
        body: {
          rows: bareRows(now),
          failing: bareRows(now)
            .filter((r) => r.strikes > 0)
            .map((r) => ({ id: r.cacheKey, strikes: r.strikes, failingSince: r.failingSince })),
          pages: barePages(now),
        },
        unchecked: 'the fixture component, not queue-keeper',
      });
      assert.equal(w.status, 200, w.text);
    } finally {
      await bare.stop();
    }
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

async function boot(): Promise<HarperInstance> {
  const inst = await startHarper({ root, harperConfig });
  await postConfig(inst, { serving: { hosts: [HOST], onMiss: 'notFound' } });
  return inst;
}

async function upgradeDuty(inst: HarperInstance) {
  const r = await inst.fetch('/prerender_admin/queue-state');
  if (r.status !== 200) return undefined;
  return (r.json.devices?.duties ?? []).find((d: { kind: string }) => d.kind === 'upgrade') as
    { phase: string; rows: number; pages: number; finishedAt: number | null } | undefined;
}

async function storedRows(inst: HarperInstance): Promise<Array<Record<string, unknown>>> {
  return (await inst.operation({
    operation: 'sql',
    sql: 'SELECT * FROM render_schedule.RenderSchedule',
  })) as Array<Record<string, unknown>>;
}

/** Every page's body as a crawler gets it. */
async function bodies(inst: HarperInstance): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const p of barePages(0)) {
    const r = await inst.fetch(`/p/${p.url}`, { auth: null, headers: { 'x-device-type': 'desktop' } });
    assert.equal(r.status, 200, `${p.url}: ${r.status} ${r.text.slice(0, 200)}`);
    out.set(p.url, r.text);
  }
  return out;
}

test('the first start moves every row, failure history and page to <url>|desktop; the bodies outlive the audit cleanup; a second start changes nothing', async () => {
  h = await boot();
  await until('the upgrade is done', async () => (await upgradeDuty(h!))?.phase === 'done', 60_000);
  const duty = (await upgradeDuty(h))!;
  assert.equal(duty.rows, 30, 'every row moved');
  assert.equal(duty.pages, 10, 'every page moved');

  const want = bareRows(0);
  const rows = await storedRows(h);
  assert.equal(rows.length, 30, 'no row left under its bare URL, none lost');
  for (const w of want) {
    const got = rows.find((r) => r.cacheKey === `${w.cacheKey}|desktop`);
    assert.ok(got, `${w.cacheKey} is under its desktop key`);
    for (const field of [
      'fromSitemap',
      'effectiveInterval',
      'verified',
      'strikes',
      'lastOutcome',
      'lastStatusCode',
      'lastError',
    ] as const)
      assert.deepEqual(got[field] ?? null, w[field] ?? null, `${w.cacheKey} keeps ${field}`);
    assert.equal(typeof got.failingSince === 'number', w.failingSince !== null, `${w.cacheKey} failingSince`);
  }
  const failing = await h.fetch('/prerender_admin/failing?limit=100');
  assert.equal(failing.status, 200, failing.text);
  assert.deepEqual(
    failing.json.rows
      .map((r: { url: string; deviceType: string; strikes: number }) => [r.url, r.deviceType, r.strikes])
      .sort(),
    want
      .filter((w) => w.strikes > 0)
      .map((w) => [w.cacheKey, 'desktop', 2])
      .sort(),
    'the failing list keeps every failing row, now per device',
  );

  const expected = new Map(barePages(0).map((p) => [p.url, p.body]));
  assert.deepEqual(await bodies(h), expected, 'every page reads under its device key');
  // Past the audit retention the old versions' entries are cleaned up, with the blob files only they named.
  await sleep((AUDIT_RETENTION_S + 45) * 1000);
  assert.deepEqual(await bodies(h), expected, 'every body still reads after the audit cleanup');

  // A second start: nothing left to move, nothing moved again.
  await h.stop();
  h = await boot();
  await until('queue-state answers', async () => (await upgradeDuty(h!)) !== undefined, 60_000);
  const again = (await upgradeDuty(h))!;
  assert.deepEqual(
    [again.phase, again.rows, again.pages, again.finishedAt],
    [duty.phase, duty.rows, duty.pages, duty.finishedAt],
    'the upgrade is not run again',
  );
  assert.equal((await storedRows(h)).length, 30);
  assert.deepEqual(await bodies(h), expected);
});
