// The one metric catalogue: name, kind, unit, help and labels of every series. Both outputs —
// Harper analytics under `queue_health` and the Prometheus exposition — are produced from it, and a
// unit test fails if code emits a key it does not declare. Pure, so tests can read it without Harper.
//
// Each entry's key is the short name call sites pass (`count('claim_granted')`, `metric?.('keeper_publish_ms',
// ms)`); `name` is what an operator sees. Keys stay stable so call sites never change with a rename;
// names follow Prometheus naming (`promtool check metrics` clean): the `queue_keeper_` prefix, `_total`
// on counters, durations as histograms in seconds, ratios in `_ratio`.

export type MetricKind = 'counter' | 'gauge' | 'histogram';

export interface MetricDef {
  /** The exposition name, and the Harper analytics metric `queue_health.<name>`. */
  name: string;
  kind: MetricKind;
  /** Unit of the exposed value (a base unit: seconds, ratio, rows …), named in HELP. */
  unit: string;
  help: string;
  labels?: readonly string[];
  /** A label whose values the code chooses from a closed list (never from what a caller sends). */
  labelValues?: Readonly<Record<string, readonly string[]>>;
  /** Factor from what a call site passes to the exposed unit: 0.001 for a duration measured in ms. */
  scale?: number;
  /** Histogram upper bounds in the exposed unit, ascending; `+Inf` is implied. */
  buckets?: readonly number[];
  /**
   * Read at scrape time (lease table, state document, keeper signal, the per-queue results of
   * util/metrics/queueResults.ts) rather than kept in the cells of util/metrics/store.ts.
   */
  live?: true;
}

/** Values of the `endpoint` label: the fleet endpoints whose handler time is measured. */
export const REQUEST_ENDPOINTS = ['claim', 'job_result', 'job_results', 'next'] as const;
export type RequestEndpoint = (typeof REQUEST_ENDPOINTS)[number];
/** Values of the `reason` label of retirements (util/schedule/rowState.ts RETIRE_REASONS). */
export const RETIRED_REASONS = ['redirect', 'redirect-strikes', 'suppressed', 'gone'] as const;
/** Values of the `cause` label: what took up rows this node owned that no keeper held. */
export const RECOVERY_CAUSES = ['membership', 'verification'] as const;
/** Values of the `result` label: the `x-result-status` answers of a prerender fleet's result. */
export const PRERENDER_RESULTS = [
  'applied',
  'duplicate',
  'superseded',
  'unknown_job',
  'too_large',
  'undecodable',
] as const;

/**
 * Values of the `outcome` label of queue_keeper_results_total: the outcomes a result reports on either
 * protocol (a prerender fleet's `error` is `failed`). A new outcome is added here, never taken from input.
 */
export const RESULT_OUTCOMES = ['rendered', 'redirected', 'non-indexable', 'failed'] as const;
export type ResultOutcome = (typeof RESULT_OUTCOMES)[number];
/** Values of the sitemap URL counter's `result` label: what a walk did with each URL (docs/sitemaps.md). */
export const SITEMAP_URL_RESULTS = [
  'filed',
  'linked',
  'updated',
  'changed',
  'unchanged',
  'other_sitemap',
  'rejected',
  'retired',
  'removed',
] as const;
/** Values of the sitemap fetch counter's `result` label: a file read, reused (304), or why it was refused. */
export const SITEMAP_FETCH_RESULTS = [
  'fetched',
  'not_modified',
  'file_too_large',
  'too_many_urls',
  'root_url_limit',
  'root_file_limit',
  'depth',
  'cycle',
  'off_host',
  'address_refused',
  'http_refused',
  'too_many_redirects',
  'timeout',
  'http_status',
  'network',
  'malformed',
  'not_a_sitemap',
  'removal_share',
] as const;
/** Values of the `result` label of the served pages (docs/serving.md): what a /p/ request was answered. */
export const SERVED_RESULTS = [
  'hit',
  'stale',
  'not_modified',
  'origin',
  'rendered',
  'not_found',
  'error',
] as const;

