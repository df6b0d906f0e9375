// Metric values for the catalogue in util/metrics/catalogue.ts. Counters and histograms are cumulative per
// node: their cells live in a process-wide shared buffer (util/metrics/store.ts), so an observation on any
// worker shows in a scrape answered by any other. Every value is also recorded to Harper analytics as
// `queue_health.<name>`, with a label's value as the analytics path.
import { LabelledCounters } from '../../util/metrics/labelledCounters.js';
import { MetricStore } from '../../util/metrics/store.js';
import { catalogueExposition, labelledSeriesKey, type LiveFigures } from '../../util/metrics/exposition.js';
import { log, server } from '../runtime/harper.js';
import { route } from '../http/router.js';
import { sharedBuffer } from '../runtime/sharedBuffers.js';
import {
  METRICS,
  type MetricDef,
  type MetricName,
  type RequestEndpoint,
} from '../../util/metrics/catalogue.js';

export { METRICS, type LiveFigures, type MetricDef, type MetricName };

const CATALOGUE: Readonly<Record<string, MetricDef>> = METRICS;
const NAMES = Object.keys(METRICS) as MetricName[];

let store: MetricStore | undefined;
function cells(): MetricStore {
  store ??= new MetricStore(
    sharedBuffer('metrics:cells', MetricStore.wordsFor(CATALOGUE) * 8).buffer,
    CATALOGUE,
  );
  return store;
}

// Labelled counters live in their own shared table (one slot per series), cross-worker like the rest.
const LABELLED_SERIES = 64;
let labelled: LabelledCounters | undefined;
let labelledFullWarned = false;
function labelledCounters(): LabelledCounters {
  labelled ??= new LabelledCounters(
    sharedBuffer('metrics:labelled', LabelledCounters.byteLength(LABELLED_SERIES)).buffer,
  );
  return labelled;
}

function analytics(def: MetricDef, value: number, labels?: Record<string, string>): void {
  const path = labels ? Object.values(labels).join('/') : undefined;
  server.recordAnalytics?.(value, `queue_health.${def.name}`, path);
}

export function count(name: MetricName, n = 1, labels?: Record<string, string>): void {
  if (n === 0) return;
  const def: MetricDef = METRICS[name];
  if (labels) {
    if (!labelledCounters().add(labelledSeriesKey(name, labels), n) && !labelledFullWarned) {
      labelledFullWarned = true;
      log.warn(
        `metrics: no room for series ${def.name}${JSON.stringify(labels)} (${LABELLED_SERIES} labelled series at most)`,
      );
    }
  } else {
    cells().add(name, n);
  }
  analytics(def, n, labels);
}

export function gauge(name: MetricName, value: number): void {
  cells().set(name, value);
  analytics(METRICS[name], value);
}

/** One histogram observation in the call site's unit (ms for durations; the catalogue scales it). */
export function observe(name: MetricName, value: number, labels?: Record<string, string>): void {
  const def: MetricDef = METRICS[name];
  const scaled = value * (def.scale ?? 1);
  if (cells().observe(name, scaled, labels)) analytics(def, scaled, labels);
}

/** A gauge's new value or a histogram's observation, by the catalogue's kind (the keeper's one hook). */
export function record(name: MetricName, value: number): void {
  if (METRICS[name].kind === 'histogram') observe(name, value);
  else gauge(name, value);
}

/** The handler with its duration observed under `endpoint`, whether it answers or throws. */
export function timed<A extends unknown[], R>(
  endpoint: RequestEndpoint,
  handler: (...args: A) => Promise<R>,
): (...args: A) => Promise<R> {
  const labels = { endpoint };
  return async (...args: A) => {
    const t0 = performance.now();
    try {
      return await handler(...args);
    } finally {
      observe('request_ms', performance.now() - t0, labels);
    }
  };
}

/** `route` with the handler's duration observed under `endpoint` (one histogram series per endpoint). */
export function timedRoute(
  endpoint: RequestEndpoint,
  ...[method, path, caller, handler, opts]: Parameters<typeof route>
): void {
  route(method, path, caller, timed(endpoint, handler), opts);
}

/**
 * The Prometheus exposition of every catalogue entry, in catalogue order. `live` gives the readings
 * taken for this scrape (lease scan, keeper signal, state document).
 */
export function metricsText(live: LiveFigures = {}): string {
  return catalogueExposition(cells(), labelledCounters().entries(), live);
}

/** Records the live readings to Harper analytics (the counters and histograms record as they happen). */
export function recordLive(live: LiveFigures): number {
  let recorded = 0;
  for (const name of NAMES) {
    const value = live[name];
    if (value === undefined) continue;
    const def: MetricDef = METRICS[name];
    for (const s of typeof value === 'number' ? [{ value, labels: undefined }] : value) {
      if (Number.isNaN(s.value)) continue;
      analytics(def, s.value, s.labels);
      recorded++;
    }
  }
  return recorded;
}
