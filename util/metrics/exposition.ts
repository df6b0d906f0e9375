// The scrape of the whole catalogue, in catalogue order, from the metric cells, the labelled
// counters and the readings taken for this scrape. Pure, so a unit test lints exactly what a scrape
// answers without booting Harper.
import { METRICS, type MetricDef, type MetricName } from './catalogue.js';
import type { HistogramReading, MetricStore } from './store.js';
import { exposition, type ExpositionFamily, type ExpositionSample } from './prometheus.js';

/**
 * A reading taken for one scrape: a number for an unlabelled gauge, samples for a labelled family, the
 * series of a live histogram.
 */
export type LiveValue =
  | number
  | ReadonlyArray<{ labels: Record<string, string>; value: number }>
  | { histograms: readonly HistogramReading[] };
export type LiveFigures = Partial<Record<MetricName, LiveValue>>;

/** A labelled counter's series as util/metrics/labelledCounters.ts stores it: the key, then its labels as JSON. */
export function labelledSeriesKey(name: MetricName, labels: Record<string, string>): string {
  return `${name}${JSON.stringify(labels)}`;
}

function parseSeriesKey(key: string): { name: string; labels: Record<string, string> } {
  const at = key.indexOf('{');
  return { name: key.slice(0, at), labels: JSON.parse(key.slice(at)) as Record<string, string> };
}

/**
 * Every family of the catalogue. A live gauge with no reading is declared with no sample (it is read
 * only at scrape time, so there is nothing else to show); every other family shows its cells.
 */
export function catalogueExposition(
  cells: MetricStore,
  labelled: ReadonlyArray<{ key: string; value: number }>,
  live: LiveFigures,
): string {
  const byName = new Map<string, ExpositionSample[]>();
  for (const { key, value } of labelled) {
    const { name, labels } = parseSeriesKey(key);
    if (!(name in METRICS)) continue;
    byName.set(name, [...(byName.get(name) ?? []), { labels, value }]);
  }
  const families = (Object.keys(METRICS) as MetricName[]).map((name): ExpositionFamily => {
    const def: MetricDef = METRICS[name];
    const family: ExpositionFamily = {
      name: def.name,
      kind: def.kind,
      help: def.help,
      unit: def.unit,
      samples: [],
    };
    const value = live[name];
    if (typeof value === 'number') family.samples = [{ value }];
    else if (value !== undefined && 'histograms' in value) family.histograms = [...value.histograms];
    else if (value !== undefined)
      family.samples = value.map((s) => ({ labels: { ...s.labels }, value: s.value }));
    else if (def.kind === 'histogram' && !def.live) family.histograms = cells.histogram(name);
    else if (def.labels?.length) family.samples = byName.get(name) ?? [];
    else if (def.kind === 'counter') family.samples = [{ value: cells.counter(name) }];
    else if (!def.live) family.samples = [{ value: cells.gauge(name) }];
    return family;
  });
  return exposition(families);
}
