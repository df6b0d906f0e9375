// The Prometheus scrape and the Harper analytics of a real Harper (2 worker threads), docs/monitoring.md: the
// scrape passes promtool's rules, latency histograms are summed over both workers, the per-queue series
// follow the configured routes only, and the same figures reach Harper analytics under queue_health.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { histogramTotals, labelValues, lintExposition, parseExposition, type Family } from '../promLint.js';
import { until } from '../wait.js';
import { key } from '../rowKeys.js';

let h: HarperInstance;
const fleet: Credentials = { username: 'metrics-fleet', password: 'metrics-fleet-pass' };
const MIN = 60_000;
const HOUR = 60 * MIN;
const ROUTES = [
  { name: 'product', match: 'prefix', path: '/p/' },
  { name: 'blog', match: 'prefix', path: '/blog/' },
  { name: 'late', match: 'prefix', path: '/late/', renderInterval: HOUR },
];
const QUEUES = ['product', 'blog', 'late', 'unrouted'];

before(
  async () => {
    h = await startHarper();
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    const r = await h.fetch('/prerender_admin/config', {
      body: {
        queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
        render: { routes: ROUTES },
        maintenance: { tickInterval: 500 },
      },
    });
    assert.equal(r.status, 200, r.text);
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

async function scrape(fresh = false): Promise<{ text: string; families: Map<string, Family>; by: string }> {
  const r = await h.fetch('/prerender_admin/metrics', { fresh });
  assert.equal(r.status, 200, r.text);
  assert.equal(
    r.headers['content-type'],
    'text/plain; version=0.0.4',
    'the type docs/monitoring.md names, exactly',
  );
  return { text: r.text, families: parseExposition(r.text), by: String(r.headers['x-served-by']) };
}

/** A scrape taken while the keeper vouches for its numbers (the per-queue due series are present). */
async function vouchedScrape() {
  return until('a scrape with the per-queue due series', async () => {
    const s = await scrape();
    return labelValues(s.families, 'queue_keeper_queue_due_rows', 'queue').size === QUEUES.length && s;
  });
}

async function file(targets: unknown[]) {
  const r = await h.fetch('/render_queue/targets', { body: { targets } });
  assert.equal(r.status, 200, r.text);
}

async function claim(queues: string[], limit: number, fresh = false) {
  const r = await h.fetch('/render_queue/claim', {
    body: { limit, ...(queues.length ? { queues } : {}) },
    auth: fleet,
    fresh,
  });
  assert.equal(r.status, 200, r.text);
  return {
    jobs: r.json as Array<{ id: string; url: string; leaseToken: string; queue: string }>,
    by: String(r.headers['x-served-by']),
  };
}

const result = (j: { id: string; leaseToken: string }) => ({
  id: j.id,
  leaseToken: j.leaseToken,
  outcome: 'rendered',
  statusCode: 200,
});

function sample(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  return families.get(name)?.samples.find((s) => JSON.stringify(s.labels) === JSON.stringify(labels))?.value;
}

async function dueCount(): Promise<number> {
  return (await h.fetch('/prerender_admin/overview')).json.keeper.dueCount as number;
}

test('the live scrape passes the promtool rules, ends with a line feed and declares every family', async (t) => {
  const { text, families } = await vouchedScrape();
  assert.ok(text.endsWith('\n'), 'the last line ends with a line feed');
  assert.deepEqual(lintExposition(text), []);
  assert.ok(families.size >= 20, `${families.size} families`);
  for (const name of families.keys()) assert.ok(name.startsWith('queue_keeper_'), name);
  // promtool itself runs where it is installed (no npm package ships it, and CI installs nothing from the
  // system's package manager); test/promLint.ts applies its rules everywhere. Where it is absent, the run
  // says so, in the test's diagnostics and on a line of its own, rather than passing in silence.
  const promtool = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (promtool.error) {
    const note = `promtool check metrics DID NOT RUN (${(promtool.error as NodeJS.ErrnoException).code ?? promtool.error.message}): only test/promLint.ts checked the scrape`;
    t.diagnostic(note);
    console.log(`NOTE: ${note}`);
    return;
  }
  assert.equal(promtool.stdout + promtool.stderr, '', 'promtool check metrics');
});

test('claim and result durations are histograms per endpoint, summed over both workers', async () => {
  const now = Date.now();
  await file(
    Array.from({ length: 40 }, (_, i) => ({ url: `https://lat.example.com/blog/${i}`, dueAt: now - MIN })),
  );
  await until('the blog rows to be due', async () => (await dueCount()) >= 40);
  const before = await scrape();
  const counts = (s: { families: Map<string, Family> }, endpoint: string) =>
    histogramTotals(s.families, 'queue_keeper_request_duration_seconds', { endpoint }).count;

  const servedBy = new Set<string>();
  const jobs: Array<{ id: string; leaseToken: string }> = [];
  let claims = 0;
  for (let i = 0; i < 30 && (servedBy.size < 2 || jobs.length < 4); i++) {
    const c = await claim(['blog'], 2, true);
    claims++;
    servedBy.add(c.by);
    jobs.push(...c.jobs);
  }
  assert.equal(servedBy.size, 2, 'claims were answered by both workers');
  assert.ok(jobs.length >= 4, `${jobs.length} jobs`);
  const [a, b, c, ...rest] = jobs;
  await h.fetch('/render_queue/job_result', { auth: fleet, body: result(a!), fresh: true });
  await h.fetch('/render_queue/job_results', { auth: fleet, body: { results: [result(b!)] }, fresh: true });
  const next = await h.fetch('/render_queue/next', {
    auth: fleet,
    body: { results: [result(c!)], limit: 1, queues: ['blog'] },
    fresh: true,
  });
  assert.equal(next.status, 200, next.text);
  rest.push(...(next.json.jobs as typeof jobs));
  await h.fetch('/render_queue/job_results', { auth: fleet, body: { results: rest.map(result) } });

  const seen = new Map<string, Map<string, Family>>();
  for (let i = 0; i < 20 && seen.size < 2; i++) {
    const s = await scrape(true);
    seen.set(s.by, s.families);
  }
  assert.equal(seen.size, 2, 'both workers answered a scrape');
  for (const [by, families] of seen) {
    const after = { families };
    assert.equal(counts(after, 'claim') - counts(before, 'claim'), claims, `claims, scrape by ${by}`);
    assert.equal(counts(after, 'job_result') - counts(before, 'job_result'), 1, by);
    assert.equal(counts(after, 'job_results') - counts(before, 'job_results'), 2, by);
    assert.equal(counts(after, 'next') - counts(before, 'next'), 1, by);
    const claim = histogramTotals(families, 'queue_keeper_request_duration_seconds', { endpoint: 'claim' });
    assert.ok(
      claim.sum > 0 && claim.sum / claim.count < 5,
      `a claim takes ${claim.sum / claim.count} s on average`,
    );
  }
});

test('keeper publish and load durations are observed in seconds', async () => {
  const { families } = await scrape();
  const publish = histogramTotals(families, 'queue_keeper_keeper_publish_duration_seconds');
  assert.ok(publish.count > 0, 'publishes were observed');
  assert.ok(publish.sum / publish.count < 1, `a publish averages ${publish.sum / publish.count} s, not ms`);
  assert.ok(histogramTotals(families, 'queue_keeper_keeper_load_duration_seconds').count >= 1, 'the load');
  assert.equal(sample(families, 'queue_keeper_keeper_live'), 1);
});

test('per queue: due rows, the oldest due row age in seconds, lateness in cadences and leases held', async () => {
  const now = Date.now();
  await file(
    Array.from({ length: 6 }, (_, i) => ({ url: `https://q.example.com/late/${i}`, dueAt: now - 2 * HOUR })),
  );
  const { jobs } = await until('two late rows claimed', async () => {
    const c = await claim(['late'], 2);
    return c.jobs.length === 2 && c;
  });
  assert.deepEqual(
    jobs.map((j) => j.queue),
    ['late', 'late'],
  );
  const { families } = await until('the state document to show the late queue', async () => {
    const s = await vouchedScrape();
    return sample(s.families, 'queue_keeper_queue_due_rows', { queue: 'late' }) === 6 && s;
  });
  const age = sample(families, 'queue_keeper_queue_oldest_due_age_seconds', { queue: 'late' })!;
  assert.ok(
    age >= 2 * 3600 && age <= 2 * 3600 + 60 + 30,
    `oldest due age ${age} s (due 2 h ago, minute-floored)`,
  );
  const lateness = sample(families, 'queue_keeper_queue_lateness_cadences', { queue: 'late' })!;
  assert.ok(Math.abs(lateness - age / 3600) < 0.05, `lateness ${lateness} cadences of 1 h for ${age} s`);
  assert.equal(sample(families, 'queue_keeper_queue_leases_held', { queue: 'late' }), 2);
  await h.fetch('/render_queue/job_results', { auth: fleet, body: { results: jobs.map(result) } });
});

test('results are counted per queue and outcome on either protocol, with the render times they report', async () => {
  const now = Date.now();
  const url = (x: string) => `https://results.example.com/p/${x}`;
  await file(['a', 'b', 'c', 'd'].map((x) => ({ url: url(x), dueAt: now - MIN })));
  const results = (families: Map<string, Family>, outcome: string) =>
    sample(families, 'queue_keeper_results_total', { queue: 'product', outcome }) ?? NaN;
  const before = await scrape();
  const render0 = histogramTotals(before.families, 'queue_keeper_render_seconds', { queue: 'product' });

  // The token protocol: three rows, three outcomes.
  const jobs: Array<{ id: string; url: string; leaseToken: string }> = [];
  await until('three product rows claimed', async () => {
    jobs.push(...(await claim(['product'], 3 - jobs.length)).jobs);
    return jobs.length === 3;
  });
  const outcomes: Record<string, Record<string, unknown>> = {
    [url('a')]: { outcome: 'rendered', statusCode: 200, body: '<html>a</html>', renderTimeMs: 1200 },
    [url('b')]: { outcome: 'failed', error: { name: 'Timeout', message: 'no load' }, renderTimeMs: 300 },
    [url('c')]: { outcome: 'non-indexable', statusCode: 200 },
  };
  const tokenAnswer = await h.fetch('/render_queue/job_results', {
    auth: fleet,
    body: { results: jobs.map((j) => ({ id: j.id, leaseToken: j.leaseToken, ...outcomes[j.url] })) },
  });
  assert.equal(tokenAnswer.status, 200, tokenAnswer.text);
  // A copy of the same results is a duplicate: counted once.
  await h.fetch('/render_queue/job_results', {
    auth: fleet,
    body: { results: jobs.map((j) => ({ id: j.id, leaseToken: j.leaseToken, ...outcomes[j.url] })) },
  });

  // The prerender protocol: a token-less result from the user and worker id the lease went to.
  const worker = { 'x-worker-id': 'metrics-worker-1' };
  const d = await until('the last product row claimed by a prerender worker', async () => {
    const r = await h.fetch('/render_queue/claim', {
      auth: fleet,
      body: { limit: 1, queues: ['product'] },
      headers: worker,
    });
    return Array.isArray(r.json) && r.json.length === 1
      ? (r.json[0] as { id: string; url: string })
      : undefined;
  });
  assert.equal(d.url, url('d'));
  assert.equal(d.id, key(url('d')), 'the job is the desktop row of its URL');
  const meta = Buffer.from(
    JSON.stringify({ id: d.id, statusCode: 301, redirectedTo: url('a'), renderTime: 2500 }),
  );
  const fleetAnswer = await h.fetch('/render_queue/job_result', {
    auth: fleet,
    rawBody: meta,
    headers: {
      ...worker,
      'content-type': 'application/octet-stream',
      'x-metadata-size': String(meta.length),
    },
  });
  assert.equal(fleetAnswer.status, 204, fleetAnswer.text);
  assert.equal(fleetAnswer.headers['x-result-status'], 'applied');

  for (const fresh of [true, true]) {
    const after = await scrape(fresh);
    const delta = (outcome: string) => results(after.families, outcome) - results(before.families, outcome);
    assert.deepEqual(
      ['rendered', 'redirected', 'non-indexable', 'failed'].map(delta),
      [1, 1, 1, 1],
      `results by outcome, scrape by ${after.by}`,
    );
    const render = histogramTotals(after.families, 'queue_keeper_render_seconds', { queue: 'product' });
    assert.equal(render.count - render0.count, 3, 'three results reported a render time');
    assert.ok(Math.abs(render.sum - render0.sum - 4) < 1e-6, `render seconds ${render.sum - render0.sum}`);
    assert.equal(
      results(after.families, 'rendered') > 0 &&
        sample(after.families, 'queue_keeper_results_total', {
          queue: 'blog',
          outcome: 'failed',
        }),
      0,
      'every configured queue shows every outcome',
    );
  }
});

test('a burst of random URLs, route-less hosts and unknown paths keeps the series to the configured queues', async () => {
  const before = await vouchedScrape();
  const series = (families: Map<string, Family>) =>
    new Set(
      [...families.values()].flatMap((f) => f.samples.map((s) => `${s.name}${JSON.stringify(s.labels)}`)),
    );
  const now = Date.now();
  const rand = () => randomBytes(6).toString('hex');
  await file(
    Array.from({ length: 300 }, (_, i) => ({
      url:
        i % 3 === 0
          ? `https://${rand()}.example.net/p/${rand()}`
          : `https://${rand()}.example.org/${rand()}/${encodeURIComponent('queue="x"')}`,
      dueAt: now - MIN,
    })),
  );
  for (let i = 0; i < 20; i++) {
    const c = await claim([], 10, true);
    if (c.jobs.length)
      await h.fetch('/render_queue/job_results', { auth: fleet, body: { results: c.jobs.map(result) } });
    await h.fetch(`/render_queue/${rand()}`, { auth: fleet, body: {} });
    await h.fetch('/render_queue/claim', { auth: fleet, body: { limit: 1, queues: [rand()] } });
  }
  const afterBurst = await vouchedScrape();
  for (const f of afterBurst.families.values()) {
    const queues = labelValues(afterBurst.families, f.name, 'queue');
    for (const q of queues) assert.ok(QUEUES.includes(q), `${f.name}{queue="${q}"}`);
    for (const e of labelValues(afterBurst.families, f.name, 'endpoint'))
      assert.ok(['claim', 'job_result', 'job_results', 'next'].includes(e), `${f.name}{endpoint="${e}"}`);
  }
  assert.deepEqual(
    [...series(afterBurst.families)].filter((s) => !series(before.families).has(s)),
    [],
    'no new series',
  );
  assert.ok(labelValues(afterBurst.families, 'queue_keeper_queue_due_rows', 'queue').has('unrouted'));
});

test('the same figures are recorded to Harper analytics under queue_health', async () => {
  const wanted = [
    'queue_health.queue_keeper_claim_granted_total|',
    'queue_health.queue_keeper_request_duration_seconds|claim',
    'queue_health.queue_keeper_keeper_publish_duration_seconds|',
    'queue_health.queue_keeper_queue_due_rows|late',
    'queue_health.queue_keeper_lease_occupancy_ratio|',
  ];
  await until(
    'the analytics entries',
    async () => {
      const rows = (await h.operation({
        operation: 'search_by_conditions',
        database: 'system',
        table: 'hdb_raw_analytics',
        conditions: [{ search_attribute: 'id', search_type: 'greater_than', search_value: 0 }],
        get_attributes: ['metrics'],
      })) as Array<{ metrics?: Array<{ metric: string; path?: string }> }>;
      const seen = new Set(rows.flatMap((r) => (r.metrics ?? []).map((m) => `${m.metric}|${m.path ?? ''}`)));
      return wanted.every((w) => seen.has(w));
    },
    20_000,
    500,
  );
});
