// The operator assets in ops/: the Grafana dashboard is valid JSON that Grafana can import (a data-source
// input, unique panel ids) and the alert rules are valid Prometheus rule YAML; every query and expression
// names only series the catalogue defines, so a rename cannot leave a dashboard or an alert silently empty.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { seriesNames } from '../../util/metrics/catalogue.js';
import { repoRoot } from '../harness.js';

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan']);

/**
 * The metric names a PromQL expression selects: identifiers left after dropping string literals, label
 * matchers, range and subquery brackets and the label lists of by/without/on/ignoring/group_*, that are
 * not function calls or keywords.
 */
export function promqlMetricNames(expr: string): string[] {
  let s = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  s = s.replace(/\{[^}]*\}/g, ' ');
  s = s.replace(/\[[^\]]*\]/g, ' ');
  s = s.replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names: string[] = [];
  for (const m of s.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const before = s[m.index - 1] ?? ' ';
    if (/[0-9.]/.test(before)) continue; // the exponent or unit of a number (1e3, 5m)
    if (/^\s*\(/.test(s.slice(m.index + m[0].length))) continue; // a function
    if (KEYWORDS.has(m[0].toLowerCase())) continue;
    names.push(m[0]);
  }
  return names;
}

const known = seriesNames();

function checkNames(where: string, expr: string): string[] {
  const names = promqlMetricNames(expr);
  assert.ok(names.length > 0, `${where} selects a series: ${expr}`);
  for (const n of names) assert.ok(known.has(n), `${where} names ${n}, which the catalogue does not define`);
  return names;
}

test('the PromQL name reader finds selected series and nothing else', () => {
  assert.deepEqual(
    promqlMetricNames(
      'histogram_quantile(0.99, sum by (le, endpoint) (rate(a_bucket{endpoint=~"claim|next", x="by (y)"}[$__rate_interval]))) > 1e3 and on(instance) b offset 5m',
    ),
    ['a_bucket', 'b'],
  );
  assert.deepEqual(promqlMetricNames('absent(x) or increase(y[1h]) >= 3'), ['x', 'y']);
});

interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type: string; uid: string };
  targets?: Array<{ expr: string; refId: string }>;
  panels?: Panel[];
}

