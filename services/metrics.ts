// The one metric catalogue (SPEC §5): name, kind, unit and help of every series. Counters are
// cumulative per node: each lives in a slot of a process-wide shared buffer, so an increment on any
// worker shows in a scrape answered by any other. Every value is also recorded to Harper analytics.
import { server } from './harper.js';
import { sharedBuffer } from './sharedMemory.js';

export type MetricKind = 'counter' | 'gauge';

export interface MetricDef {
  kind: MetricKind;
  unit: string;
  help: string;
  labels?: readonly string[];
}

export const METRICS = {
  keeper_load_ms: { kind: 'gauge', unit: 'ms', help: 'Duration of the last keeper load from the table.' },
  keeper_publish_ms: {
    kind: 'gauge',
    unit: 'ms',
    help: 'Duration of the last ready-set publish (top-K and write).',
  },
  keeper_verify_ms: { kind: 'gauge', unit: 'ms', help: 'Duration of the last verification walk.' },
  keeper_repaired: {
    kind: 'counter',
    unit: 'rows',
    help: 'Rows the keeper held wrongly and repaired (expected 0).',
  },
  keeper_live: { kind: 'gauge', unit: 'bool', help: '1 while the keeper is live and serving.' },
  claim_granted: { kind: 'counter', unit: 'jobs', help: 'Leases granted to fleets.' },
  claim_stale: {
    kind: 'counter',
    unit: 'jobs',
    help: 'Ready entries skipped because the row was no longer due.',
  },
  claim_wedged: {
    kind: 'counter',
    unit: 'jobs',
    help: 'Keys held instead of granted after repeated unreported leases.',
  },
  lease_occupancy: { kind: 'gauge', unit: 'leases', help: 'Live leases in the lease table.' },
  overdue: { kind: 'gauge', unit: 'rows', help: 'Due rows not in flight (now.unclaimed).' },
  notify_delivered: { kind: 'counter', unit: 'deliveries', help: 'Webhook deliveries answered with 2xx.' },
  notify_failed: {
    kind: 'counter',
    unit: 'deliveries',
    help: 'Webhook deliveries that failed every attempt.',
  },
  notify_dropped: {
    kind: 'counter',
    unit: 'deliveries',
    help: 'Webhook deliveries dropped because the queue was full.',
  },
  notify_disabled: { kind: 'counter', unit: 'hooks', help: 'Hooks auto-disabled after repeated failures.' },
  stall_nudges_total: {
    kind: 'counter',
    unit: 'nudges',
    help: 'Stalled-queue wakes fired.',
    labels: ['queue'],
  },
} as const satisfies Record<string, MetricDef>;

export type MetricName = keyof typeof METRICS;
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

// Labelled series are kept per worker: the only labelled one (stall_nudges_total) is written by
// worker 0's sweep alone.
const labelled = new Map<string, number>();

export function count(name: MetricName, n = 1, labels?: Record<string, string>): void {
  if (n === 0) return;
  if (labels) {
    const key = `${name}${JSON.stringify(labels)}`;
    labelled.set(key, (labelled.get(key) ?? 0) + n);
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
  for (const [key, value] of labelled) {
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
