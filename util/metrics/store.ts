// The cells behind the catalogue's unlabelled counters, gauges and histograms, over one buffer that
// every worker of a node maps (services/metrics/values.ts passes a process-wide shared buffer). Counters and
// histogram cells are Int64 words changed only with Atomics.add, so an observation on any worker shows
// in a scrape answered by any other and none is lost to a race. Gauges are a last value (a plain store).
//
// The layout is fixed by the catalogue: every histogram series (one per value of its closed label, or
// one) has a cell per bucket plus the +Inf overflow, and its sum in nano-units (integers, so Atomics can
// add them; 2^63 ns is 292 years of summed durations). The count is the sum of the bucket cells, so a
// scrape racing an observation may lag the sum by one observation but its `_count` always equals its
// `+Inf` bucket.
import type { MetricDef } from './catalogue.js';

const NANO = 1e9;
const WORD = 8;

export interface HistogramReading {
  labels?: Record<string, string>;
  bounds: readonly number[];
  /** Per bucket, not cumulative; the last cell is the overflow above the highest bound. */
  counts: number[];
  /** In the exposed unit. */
  sum: number;
}

interface HistogramSeries {
  labels?: Record<string, string>;
  /** Word index of the first bucket cell; the sum follows the overflow cell. */
  at: number;
}

interface Cell {
  def: MetricDef;
  at: number;
  series?: HistogramSeries[];
}

export class MetricStore {
  private readonly ints: BigInt64Array;
  private readonly floats: Float64Array;
  private readonly cells: Map<string, Cell>;
  readonly words: number;

  /** Words the catalogue needs; the buffer must hold this many 8-byte words. */
  static wordsFor(catalogue: Readonly<Record<string, MetricDef>>): number {
    return layout(catalogue).words;
  }

  constructor(buffer: ArrayBuffer | SharedArrayBuffer, catalogue: Readonly<Record<string, MetricDef>>) {
    const { cells, words } = layout(catalogue);
    if (buffer.byteLength < words * WORD)
      throw new RangeError(
        `metric buffer holds ${buffer.byteLength} bytes; the catalogue needs ${words * WORD}`,
      );
    this.cells = cells;
    this.words = words;
    this.ints = new BigInt64Array(buffer, 0, words);
    this.floats = new Float64Array(buffer, 0, words);
  }

  private cell(key: string, kind: MetricDef['kind']): Cell {
    const c = this.cells.get(key);
    if (!c || c.def.kind !== kind) throw new RangeError(`${key} is not a ${kind} of the catalogue`);
    return c;
  }

  add(key: string, n: number): void {
    Atomics.add(this.ints, this.cell(key, 'counter').at, BigInt(Math.trunc(n)));
  }

  counter(key: string): number {
    return Number(Atomics.load(this.ints, this.cell(key, 'counter').at));
  }

  set(key: string, value: number): void {
    this.floats[this.cell(key, 'gauge').at] = value;
  }

  gauge(key: string): number {
    return this.floats[this.cell(key, 'gauge').at]!;
  }

  /**
   * One observation, already in the exposed unit. False (nothing counted) when a label value is not one
   * of the label's closed list, or the value is not a finite number — a histogram's sum must stay real.
   */
  observe(key: string, value: number, labels?: Record<string, string>): boolean {
    const c = this.cell(key, 'histogram');
    if (!Number.isFinite(value)) return false;
    const s = c.series!.find((x) => sameLabels(x.labels, labels));
    if (!s) return false;
    const bounds = c.def.buckets!;
    let b = 0;
    while (b < bounds.length && value > bounds[b]!) b++;
    Atomics.add(this.ints, s.at + b, 1n);
    Atomics.add(this.ints, s.at + bounds.length + 1, BigInt(Math.round(value * NANO)));
    return true;
  }

  histogram(key: string): HistogramReading[] {
    const c = this.cell(key, 'histogram');
    const bounds = c.def.buckets!;
    return c.series!.map((s) => {
      const counts: number[] = [];
      for (let b = 0; b <= bounds.length; b++) counts.push(Number(Atomics.load(this.ints, s.at + b)));
      const sum = Number(Atomics.load(this.ints, s.at + bounds.length + 1)) / NANO;
      return { ...(s.labels ? { labels: { ...s.labels } } : {}), bounds, counts, sum };
    });
  }
}

function sameLabels(a: Record<string, string> | undefined, b: Record<string, string> | undefined): boolean {
  const ka = Object.keys(a ?? {});
  const kb = Object.keys(b ?? {});
  return ka.length === kb.length && ka.every((k) => a![k] === b?.[k]);
}

function layout(catalogue: Readonly<Record<string, MetricDef>>): { cells: Map<string, Cell>; words: number } {
  const cells = new Map<string, Cell>();
  let words = 0;
  for (const [key, def] of Object.entries(catalogue)) {
    // A live histogram's cells are the structure the scrape reads it from (queueResults.ts).
    if (def.kind === 'histogram' && def.live) continue;
    if (def.kind === 'histogram') {
      const bounds = def.buckets ?? [];
      if (bounds.length === 0 || bounds.some((b, i) => i > 0 && !(b > bounds[i - 1]!)))
        throw new RangeError(`${key}: histogram buckets must be ascending and not empty`);
      const series: HistogramSeries[] = [];
      for (const labels of labelSets(key, def)) {
        series.push({ ...(labels ? { labels } : {}), at: words });
        words += bounds.length + 2;
      }
      cells.set(key, { def, at: series[0]!.at, series });
    } else if (!def.labels?.length) {
      cells.set(key, { def, at: words++ });
    }
    // Labelled counters and gauges have open (though bounded) label sets: they live elsewhere.
  }
  return { cells, words };
}

/** A histogram's series: one per value of its closed label, or one with no labels. */
function labelSets(key: string, def: MetricDef): Array<Record<string, string> | undefined> {
  const labels = def.labels ?? [];
  if (labels.length === 0) return [undefined];
  const label = labels[0]!;
  const values = def.labelValues?.[label];
  if (labels.length > 1 || !values?.length)
    throw new RangeError(`${key}: a histogram takes at most one label, with a closed list of values`);
  return values.map((v) => ({ [label]: v }));
}
