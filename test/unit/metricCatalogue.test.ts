// The catalogue is the only source of metric names: every name the code emits is declared there, and
// every series SPEC §5 names is in it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { METRICS } from '../../util/metricCatalogue.js';
import { repoRoot } from '../harness.js';

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? sources(p) : name.endsWith('.ts') ? [p] : [];
  });
}

/** Every metric name passed to an emitting call: count('x'), gauge('x'), metric?.('x'), deps.count('x'). */
function emitted(): Array<{ file: string; name: string }> {
  const out: Array<{ file: string; name: string }> = [];
  const call = /\b(?:count|gauge|metric\??\.?)\(\s*'([a-z_]+)'/g;
  for (const file of [...sources(join(repoRoot, 'services')), join(repoRoot, 'resources.ts')]) {
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

test('every series SPEC §5 names is in the catalogue', () => {
  const spec = [
    'keeper_load_ms',
    'keeper_publish_ms',
    'keeper_verify_ms',
    'keeper_repaired',
    'keeper_live',
    'claim_granted',
    'claim_stale',
    'claim_wedged',
    'lease_occupancy',
    'overdue',
    'notify_delivered',
    'notify_failed',
    'notify_dropped',
    'notify_disabled',
    'stall_nudges_total',
  ];
  for (const name of spec) assert.ok(name in METRICS, name);
  assert.deepEqual((METRICS.stall_nudges_total as { labels?: readonly string[] }).labels, ['queue']);
});
