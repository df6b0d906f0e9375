// Reporting a 1 MB page as JSON vs as raw bytes: the same rendered results sent to
// POST /render_queue/job_result either as one JSON object with the page in `body` or in the raw-bytes
// framing (`application/octet-stream`, `x-metadata-size`, the page unescaped after the metadata), into
// a real Harper with 2 worker threads. Per form: results/s with C concurrent fleet connections, the
// latency per result, Harper's CPU ms per result (all its threads, from /proc), the client's encoding
// ms per result, and Harper's anonymous RSS (sampled every 100 ms) during the phase. The two forms
// alternate round by round, each round on fresh rows, so drift on a shared machine hits both.
//
//   node dist/bench/raw-pages.js [rounds=3] [pagesPerPhase=40] [clients=4]
import { Client } from 'undici';
import { basicAuth, startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import {
  benchUrl,
  fileAll,
  fleetClient,
  loadavg,
  machine,
  median,
  procCpuMs,
  rssKb,
  summarize,
  until,
} from './lib.js';

const ROUNDS = Number(process.argv[2] ?? 3);
const PAGES = Number(process.argv[3] ?? 40);
const CLIENTS = Number(process.argv[4] ?? 4);
const MIN = 60_000;
const fleet: Credentials = { username: 'fleet', password: 'fleet-pass' };
type Form = 'json' | 'raw';

/**
 * About 1 MB of HTML that looks like a page to JSON: attribute quotes, a backslash in inline script,
 * newlines, and text in several scripts (escaped or not, JSON has to scan every character).
 */
function page(): string {
  const chunk =
    '<div class="card" data-id="42"><a href="/p/42?x=1&amp;y=2">Produkt — 日本語 ünï</a>' +
    '<script>var s = "a\\\\b";</script></div>\n';
  const n = Math.ceil(1_000_000 / Buffer.byteLength(chunk));
  return `<!doctype html><html><head><title>bench</title></head><body>${chunk.repeat(n)}</body></html>`;
}

interface Job {
  id: string;
  leaseToken: string;
}

async function claimAll(h: HarperInstance, urls: string[]): Promise<Job[]> {
  const c = fleetClient(h, fleet);
  const want = new Set(urls);
  const got: Job[] = [];
  try {
    await until(`claims of ${urls.length} rows`, async () => {
      const r = await c.post('/render_queue/claim', { limit: 25 });
      if (r.status !== 200) throw new Error(`claim ${r.status} ${JSON.stringify(r.json)}`);
      for (const j of r.json as Job[]) if (want.has(j.id)) got.push(j);
      return got.length >= urls.length ? true : undefined;
    });
  } finally {
    await c.close();
  }
  return got;
}

interface Phase {
  form: Form;
  resultsPerSec: number;
  latencyMs: { p50: number; p99: number };
  harperCpuMsPerResult: number;
  clientEncodeMsPerResult: number;
  harperRssAnonMbPeak: number;
  harperRssAnonMbAfter: number;
}

async function report(h: HarperInstance, jobs: Job[], form: Form, body: string): Promise<Phase> {
  const authorization = basicAuth(fleet);
  const clients = Array.from(
    { length: CLIENTS },
    () => new Client(h.url, { pipelining: 1, keepAliveTimeout: 60_000 }),
  );
  let encodeMs = 0;
  const latencies: number[] = [];
  let peakKb = 0;
  const sampler = setInterval(() => (peakKb = Math.max(peakKb, rssKb(h.pid).rssAnonKb)), 100);
  const cpu0 = procCpuMs(h.pid);
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    clients.map(async (client) => {
      for (let i = next++; i < jobs.length; i = next++) {
        const job = jobs[i]!;
        const meta = {
          id: job.id,
          leaseToken: job.leaseToken,
          outcome: 'rendered',
          statusCode: 200,
          renderTimeMs: 900,
          contentType: 'text/html; charset=utf-8',
        };
        const e0 = performance.now();
        let payload: Buffer;
        let headers: Record<string, string>;
        if (form === 'json') {
          payload = Buffer.from(JSON.stringify({ ...meta, body }), 'utf8');
          headers = { 'content-type': 'application/json' };
        } else {
          const m = Buffer.from(JSON.stringify(meta), 'utf8');
          payload = Buffer.concat([m, Buffer.from(body, 'utf8')]);
          headers = { 'content-type': 'application/octet-stream', 'x-metadata-size': String(m.length) };
        }
        encodeMs += performance.now() - e0;
        const s0 = performance.now();
        const r = await client.request({
          path: '/render_queue/job_result',
          method: 'POST',
          headers: { authorization, ...headers, 'content-length': String(payload.length) },
          body: payload,
        });
        const text = await r.body.text();
        latencies.push(performance.now() - s0);
        if (r.statusCode !== 200 || !JSON.parse(text).accepted)
          throw new Error(`${form} result refused: ${r.statusCode} ${text.slice(0, 300)}`);
      }
    }),
  );
  const wallMs = performance.now() - t0;
  const cpuMs = procCpuMs(h.pid) - cpu0;
  clearInterval(sampler);
  await Promise.all(clients.map((c) => c.close()));
  const lat = summarize(latencies);
  const mb = (kb: number) => Math.round(kb / 102.4) / 10;
  return {
    form,
    resultsPerSec: Math.round((jobs.length / wallMs) * 10_000) / 10,
    latencyMs: { p50: Math.round(lat.p50), p99: Math.round(lat.p99) },
    harperCpuMsPerResult: Math.round((cpuMs / jobs.length) * 10) / 10,
    clientEncodeMsPerResult: Math.round((encodeMs / jobs.length) * 100) / 100,
    harperRssAnonMbPeak: mb(peakKb),
    harperRssAnonMbAfter: mb(rssKb(h.pid).rssAnonKb),
  };
}

