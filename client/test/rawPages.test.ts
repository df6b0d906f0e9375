// Pages as raw bytes (job_result with `x-metadata-size`): the client's default for every result
// that carries a page. Against the fake server: the exact bytes on the wire, a lost answer resent
// unchanged, a superseded page dropped, and a server without the framing answered with JSON.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Job, RenderResult } from '../src/types.js';
import { until } from './fakeClock.js';
import { acceptAll } from './fakeServer.js';
import { rig } from './setup.js';

/** About 1 MB of page in several scripts, quotes and an astral character (JSON would escape them). */
function bigPage(): string {
  const chunk = '<p class="x">héllo — 日本語 🎉 "quoted" \\ back\\slash</p>\n';
  return `<!doctype html><html><body>${chunk.repeat(Math.ceil(1_000_000 / Buffer.byteLength(chunk)))}</body></html>`;
}

const page = (body: string): RenderResult => ({
  outcome: 'rendered',
  statusCode: 200,
  contentType: 'text/html; charset=utf-8',
  body,
});

test('a rendered page goes to job_result as raw bytes, byte for byte, while a result without a page rides the next claim as JSON', async (t) => {
  const body = bigPage();
  const render = async (job: Job): Promise<RenderResult> =>
    job.id === 'a' ? page(body) : { outcome: 'redirected', statusCode: 301 };
  const r = await rig(render, { concurrency: 2 });
  t.after(r.close);
  r.server.handler = (req, i) =>
    i === 0
      ? { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('a'), r.server.job('b')] } }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('both results answered', () => r.fleet.counters.reported === 2);

  assert.equal(r.server.framed.length, 1);
  const sent = r.server.framed[0]!;
  assert.equal(sent.path, '/render_queue/job_result');
  assert.equal(sent.contentType, 'application/octet-stream');
  const pageBytes = Buffer.from(body, 'utf8');
  assert.ok(pageBytes.length >= 1_000_000);
  assert.equal(Number(sent.metadataSize), sent.raw.length - pageBytes.length);
  assert.ok(sent.page.equals(pageBytes), 'the page bytes arrive exactly as UTF-8, unescaped');
  assert.equal('body' in sent.metadata, false, 'the metadata part carries no body');
  assert.deepEqual(
    { ...sent.metadata, renderTimeMs: 0 },
    {
      id: 'a',
      leaseToken: 'tok-a',
      outcome: 'rendered',
      statusCode: 200,
      renderTimeMs: 0,
      contentType: 'text/html; charset=utf-8',
    },
  );
  // The page-less result and the claim for the two freed slots share one JSON round trip.
  const next = r.server.seen[1]!;
  assert.equal(next.path, '/render_queue/next');
  assert.deepEqual(
    next.body.results!.map((x) => [x.id, x.outcome, x.body]),
    [['b', 'redirected', null]],
  );
  assert.equal(next.body.limit, 2);
  assert.equal(r.fleet.counters.rawPagesSent, 1);
});

test('a framed page whose answer was lost is sent again with the same bytes, and the claim waits for it', async (t) => {
  const body = '<p>ünïcødé ✓</p>';
  const r = await rig(async () => page(body), {
    concurrency: 1,
    errorBackoff: { baseMs: 400, capMs: 400 },
  });
  t.after(r.close);
  r.server.handler = (req, i) =>
    i === 0
      ? { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('a')] } }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  r.server.framedHandler = (_req, i) =>
    i === 0
      ? { destroy: true } // the server applied it; the answer never arrives
      : { json: { accepted: true, nextRenderTime: 1, duplicate: true } };
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('the first send', () => r.server.framed.length === 1);
  const retry = await r.clock.timer((x) => x.delay === 400);
  assert.equal(r.server.seen.length, 1, 'no claim went out behind the unanswered page');
  r.clock.fire(retry);
  await until('the answer to the retry', () => r.fleet.counters.reported === 1);
  assert.equal(r.server.framed.length, 2);
  assert.ok(r.server.framed[1]!.raw.equals(r.server.framed[0]!.raw), 'resent byte for byte');
  assert.equal(r.fleet.counters.duplicates, 1);
  assert.equal(r.fleet.counters.requestErrors, 1);
  assert.equal(r.fleet.counters.pendingResults, 0);
  await until('the claim after it', () => r.server.seen.length === 2);
  assert.deepEqual(r.server.seen[1]!.body.results, []);
});

test('a framed page answered superseded is dropped and never sent again', async (t) => {
  const r = await rig(async () => page('<p>late</p>'), { concurrency: 1 });
  t.after(r.close);
  r.server.handler = (req, i) =>
    i === 0
      ? { queueStatus: 'queued', json: { results: [], jobs: [r.server.job('a')] } }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  r.server.framedHandler = () => ({
    status: 409,
    json: { accepted: false, code: 'superseded', error: 'not the latest grant' },
  });
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('the superseded answer', () => r.fleet.counters.superseded === 1);
  await until('the claim after it', () => r.server.seen.length === 2);
  r.clock.fire(await r.clock.timer((x) => x.delay === 1_000));
  await until('the next idle claim', () => r.server.seen.length === 3);
  assert.equal(r.server.framed.length, 1, 'sent once');
  assert.deepEqual(r.server.seen[2]!.body.results, []);
  assert.equal(r.fleet.counters.reported, 0);
  assert.equal(r.fleet.counters.pendingResults, 0);
});

test('a server that refuses the framing with 415 gets that page and every later one as JSON', async (t) => {
  const r = await rig(async (job) => page(`<p>${job.id} é</p>`), { concurrency: 1 });
  t.after(r.close);
  r.server.handler = (req, i) =>
    i < 2
      ? {
          queueStatus: 'queued',
          json: { ...acceptAll(req), jobs: [r.server.job(i === 0 ? 'a' : 'b')] },
        }
      : { queueStatus: 'empty', json: { ...acceptAll(req), jobs: [] } };
  r.server.framedHandler = () => ({
    status: 415,
    json: { error: 'content-type must be application/json', code: 'unsupported_media_type' },
  });
  await r.fleet.start();
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('a reported', () => r.fleet.counters.reported === 1);
  assert.deepEqual(
    r.server.seen[1]!.body.results!.map((x) => [x.id, x.body]),
    [['a', '<p>a é</p>']],
  );
  r.clock.fire(await r.clock.timer((x) => x.delay === 50));
  await until('b reported', () => r.fleet.counters.reported === 2);
  assert.deepEqual(
    r.server.seen[2]!.body.results!.map((x) => [x.id, x.body]),
    [['b', '<p>b é</p>']],
  );
  assert.equal(r.server.framed.length, 1, 'the framing was tried once');
  assert.equal(r.logs.filter((l) => l.includes('415')).length, 1);
});
