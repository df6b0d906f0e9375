// Prometheus text exposition (format 0.0.4) from catalogue entries and samples. Pure: the HTTP layer
// gathers the samples; this only spells them.

export interface ExpositionFamily {
  name: string;
  kind: 'counter' | 'gauge';
  help: string;
  unit?: string;
  samples: Array<{ labels?: Record<string, string>; value: number }>;
}

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

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

/** The whole exposition. Families keep their order; a family with no samples still declares itself. */
export function exposition(families: readonly ExpositionFamily[]): string {
  const lines: string[] = [];
  for (const f of families) {
    if (!METRIC_NAME.test(f.name)) throw new RangeError(`not a Prometheus metric name: ${f.name}`);
    const help = f.unit ? `${f.help} (${f.unit})` : f.help;
    lines.push(`# HELP ${f.name} ${escapeHelp(help)}`, `# TYPE ${f.name} ${f.kind}`);
    for (const s of f.samples) {
      const labels = Object.entries(s.labels ?? {});
      for (const [k] of labels) if (!LABEL_NAME.test(k)) throw new RangeError(`not a label name: ${k}`);
      const set = labels.length ? `{${labels.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(',')}}` : '';
      lines.push(`${f.name}${set} ${formatValue(s.value)}`);
    }
  }
  return lines.join('\n') + '\n';
}
