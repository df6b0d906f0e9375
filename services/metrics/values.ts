// Metric values for the catalogue in util/metrics/catalogue.ts. Counters and histograms are cumulative per
// node: their cells live in a process-wide shared buffer (util/metrics/store.ts), so an observation on any
// worker shows in a scrape answered by any other. Every value is also recorded to Harper analytics as
// `queue_health.<name>`, with a label's value as the analytics path.
import { LabelledCounters } from '../../util/metrics/labelledCounters.js';
import { MetricStore } from '../../util/metrics/store.js';
import { QueueResults, type QueueResultsReading } from '../../util/metrics/queueResults.js';
import { catalogueExposition, labelledSeriesKey, type LiveFigures } from '../../util/metrics/exposition.js';
import { log, server } from '../runtime/harper.js';
import type { SharedBuffers } from '../runtime/sharedBuffers.js';
import {
  METRICS,
  RENDER_BUCKETS,
  type MetricDef,
  type MetricName,
  type ResultOutcome,
} from '../../util/metrics/catalogue.js';

export { METRICS, type LiveFigures, type MetricDef, type MetricName };

const CATALOGUE: Readonly<Record<string, MetricDef>> = METRICS;
const NAMES = Object.keys(METRICS) as MetricName[];

// Labelled counters live in their own shared table (one slot per series), cross-worker like the rest.
const LABELLED_SERIES = 64;
// Queues whose results are counted (queue_keeper_results_total, queue_keeper_render_seconds): routes
// beyond this many share no room and go uncounted, with one warning per worker.
const RESULT_QUEUES = 256;

export interface MetricValuesDeps {
  cells: () => MetricStore;
  labelled: () => LabelledCounters;
  /** The per-queue results and render times (util/metrics/queueResults.ts). */
  results: () => QueueResults;
  /** Harper analytics (`server.recordAnalytics`): value, metric name, optional path. */
  analytics: (value: number, name: string, path?: string) => void;
  log: { warn: (...args: unknown[]) => void };
}

/** Counting into the node's cells, with every value also recorded to Harper analytics. */
export class MetricValues {
  private labelledFullWarned = false;
  private resultsFullWarned = false;

  constructor(private readonly deps: MetricValuesDeps) {}

  private analytics(def: MetricDef, value: number, labels?: Record<string, string>): void {
    const path = labels ? Object.values(labels).join('/') : undefined;
    this.deps.analytics(value, `queue_health.${def.name}`, path);
  }

  count(name: MetricName, n = 1, labels?: Record<string, string>): void {
    if (n === 0) return;
    const def: MetricDef = METRICS[name];
    if (labels) {
      if (!this.deps.labelled().add(labelledSeriesKey(name, labels), n) && !this.labelledFullWarned) {
        this.labelledFullWarned = true;
        this.deps.log.warn(
          `metrics: no room for series ${def.name}${JSON.stringify(labels)} (${LABELLED_SERIES} labelled series at most)`,
        );
      }
    } else {
      this.deps.cells().add(name, n);
    }
    this.analytics(def, n, labels);
  }

  gauge(name: MetricName, value: number): void {
    this.deps.cells().set(name, value);
    this.analytics(METRICS[name], value);
  }

  /** One histogram observation in the call site's unit (ms for durations; the catalogue scales it). */
  observe(name: MetricName, value: number, labels?: Record<string, string>): void {
    const def: MetricDef = METRICS[name];
    const scaled = value * (def.scale ?? 1);
    if (this.deps.cells().observe(name, scaled, labels)) this.analytics(def, scaled, labels);
  }

  /**
   * One result applied to its row: queue_keeper_results_total{queue, outcome} and, when the fleet
   * reported one, its render time (ms) in queue_keeper_render_seconds{queue}.
   */
  countResult(queue: string, outcome: ResultOutcome, renderMs: number | null): void {
    if (!this.deps.results().record(queue, outcome, renderMs) && !this.resultsFullWarned) {
      this.resultsFullWarned = true;
      this.deps.log.warn(
        `metrics: no room for the results of queue ${JSON.stringify(queue)} (${RESULT_QUEUES} queues at most)`,
      );
    }
    this.analytics(METRICS.results, 1, { queue, outcome });
    if (renderMs !== null && Number.isFinite(renderMs) && renderMs >= 0)
      this.analytics(METRICS.render_seconds, renderMs / 1000, { queue });
  }

  /** The per-queue results of these queues, for a scrape (HealthFigures.liveFigures). */
  resultReadings(queues: readonly string[]): QueueResultsReading {
    return this.deps.results().read(queues);
  }

  /** A gauge's new value or a histogram's observation, by the catalogue's kind (the keeper's one hook). */
  record(name: MetricName, value: number): void {
    if (METRICS[name].kind === 'histogram') this.observe(name, value);
    else this.gauge(name, value);
  }

  /**
   * The Prometheus exposition of every catalogue entry, in catalogue order. `live` gives the readings
   * taken for this scrape (lease scan, keeper signal, state document).
   */
  text(live: LiveFigures = {}): string {
    return catalogueExposition(this.deps.cells(), this.deps.labelled().entries(), live);
  }

  /** Records the live readings to Harper analytics (the counters and histograms record as they happen). */
  recordLive(live: LiveFigures): number {
    let recorded = 0;
    for (const name of NAMES) {
      const value = live[name];
      if (value === undefined) continue;
      const def: MetricDef = METRICS[name];
      // Counters and histograms go to analytics as they happen; a reading of them is a running total.
      if (def.kind !== 'gauge' || (typeof value !== 'number' && 'histograms' in value)) continue;
      for (const s of typeof value === 'number' ? [{ value, labels: undefined }] : value) {
        if (Number.isNaN(s.value)) continue;
        this.analytics(def, s.value, s.labels);
        recorded++;
      }
    }
    return recorded;
  }
}

function once<T>(make: () => T): () => T {
  let made: T | undefined;
  return () => (made ??= make());
}

/**
 * The node's metrics over its shared buffers (every worker adds into the same cells and labelled series);
 * resources.ts builds the one instance of its thread and hands it to every service that counts.
 */
export function nodeMetrics(buffers: Pick<SharedBuffers, 'get'>): MetricValues {
  return new MetricValues({
    cells: once(
      () =>
        new MetricStore(buffers.get('metrics:cells', MetricStore.wordsFor(CATALOGUE) * 8).buffer, CATALOGUE),
    ),
    labelled: once(
      () =>
        new LabelledCounters(
          buffers.get('metrics:labelled', LabelledCounters.byteLength(LABELLED_SERIES)).buffer,
        ),
    ),
    results: once(
      () =>
        new QueueResults(
          buffers.get('metrics:results', QueueResults.byteLength(RESULT_QUEUES, RENDER_BUCKETS)).buffer,
          RENDER_BUCKETS,
        ),
    ),
    analytics: (value, name, path) => server.recordAnalytics?.(value, name, path),
    log,
  });
}
