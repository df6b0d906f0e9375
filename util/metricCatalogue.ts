// The one metric catalogue (SPEC §5): name, kind, unit, help and labels of every series. Both outputs —
// Harper analytics under `queue_health` and the Prometheus exposition — are produced from it, and a
// unit test fails if code emits a name it does not declare. Pure, so tests can read it without Harper.

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