// Buckets from bench/README.md. Claim and result handlers take ~1–50 ms on an idle node and a few
// hundred ms at the p99 of a 24-client drain; a job_results of 100 writes is the long tail, so the top
// finite bucket is 5 s.
const REQUEST_BUCKETS: readonly number[] = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
];
// A publish is ~1 ms with few rows and 7–30 ms (p50–p99) with 300k due of 1M held.
const PUBLISH_BUCKETS: readonly number[] = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1,
];
// Load and verification walk the table: milliseconds when empty, 4 s at 250k rows, 18 s at 1M, a
// minute or more on a loaded machine or a bigger table.
const WALK_BUCKETS: readonly number[] = [0.01, 0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600];
// A headless browser renders a page in about 1–10 s; a slow page, or one that waits for its network to
// settle, takes up to a minute, and a render is cut off by its lease (queue.jobLeaseTime, 5 min at most
// by default).
export const RENDER_BUCKETS: readonly number[] = [0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120, 300];

// A hit is a point read or two and a write of tens of KB: well under a millisecond idle, a few ms under
// load; an origin fetch or a render-now wait takes seconds (the wait is capped at 30 s by default).
const SERVE_BUCKETS: readonly number[] = [
  0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 30,
];

export const METRICS = {
  keeper_live: {
    name: 'queue_keeper_keeper_live',
    kind: 'gauge',
    unit: 'boolean',
    help: "1 while this node's keeper is live and serving claims, else 0.",
  },
  keeper_exact: {
    name: 'queue_keeper_keeper_exact',
    kind: 'gauge',
    unit: 'boolean',
    help: '1 while the keeper vouches its counts are exact (live, not resyncing, no partial load, last verification repaired nothing).',
    live: true,
  },
  keeper_rows: {
    name: 'queue_keeper_keeper_rows',
    kind: 'gauge',
    unit: 'rows',
    help: 'Schedule rows the keeper holds in memory.',
    live: true,
  },
  rows_by_state: {
    name: 'queue_keeper_rows',
    kind: 'gauge',
    unit: 'rows',
    help: "Schedule rows of this node by state: the keeper's held rows as active, suppressed or gone, and the rows of devices no longer in render.deviceTypes as orphaned (as the keeper's last load or walk counted them).",
    labels: ['state'],
    labelValues: { state: ['active', 'suppressed', 'gone', 'orphaned'] },
    live: true,
  },
  state_age: {
    name: 'queue_keeper_state_age_seconds',
    kind: 'gauge',
    unit: 'seconds',
    help: 'Age of the queue-state document the per-queue series come from.',
    live: true,
  },
  keeper_load_ms: {
    name: 'queue_keeper_keeper_load_duration_seconds',
    kind: 'histogram',
    unit: 'seconds',
    help: 'Duration of keeper loads from the table.',
    scale: 0.001,
    buckets: WALK_BUCKETS,
  },
  keeper_publish_ms: {
    name: 'queue_keeper_keeper_publish_duration_seconds',
    kind: 'histogram',
    unit: 'seconds',
    help: 'Duration of ready-set publishes (top-K and write).',
    scale: 0.001,
    buckets: PUBLISH_BUCKETS,
  },
  keeper_verify_ms: {
    name: 'queue_keeper_keeper_verify_duration_seconds',
    kind: 'histogram',
    unit: 'seconds',
    help: 'Duration of verification walks of the table.',
    scale: 0.001,
    buckets: WALK_BUCKETS,
  },
  keeper_repaired: {
    name: 'queue_keeper_keeper_rows_repaired_total',
    kind: 'counter',
    unit: 'rows',
    help: 'Rows the keeper held wrongly and repaired (expected 0).',
  },
  keeper_recovered: {
    name: 'queue_keeper_rows_recovered_total',
    kind: 'counter',
    unit: 'rows',
    help: 'Rows this node owned that no keeper held, taken up by the walk once a membership change settled (membership) or by the verification walk (verification); expected 0.',
    labels: ['cause'],
    labelValues: { cause: RECOVERY_CAUSES },
  },
  retired: {
    name: 'queue_keeper_retired_total',
    kind: 'counter',
    unit: 'rows',
    help: 'Rows retired by a render verdict (a permanent redirect, too many redirects, suppressed or gone too often), by reason.',
    labels: ['reason'],
    labelValues: { reason: RETIRED_REASONS },
  },
  replica_repair_rows: {
    name: 'queue_keeper_replica_repair_rows_total',
    kind: 'counter',
    unit: 'rows',
    help: 'Rows replica repair took from a peer or deleted because this node lacked the write (expected 0 outside a join).',
  },
  claim_granted: {
    name: 'queue_keeper_claim_granted_total',
    kind: 'counter',
    unit: 'jobs',
    help: 'Leases granted to fleets.',
  },
  claim_stale: {
    name: 'queue_keeper_claim_stale_total',
    kind: 'counter',
    unit: 'jobs',
    help: 'Ready entries skipped because the row was no longer due.',
  },
  claim_wedged: {
    name: 'queue_keeper_claim_wedged_total',
    kind: 'counter',
    unit: 'jobs',
    help: 'Keys held instead of granted after repeated unreported leases.',
  },
  channel_claims: {
    name: 'queue_keeper_channel_claims_total',
    kind: 'counter',
    unit: 'claims',
    help: 'Claims the persistent channel made for its sockets, granting or not.',
  },
  request_ms: {
    name: 'queue_keeper_request_duration_seconds',
    kind: 'histogram',
    unit: 'seconds',
    help: 'Handler time of fleet claim and result requests, by endpoint.',
    labels: ['endpoint'],
    labelValues: { endpoint: REQUEST_ENDPOINTS },
    scale: 0.001,
    buckets: REQUEST_BUCKETS,
  },
  leases_held: {
    name: 'queue_keeper_leases_held',
    kind: 'gauge',
    unit: 'leases',
    help: 'Live leases in the lease table (jobs in flight).',
    live: true,
  },
  lease_capacity: {
    name: 'queue_keeper_lease_capacity',
    kind: 'gauge',
    unit: 'leases',
    help: 'Leases the lease table can hold (queue.maxLeases).',
    live: true,
  },
  lease_occupancy: {
    name: 'queue_keeper_lease_occupancy_ratio',
    kind: 'gauge',
    unit: 'ratio',
    help: 'Live leases over lease capacity (0 to 1).',
    live: true,
  },
  due: {
    name: 'queue_keeper_due_rows',
    kind: 'gauge',
    unit: 'rows',
    help: 'Due rows (now.due); NaN while the keeper cannot vouch for its numbers.',
    live: true,
  },
  overdue: {
    name: 'queue_keeper_unclaimed_rows',
    kind: 'gauge',
    unit: 'rows',
    help: 'Due rows not in flight (now.unclaimed); NaN while the keeper cannot vouch for its numbers.',
    live: true,
  },
  queue_due: {
    name: 'queue_keeper_queue_due_rows',
    kind: 'gauge',
    unit: 'rows',
    help: 'Due rows per queue.',
    labels: ['queue'],
    live: true,
  },
  queue_oldest_due_age: {
    name: 'queue_keeper_queue_oldest_due_age_seconds',
    kind: 'gauge',
    unit: 'seconds',
    help: 'How long the oldest due row of the queue has been due (0 when none is due).',
    labels: ['queue'],
    live: true,
  },
  queue_lateness: {
    name: 'queue_keeper_queue_lateness_cadences',
    kind: 'gauge',
    unit: 'cadences',
    help: "Lateness of the queue's worst due row, in its cadences (0 when none is due).",
    labels: ['queue'],
    live: true,
  },
  queue_leases: {
    name: 'queue_keeper_queue_leases_held',
    kind: 'gauge',
    unit: 'leases',
    help: 'Live leases per queue.',
    labels: ['queue'],
    live: true,
  },
  notify_delivered: {
    name: 'queue_keeper_notify_delivered_total',
    kind: 'counter',
    unit: 'deliveries',
    help: 'Webhook deliveries answered with 2xx.',
  },
  notify_failed: {
    name: 'queue_keeper_notify_failed_total',
    kind: 'counter',
    unit: 'deliveries',
    help: 'Webhook deliveries that failed every attempt.',
  },
  notify_dropped: {
    name: 'queue_keeper_notify_dropped_total',
    kind: 'counter',
    unit: 'deliveries',
    help: 'Webhook deliveries dropped because the queue was full.',
  },
  notify_disabled: {
    name: 'queue_keeper_notify_hooks_disabled_total',
    kind: 'counter',
    unit: 'hooks',
    help: 'Hooks auto-disabled after repeated failures.',
  },
  prerender_results: {
    name: 'queue_keeper_prerender_results_total',
    kind: 'counter',
    unit: 'results',
    help: "Prerender fleets' results (no lease token), by the x-result-status they were answered with.",
    labels: ['result'],
    labelValues: { result: PRERENDER_RESULTS },
  },
  prerender_ignored_fields: {
    name: 'queue_keeper_prerender_ignored_fields_total',
    kind: 'counter',
    unit: 'fields',
    help: "Unknown metadata fields in prerender fleets' results, ignored (a newer fleet's).",
  },
  results: {
    name: 'queue_keeper_results_total',
    kind: 'counter',
    unit: 'results',
    help: 'Results applied to their rows, per queue and outcome, on either protocol (a duplicate, a superseded result or one for a deleted row is not counted).',
    labels: ['queue', 'outcome'],
    labelValues: { outcome: RESULT_OUTCOMES },
    live: true,
  },
  render_seconds: {
    name: 'queue_keeper_render_seconds',
    kind: 'histogram',
    unit: 'seconds',
    help: "Render time the fleets reported with their applied results (renderTimeMs, or a prerender fleet's renderTime), per queue.",
    labels: ['queue'],
    buckets: RENDER_BUCKETS,
    live: true,
  },
  sitemap_urls: {
    name: 'queue_keeper_sitemap_urls_total',
    kind: 'counter',
    unit: 'urls',
    help: 'URLs sitemap walks read, by what the walk did with them.',
    labels: ['result'],
    labelValues: { result: SITEMAP_URL_RESULTS },
  },
  sitemap_fetches: {
    name: 'queue_keeper_sitemap_fetches_total',
    kind: 'counter',
    unit: 'files',
    help: 'Sitemap files, by whether they were read, reused unchanged (304), or refused and why.',
    labels: ['result'],
    labelValues: { result: SITEMAP_FETCH_RESULTS },
  },
  sitemap_walk_ms: {
    name: 'queue_keeper_sitemap_walk_duration_seconds',
    kind: 'histogram',
    unit: 'seconds',
    help: 'Duration of sitemap walks, from the first fetch to the last write.',
    scale: 0.001,
    buckets: WALK_BUCKETS,
  },
  stall_nudges_total: {
    name: 'queue_keeper_stall_nudges_total',
    kind: 'counter',
    unit: 'nudges',
    help: 'Stalled-queue wakes fired, per queue.',
    labels: ['queue'],
  },
  // ---------------------------------------------------------------- serving (GET /p/<url>)
  served: {
    name: 'queue_keeper_served_total',
    kind: 'counter',
    unit: 'requests',
    help: '/p/ requests answered, by result (hit, stale, not_modified, origin, rendered, not_found, error).',
    labels: ['result'],
    labelValues: { result: SERVED_RESULTS },
  },
  served_ms: {
    name: 'queue_keeper_serve_duration_seconds',
    kind: 'histogram',
    unit: 'seconds',
    help: 'Time to answer a /p/ request up to its response head, by result.',
    labels: ['result'],
    labelValues: { result: SERVED_RESULTS },
    scale: 0.001,
    buckets: SERVE_BUCKETS,
  },
} as const satisfies Record<string, MetricDef>;

export type MetricName = keyof typeof METRICS;

/** Every exposition name the catalogue defines, with the series names a histogram adds. */
export function seriesNames(): Set<string> {
  const out = new Set<string>();
  for (const def of Object.values(METRICS) as MetricDef[]) {
    out.add(def.name);
    if (def.kind === 'histogram') for (const s of ['_bucket', '_sum', '_count']) out.add(def.name + s);
  }
  return out;
}
