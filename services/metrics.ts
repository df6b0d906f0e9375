// Metric values for the catalogue in util/metricCatalogue.ts. Counters are cumulative per node: each lives in a slot of a process-wide shared buffer, so an increment on any
// worker shows in a scrape answered by any other. Every value is also recorded to Harper analytics.
import { LabelledCounters } from '../util/labelledCounters.js';
import { exposition } from '../util/prometheus.js';
import { log, server } from './harper.js';
import { sharedBuffer } from './sharedMemory.js';
import { METRICS, type MetricDef, type MetricName } from '../util/metricCatalogue.js';

export { METRICS, type MetricDef, type MetricName };

const NAMES = Object.keys(METRICS) as MetricName[];
const INDEX = new Map(NAMES.map((n, i) => [n, i]));

let slots: BigInt64Array | undefined;
let gauges: Float64Array | undefined;
function counterSlots(): BigInt64Array {
  slots ??= new BigInt64Array(sharedBuffer('metrics:counters', 8 * 64).buffer, 0, 64);
  return slots;
}
function gaugeSlots(): Float64Array {
  gauges ??= new Float64Array(sharedBuffer('metrics:gauges', 8 * 64).buffer, 0, 64);
  return gauges;
}

// Labelled series live in their own shared table (one slot per series), cross-worker like the rest.
const LABELLED_SERIES = 64;
let labelled: LabelledCounters | undefined;
let labelledFullWarned = false;
function labelledCounters(): LabelledCounters {
  labelled ??= new LabelledCounters(
    sharedBuffer('metrics:labelled', LabelledCounters.byteLength(LABELLED_SERIES)).buffer,
  );
  return labelled;
}

export function count(name: MetricName, n = 1, labels?: Record<string, string>): void {
  if (n === 0) return;
  if (labels) {
    if (!labelledCounters().add(`${name}${JSON.stringify(labels)}`, n) && !labelledFullWarned) {
      labelledFullWarned = true;
      log.warn(
        `metrics: no room for series ${name}${JSON.stringify(labels)} (${LABELLED_SERIES} labelled series at most)`,
      );
    }
  } else {
    Atomics.add(counterSlots(), INDEX.get(name)!, BigInt(n));
  }
  server.recordAnalytics?.(n, `queue_health.${name}`);
}

export function gauge(name: MetricName, value: number): void {
  gaugeSlots()[INDEX.get(name)!] = value;
  server.recordAnalytics?.(value, `queue_health.${name}`);
}

export interface MetricSample {
  name: MetricName;
  def: MetricDef;
  value: number;
  labels?: Record<string, string>;
}

/** Every sample this node can report (counters cumulative since the process started). */
export function samples(): MetricSample[] {
  const out: MetricSample[] = [];
  for (const name of NAMES) {
    const def: MetricDef = METRICS[name];
    if ('labels' in def && def.labels) continue;
    const i = INDEX.get(name)!;
    out.push({
      name,
      def,
      value: def.kind === 'counter' ? Number(Atomics.load(counterSlots(), i)) : gaugeSlots()[i]!,
    });
  }
  for (const { key, value } of labelledCounters().entries()) {
    const at = key.indexOf('{');
    const name = key.slice(0, at) as MetricName;
    out.push({
      name,
      def: METRICS[name],
      value,
      labels: JSON.parse(key.slice(at)) as Record<string, string>,
    });
  }
  return out;
}

/**
 * The Prometheus exposition of every catalogue entry, in catalogue order. `live` replaces a gauge's last
 * recorded value with a reading taken for this scrape (lease scan, keeper signal, state document).
 */
export function metricsText(live: Partial<Record<MetricName, number>> = {}): string {
  const all = samples();
  return exposition(
    NAMES.map((name) => {
      const def: MetricDef = METRICS[name];
      const own = all.filter((s) => s.name === name);
      const value = live[name];
      return {
        name,
        kind: def.kind,
        help: def.help,
        unit: def.unit,
        samples:
          value !== undefined
            ? [{ value }]
            : own.map((s) => ({ value: s.value, ...(s.labels ? { labels: s.labels } : {}) })),
      };
    }),
  );
}