test('the Grafana dashboard is importable JSON and every query names only catalogue series', () => {
  const text = readFileSync(join(repoRoot, 'ops', 'grafana-dashboard.json'), 'utf8');
  const dash = JSON.parse(text) as {
    __inputs: Array<{ name: string; type: string; pluginId: string }>;
    uid: string;
    title: string;
    schemaVersion: number;
    panels: Panel[];
    templating: { list: Array<{ name: string; query: { query: string } }> };
  };
  assert.deepEqual(
    dash.__inputs.map((i) => [i.name, i.type, i.pluginId]),
    [['DS_PROMETHEUS', 'datasource', 'prometheus']],
    'import asks for the Prometheus data source',
  );
  assert.ok(dash.uid && dash.title && dash.schemaVersion >= 30);
  const panels = dash.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
  const ids = panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, 'panel ids are unique');

  const used = new Set<string>();
  const exprs: string[] = [];
  for (const p of panels) {
    if (p.type === 'row') continue;
    assert.ok(['timeseries', 'stat'].includes(p.type), `${p.title}: ${p.type}`);
    assert.equal(p.datasource?.uid, '${DS_PROMETHEUS}', `${p.title} uses the imported data source`);
    assert.ok(p.targets?.length, `${p.title} has queries`);
    const refs = p.targets!.map((t) => t.refId);
    assert.equal(new Set(refs).size, refs.length, `${p.title} refIds are unique`);
    for (const t of p.targets!) {
      for (const n of checkNames(p.title, t.expr)) used.add(n);
      exprs.push(t.expr);
      if (t.expr.includes('histogram_quantile'))
        assert.match(
          t.expr,
          /histogram_quantile\(0?\.\d+, sum by \(le[,)].*_bucket\{/,
          `${p.title}: ${t.expr}`,
        );
    }
  }
  for (const v of dash.templating.list) {
    const m = /^label_values\(([a-z_]+), ([a-z_]+)\)$/.exec(v.query.query);
    assert.ok(m, `variable ${v.name}: ${v.query.query}`);
    assert.ok(known.has(m[1]!), `variable ${v.name} reads ${m[1]}`);
  }
  // What the dashboard is for (docs/monitoring.md): due, unclaimed and in flight, lateness per queue, claim and
  // result latency percentiles, lease occupancy, keeper trust, notify health and stall nudges.
  for (const n of [
    'queue_keeper_due_rows',
    'queue_keeper_unclaimed_rows',
    'queue_keeper_leases_held',
    'queue_keeper_queue_lateness_cadences',
    'queue_keeper_request_duration_seconds_bucket',
    'queue_keeper_lease_occupancy_ratio',
    'queue_keeper_keeper_live',
    'queue_keeper_keeper_exact',
    'queue_keeper_notify_delivered_total',
    'queue_keeper_notify_failed_total',
    'queue_keeper_notify_hooks_disabled_total',
    'queue_keeper_stall_nudges_total',
    'queue_keeper_results_total',
    'queue_keeper_render_seconds_bucket',
  ])
    assert.ok(used.has(n), `the dashboard shows ${n}`);
  assert.ok(exprs.some((e) => /endpoint=~"claim\|next"/.test(e) && e.includes('histogram_quantile(0.99')));
  assert.ok(
    exprs.some((e) => /endpoint=~"job_result\|job_results"/.test(e) && e.includes('histogram_quantile(0.99')),
  );
});

interface Rule {
  alert?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

test('the alert rules are valid rule YAML with sensible for: and name only catalogue series', () => {
  const path = join(repoRoot, 'ops', 'alerts.yml');
  const doc = parseYaml(readFileSync(path, 'utf8')) as { groups: Array<{ name: string; rules: Rule[] }> };
  assert.ok(Array.isArray(doc.groups) && doc.groups.length > 0);
  const byAlert = new Map<string, Rule>();
  for (const g of doc.groups) {
    assert.ok(g.name, 'a group has a name');
    for (const r of g.rules) {
      assert.ok(r.alert && /^[A-Z][A-Za-z0-9]+$/.test(r.alert), `alert name ${r.alert}`);
      assert.ok(!byAlert.has(r.alert), `${r.alert} once`);
      assert.match(r.for ?? '', /^\d+[smh]$/, `${r.alert} has a for: duration`);
      assert.ok(['critical', 'warning', 'info'].includes(r.labels?.severity ?? ''), `${r.alert} severity`);
      assert.ok(r.annotations?.summary && r.annotations.description, `${r.alert} says what happened`);
      checkNames(r.alert, r.expr);
      byAlert.set(r.alert, r);
    }
  }
  const names = (alert: string) => promqlMetricNames(byAlert.get(alert)?.expr ?? '');
  assert.deepEqual(names('QueueKeeperNotLive'), ['queue_keeper_keeper_live']);
  assert.deepEqual(names('QueueKeeperQueueLate'), ['queue_keeper_queue_lateness_cadences']);
  assert.match(
    byAlert.get('QueueKeeperLeaseTableNearlyFull')!.expr,
    /^queue_keeper_lease_occupancy_ratio > 0\.9$/,
  );
  assert.deepEqual(names('QueueKeeperHooksAutoDisabled'), ['queue_keeper_notify_hooks_disabled_total']);
  assert.deepEqual(names('QueueKeeperStallNudgesRising'), ['queue_keeper_stall_nudges_total']);
  // A failure ratio per queue: failed results over all results, by queue.
  const failures = byAlert.get('QueueKeeperRenderFailures')?.expr ?? '';
  assert.ok(names('QueueKeeperRenderFailures').every((n) => n === 'queue_keeper_results_total'));
  assert.match(failures, /outcome="failed"/);
  assert.match(failures, /by \(instance, queue\)/);
  const minutes = (d: string) =>
    Number(d.slice(0, -1)) * { s: 1 / 60, m: 1, h: 60 }[d.at(-1) as 's' | 'm' | 'h'];
  assert.ok(minutes(byAlert.get('QueueKeeperNotLive')!.for!) >= 2, 'a restart load does not page');
  // promtool itself when this machine has it (Debian's `prometheus` package).
  const promtool = spawnSync('promtool', ['check', 'rules', path], { encoding: 'utf8' });
  if (!promtool.error) assert.equal(promtool.status, 0, promtool.stdout + promtool.stderr);
});