async function main(): Promise<void> {
  const body = page();
  console.log(
    JSON.stringify({
      ...machine(),
      bench: 'raw-pages',
      rounds: ROUNDS,
      pagesPerPhase: PAGES,
      clients: CLIENTS,
      pageBytes: Buffer.byteLength(body),
      jsonBytes: Buffer.byteLength(JSON.stringify(body)),
    }),
  );
  const h = await startHarper();
  try {
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    const cfg = await h.fetch('/prerender_admin/config', {
      body: { queue: { keeper: { publishInterval: 200, stateInterval: 1000 } } },
    });
    if (cfg.status !== 200) throw new Error(`config: ${cfg.text}`);
    const phases: Phase[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      // Alternate which form goes first, so neither always meets a warmer (or more fragmented) heap.
      const forms: Form[] = round % 2 === 0 ? ['json', 'raw'] : ['raw', 'json'];
      for (const form of forms) {
        const urls = Array.from({ length: PAGES }, (_, i) => benchUrl(`${form}-${round}`, i));
        await fileAll(
          h,
          urls.map((url) => ({ url, cadenceMs: 60 * MIN, dueAt: Date.now() - MIN })),
        );
        const jobs = await claimAll(h, urls);
        const load = loadavg();
        const p = await report(h, jobs, form, body);
        phases.push(p);
        console.log(JSON.stringify({ round, loadavgBefore: load, ...p, loadavgAfter: loadavg() }));
      }
    }
    const summary = (form: Form) => {
      const of = phases.filter((p) => p.form === form);
      return {
        form,
        resultsPerSec: median(of.map((p) => p.resultsPerSec)),
        latencyP50Ms: median(of.map((p) => p.latencyMs.p50)),
        harperCpuMsPerResult: median(of.map((p) => p.harperCpuMsPerResult)),
        clientEncodeMsPerResult: median(of.map((p) => p.clientEncodeMsPerResult)),
        harperRssAnonMbPeak: Math.max(...of.map((p) => p.harperRssAnonMbPeak)),
      };
    };
    console.log(JSON.stringify({ medians: [summary('json'), summary('raw')], loadavg: loadavg() }));
  } finally {
    await h.destroy();
  }
}

await main();
