// Prometheus text exposition (format 0.0.4) from catalogue entries and samples. Pure: the HTTP layer
// gathers the samples; this only spells them.

export interface ExpositionSample {
  labels?: Record<string, string>;
  value: number;
}

export interface ExpositionHistogram {
  labels?: Record<string, string>;
  /** Upper bounds, ascending; `+Inf` is added here. */
  bounds: readonly number[];
  /** Observations per bucket (not cumulative), one more than `bounds`: the last is above every bound. */
  counts: readonly number[];
  sum: number;
}

export interface ExpositionFamily {
  name: string;
  kind: 'counter' | 'gauge' | 'histogram';
  help: string;
  unit?: string;
  samples: ExpositionSample[];
  histograms?: ExpositionHistogram[];
}

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4';

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function escapeHelp(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function escapeLabel(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

function labelSet(labels: Record<string, string> | undefined, extra?: [string, string]): string {
  const all = Object.entries(labels ?? {});
  for (const [k] of all) {
    if (!LABEL_NAME.test(k)) throw new RangeError(`not a label name: ${k}`);
    if (extra && k === extra[0]) throw new RangeError(`label ${k} is reserved in a histogram`);
  }
  if (extra) all.push(extra);
  return all.length ? `{${all.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(',')}}` : '';
}

/**
 * The whole exposition, ending with a line feed (the format requires one after the last line). Families
 * keep their order; a family with no samples still declares itself.
 */
export function exposition(families: readonly ExpositionFamily[]): string {
  const lines: string[] = [];
  for (const f of families) {
    if (!METRIC_NAME.test(f.name)) throw new RangeError(`not a Prometheus metric name: ${f.name}`);
    const help = f.unit ? `${f.help} (${f.unit})` : f.help;
    lines.push(`# HELP ${f.name} ${escapeHelp(help)}`, `# TYPE ${f.name} ${f.kind}`);
    for (const s of f.samples) lines.push(`${f.name}${labelSet(s.labels)} ${formatValue(s.value)}`);
    for (const h of f.histograms ?? []) {
      if (h.counts.length !== h.bounds.length + 1)
        throw new RangeError(`${f.name}: ${h.bounds.length} bounds need ${h.bounds.length + 1} counts`);
      let cumulative = 0;
      h.bounds.forEach((bound, i) => {
        cumulative += h.counts[i]!;
        lines.push(`${f.name}_bucket${labelSet(h.labels, ['le', formatValue(bound)])} ${cumulative}`);
      });
      cumulative += h.counts[h.bounds.length]!;
      lines.push(`${f.name}_bucket${labelSet(h.labels, ['le', '+Inf'])} ${cumulative}`);
      lines.push(`${f.name}_sum${labelSet(h.labels)} ${formatValue(h.sum)}`);
      lines.push(`${f.name}_count${labelSet(h.labels)} ${cumulative}`);
    }
  }
  return lines.map((l) => l + '\n').join('');
}
