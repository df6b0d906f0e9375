// The page store against a real Harper: a rendered result's page is readable byte for byte through the
// example host-app resource (examples/bot-page.js, loaded next to queue-keeper), a re-render replaces
// it, a deleted target takes its page along, the page sweep removes a page whose row vanished, and a
// re-rendered page does not pile up in the database's transaction log.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { componentWithBotPage, startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { configForTest, fileTargets, postConfig } from '../api.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

let h: HarperInstance;
let appDir: string;
const fleet: Credentials = { username: 'fleet', password: 'fleet-pass' };
const MIN = 60_000;
const KIB = 1024;

before(
  async () => {
    appDir = componentWithBotPage();
    h = await startHarper({ componentDir: appDir });
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    await postConfig(h, { queue: { keeper: { publishInterval: 200, stateInterval: 1000 } } });
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
  if (appDir) rmSync(appDir, { recursive: true, force: true });
});

async function file(url: string) {
  await fileTargets(h, [{ url, dueAt: Date.now() - MIN, cadenceMs: 60 * MIN, fromSitemap: true }]);
}

/** Claims until this URL is handed out; answers its lease token. */
async function claimOf(url: string): Promise<number> {
  const job = await until(`a claim of ${url}`, async () => {
    const r = await h.fetch('/render_queue/claim', { body: { limit: 25 }, auth: fleet });
    assert.equal(r.status, 200, r.text);
    return (r.json as Array<{ id: string; url: string; leaseToken: number }>).find((j) => j.url === url);
  });
  assert.equal(job.id, key(url), 'the job is the desktop row of its URL');
  return job.leaseToken;
}

/** Files (or makes due again) the URL, claims it and reports it rendered with this body. */
async function render(url: string, body: string, contentType = 'text/html; charset=utf-8') {
  await file(url);
  const leaseToken = await claimOf(url);
  const r = await h.fetch('/render_queue/job_results', {
    auth: fleet,
    body: {
      results: [{ id: key(url), leaseToken, outcome: 'rendered', statusCode: 200, contentType, body }],
    },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.results[0].accepted, true, r.text);
}

/** What a bot gets from the example resource (no credentials). */
function botGet(url: string) {
  return h.fetch(`/prerendered?url=${encodeURIComponent(url)}`, { auth: null });
}

const ALPHABET = [...'abcdefghijklmnopqrstuvwxyz <>/="é—日本語🎉ü'];

/**
 * About `kib` KiB of page whose text comes from a PRNG seeded by `seed`: incompressible enough that
 * Harper's LZ4 record compression cannot hide a body in the log, and mixed scripts plus an astral
 * character, so a byte-exact round trip must keep every UTF-8 sequence.
 */
function pageBody(kib: number, seed: number): string {
  let x = seed * 2654435761 + 1;
  const chars: string[] = [];
  let bytes = 0;
  while (bytes < kib * KIB) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    const c = ALPHABET[(x >>> 8) % ALPHABET.length]!;
    chars.push(c);
    bytes += Buffer.byteLength(c);
  }
  return `<html><body>${chars.join('')}</body></html>`;
}

function fileBytes(path: string): number {
  const s = statSync(path, { throwIfNoEntry: false });
  return s?.size ?? 0;
}

test('a rendered result stores its page, which reads back byte for byte and a re-render replaces', async () => {
  const url = 'https://pages.example.com/a';
  const first = pageBody(60, 1);
  await render(url, first);
  const got = await botGet(url);
  assert.equal(got.status, 200, got.text);
  assert.equal(got.headers['content-type'], 'text/html; charset=utf-8');
  assert.equal(Buffer.byteLength(got.text), Buffer.byteLength(first));
  assert.equal(got.text, first);

  const second = pageBody(20, 2);
  await render(url, second);
  const again = await botGet(url);
  assert.equal(again.status, 200, again.text);
  assert.equal(again.text, second, 'the re-render replaced the page');

  // A small page (under Harper's 8 KiB blob threshold) is kept inline and round-trips the same way.
  const small = '<p>ünïcødé ✓</p>';
  await render(url, small);
  assert.equal((await botGet(url)).text, small);
  assert.equal((await botGet('https://pages.example.com/never-rendered')).status, 404);
});

test('deleting a target removes its page', async () => {
  const url = 'https://pages.example.com/deleted';
  await render(url, pageBody(30, 3));
  assert.equal((await botGet(url)).status, 200);
  const r = await h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls: [url] } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.deleted, 1);
  assert.equal((await botGet(url)).status, 404, 'the page went with its row');
  const page = await h.operation({
    operation: 'search_by_id',
    database: 'render_queue',
    table: 'RenderedPage',
    ids: [key(url)],
    get_attributes: ['id'],
  });
  assert.deepEqual(page, []);
});

test('the page sweep removes a page whose schedule row disappeared', async (t) => {
  const orphan = 'https://pages.example.com/orphan';
  const kept = 'https://pages.example.com/kept';
  await render(orphan, pageBody(12, 4));
  await render(kept, pageBody(12, 5));
  // The row vanishes without the delete endpoint (as a replicated delete or a crash between the two
  // writes would leave it): only the sweep can find the page now.
  await h.operation({
    operation: 'delete',
    database: 'render_schedule',
    table: 'RenderSchedule',
    ids: [key(orphan)],
  });
  assert.equal((await botGet(orphan)).status, 200, 'the page outlives its row until the sweep runs');
  await configForTest(t, h, { maintenance: { tickInterval: 300 } });
  await until(
    'the sweep removes the orphaned page',
    async () => (await botGet(orphan)).status === 404,
    20_000,
  );
  assert.equal((await botGet(kept)).status, 200, 'a page with its row stays');
});

test('rendering one page again and again does not grow the transaction log by the page', async () => {
  // On the String body every render appended the whole page to render_queue's log (and rewrote it in
  // the record), so K renders grew render_queue.mdb by more than K bodies. With the body in a blob file
  // only a reference passes through the log. (K stays small: a released lease is not granted again for
  // 5 s, so each re-render of one URL costs that long.)
  const url = 'https://pages.example.com/again';
  const K = 4;
  const BODY_KIB = 64;
  const mdb = join(h.root, 'hdb', 'database', 'render_queue.mdb');
  await render(url, pageBody(BODY_KIB, 100));
  const start = fileBytes(mdb);
  assert.ok(start > 0, `no database file at ${mdb}`);
  for (let i = 1; i <= K; i++) await render(url, pageBody(BODY_KIB, 100 + i));
  const grown = fileBytes(mdb) - start;
  assert.equal((await botGet(url)).text, pageBody(BODY_KIB, 100 + K));
  assert.ok(
    grown < (K * BODY_KIB * KIB) / 4,
    `render_queue.mdb grew ${grown} bytes over ${K} renders of ${BODY_KIB} KiB (want under a quarter of one body per render)`,
  );
});
