// The catalogue is the only source of metric names: every key the code emits is declared there, every
// series operators rely on (the required list below) is in it, and a scrape of all of it passes the rules promtool checks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { catalogueExposition, labelledSeriesKey, type LiveFigures } from '../../util/metrics/exposition.js';
import {
  METRICS,
  RENDER_BUCKETS,
  REQUEST_ENDPOINTS,
  type MetricDef,
  type MetricName,
} from '../../util/metrics/catalogue.js';
import { MetricStore } from '../../util/metrics/store.js';
import { QueueResults } from '../../util/metrics/queueResults.js';
import { repoRoot } from '../harness.js';
import { sourceFiles } from '../sourceFiles.js';
import { lintExposition, parseExposition } from '../promLint.js';

const CATALOGUE: Readonly<Record<string, MetricDef>> = METRICS;

/** Every metric key passed to an emitting call: count('x'), gauge('x'), observe('x'), metric?.('x'). */
function emitted(): Array<{ file: string; name: string }> {
  const out: Array<{ file: string; name: string }> = [];
  const call = /\b(?:count|gauge|observe|record|metric\??\.?)\(\s*'([a-z_]+)'/g;
  for (const file of [...sourceFiles(join(repoRoot, 'services')), join(repoRoot, 'resources.ts')]) {
    for (const m of readFileSync(file, 'utf8').matchAll(call))
      out.push({ file: relative(repoRoot, file), name: m[1]! });
  }
  return out;
}

test('every metric the code emits is declared in the catalogue', () => {
  const names = emitted();
  assert.ok(names.length >= 10, `the scan finds the emitting calls (found ${names.length})`);
  const unknown = names.filter((e) => !(e.name in METRICS));
  assert.deepEqual(unknown, []);
});

test('every endpoint whose duration is measured is one of the closed endpoint list', () => {
  const text = readFileSync(join(repoRoot, 'services', 'http', 'routes', 'queue.ts'), 'utf8');
  const timed = [...text.matchAll(/\btimed\('([a-z_]+)',/g)].map((m) => m[1]);
  assert.deepEqual(timed.sort(), [...REQUEST_ENDPOINTS].sort());
});

test('every required series is in the catalogue, with the kind and labels it needs', () => {
  const spec: Record<string, [MetricDef['kind'], string[]?]> = {
    queue_keeper_keeper_live: ['gauge'],
    queue_keeper_keeper_load_duration_seconds: ['histogram'],
    queue_keeper_keeper_publish_duration_seconds: ['histogram'],
    queue_keeper_keeper_verify_duration_seconds: ['histogram'],
    queue_keeper_keeper_rows: ['gauge'],
    queue_keeper_keeper_rows_repaired_total: ['counter'],
    queue_keeper_claim_granted_total: ['counter'],
    queue_keeper_claim_stale_total: ['counter'],
    queue_keeper_claim_wedged_total: ['counter'],
    queue_keeper_request_duration_seconds: ['histogram', ['endpoint']],
    queue_keeper_lease_occupancy_ratio: ['gauge'],
    queue_keeper_queue_due_rows: ['gauge', ['queue']],
    queue_keeper_queue_oldest_due_age_seconds: ['gauge', ['queue']],
    queue_keeper_queue_lateness_cadences: ['gauge', ['queue']],
    queue_keeper_queue_leases_held: ['gauge', ['queue']],
    queue_keeper_notify_delivered_total: ['counter'],
    queue_keeper_notify_failed_total: ['counter'],
    queue_keeper_notify_dropped_total: ['counter'],
    queue_keeper_notify_hooks_disabled_total: ['counter'],
    queue_keeper_stall_nudges_total: ['counter', ['queue']],
    queue_keeper_results_total: ['counter', ['queue', 'outcome']],
    queue_keeper_render_seconds: ['histogram', ['queue']],
  };
  const byName = new Map(Object.values(CATALOGUE).map((d) => [d.name, d]));
  assert.equal(byName.size, Object.keys(CATALOGUE).length, 'no two keys share an exposition name');
  for (const [name, [kind, labels]] of Object.entries(spec)) {
    const def = byName.get(name);
    assert.ok(def, name);
    assert.equal(def.kind, kind, name);
    assert.deepEqual([...(def.labels ?? [])], labels ?? [], name);
  }
});

test('histogram buckets cover the measured ranges (bench/README.md)', () => {
  const covers = (key: MetricName, lo: number, hi: number) => {
    const b = (CATALOGUE[key]!.buckets ?? []) as readonly number[];
    assert.ok(b[0]! <= lo && b.at(-1)! >= hi, `${key} buckets ${b.join(',')} span ${lo}..${hi}`);
    assert.ok(b.filter((x) => x >= lo && x <= hi).length >= 5, `${key} resolves ${lo}..${hi}`);
  };
  covers('request_ms', 0.001, 0.5);
  covers('keeper_publish_ms', 0.001, 0.03);
  covers('keeper_load_ms', 1, 60);
  covers('keeper_verify_ms', 1, 60);
});

/** A scrape with every family filled: counters, labelled counters, histograms and live readings. */
function fullScrape(): string {
  const cells = new MetricStore(new ArrayBuffer(MetricStore.wordsFor(CATALOGUE) * 8), CATALOGUE);
  const live: LiveFigures = {};
  const labelled: Array<{ key: string; value: number }> = [];
  for (const [key, def] of Object.entries(CATALOGUE) as Array<[MetricName, MetricDef]>) {
    if (def.kind === 'histogram' && def.live) {
      const results = new QueueResults(
        new ArrayBuffer(QueueResults.byteLength(4, RENDER_BUCKETS)),
        RENDER_BUCKETS,
      );
      for (const ms of [120, 2500, 700_000]) results.record('product', 'rendered', ms);
      live[key] = { histograms: results.read(['product', 'unrouted']).renderSeconds };
    } else if (def.kind === 'histogram') {
      for (const endpoint of def.labelValues?.endpoint ?? [undefined])
        for (const v of [0.0007, 0.02, 3, 700]) cells.observe(key, v, endpoint ? { endpoint } : undefined);
    } else if (def.live) {
      live[key] = def.labelValues?.outcome
        ? [
            { labels: { queue: 'product', outcome: 'failed' }, value: 3 },
            { labels: { queue: 'unrouted', outcome: 'non-indexable' }, value: 0 },
          ]
        : def.labels?.length
          ? [
              { labels: { queue: 'product' }, value: 3 },
              { labels: { queue: 'unrouted' }, value: 0.5 },
            ]
          : 0.25;
    } else if (def.labels?.length) {
      labelled.push({ key: labelledSeriesKey(key, { queue: 'product' }), value: 2 });
    } else if (def.kind === 'counter') cells.add(key, 7);
    else cells.set(key, 1);
  }
  live.due = NaN;
  return catalogueExposition(cells, labelled, live);
}

test('a scrape of the whole catalogue passes the promtool rules: prefix, suffixes, base units, HELP and TYPE', () => {
  const text = fullScrape();
  assert.deepEqual(lintExposition(text), []);
  const families = parseExposition(text);
  assert.equal(families.size, Object.keys(CATALOGUE).length, 'every family declares itself');
  for (const f of families.values()) assert.ok(f.samples.length > 0, `${f.name} has samples`);
  // promtool itself when this machine has it (Debian's `prometheus` package); CI runs the rules above.
  const promtool = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (!promtool.error) {
    assert.equal(promtool.status, 0, promtool.stdout + promtool.stderr);
    assert.equal(promtool.stdout + promtool.stderr, '');
  }
});

test('the lint catches what promtool catches', () => {
  const family = (name: string, type: string, sample = `${name} 1`) =>
    `# HELP ${name} Something.\n# TYPE ${name} ${type}\n${sample}\n`;
  const says = (text: string, re: RegExp) =>
    assert.ok(
      lintExposition(text).some((p) => re.test(p)),
      `${JSON.stringify(text)} → ${lintExposition(text).join('; ')}`,
    );
  says(family('queue_keeper_claim_granted', 'counter'), /_total/);
  says(family('queue_keeper_due_rows_total', 'gauge'), /non-counter/);
  says(family('queue_keeper_publish_ms', 'gauge'), /abbreviated units/);
  says(family('queue_keeper_publish_milliseconds', 'gauge'), /base unit "seconds"/);
  says(family('queue_keeper_publish_duration_seconds', 'gauge'), /histograms in seconds/);
  says(family('claim_granted_total', 'counter'), /start with queue_keeper_/);
  says(family('queue_keeper_leasesHeld', 'gauge'), /snake_case/);
  says(family('queue_keeper_lease_gauge', 'gauge'), /type 'gauge'/);
  says('# TYPE queue_keeper_x_total counter\nqueue_keeper_x_total 1\n', /no help/);
  says('# HELP queue_keeper_x_total X.\nqueue_keeper_x_total 1\n', /no TYPE/);
  says(family('queue_keeper_x_total', 'counter').slice(0, -1), /line feed/);
  says(
    '# HELP queue_keeper_h_seconds H.\n# TYPE queue_keeper_h_seconds histogram\nqueue_keeper_h_seconds_bucket{le="1"} 2\nqueue_keeper_h_seconds_bucket{le="+Inf"} 1\nqueue_keeper_h_seconds_sum 1\nqueue_keeper_h_seconds_count 1\n',
    /cumulative/,
  );
  assert.deepEqual(lintExposition(family('queue_keeper_claim_granted_total', 'counter')), []);
});

test('the Metrics table of docs/monitoring.md lists every family of the catalogue, and no other', () => {
  const page = readFileSync(join(repoRoot, 'docs', 'monitoring.md'), 'utf8');
  const section = page.slice(
    page.indexOf('## Metrics'),
    page.indexOf('\n## ', page.indexOf('## Metrics') + 1),
  );
  const rows = [...section.matchAll(/^\| `(queue_keeper_[a-z_]+)` \| (\w+) \|/gm)].map((m) => [m[1], m[2]]);
  assert.deepEqual(
    rows,
    Object.values(CATALOGUE).map((d) => [d.name, d.kind]),
  );
});
