// A strict reader of the Prometheus text format (0.0.4) and a linter with the rules `promtool check
// metrics` applies (client_golang's promlint), plus the project's own (docs/monitoring.md): the
// `queue_keeper_` prefix, `_seconds` for durations and `_ratio` for ratios. promtool is not on CI machines,
// so the tests run these instead; docs/monitoring.md says how to run promtool itself against a live node.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: string;
  help: string | undefined;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
const HISTOGRAM_SUFFIXES = ['_bucket', '_sum', '_count'];

function parseValue(s: string): number {
  if (s === 'NaN') return NaN;
  if (s === '+Inf' || s === 'Inf') return Infinity;
  if (s === '-Inf') return -Infinity;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(s)) throw new Error(`not a sample value: ${s}`);
  return Number(s);
}

/** `a="x",b="y\"z"` → labels; throws on anything the format does not allow. */
function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf('=', i);
    if (eq < 0) throw new Error(`label without a value: ${line}`);
    const name = text.slice(i, eq).trim();
    if (!LABEL_NAME.test(name)) throw new Error(`bad label name ${JSON.stringify(name)}: ${line}`);
    if (name in labels) throw new Error(`label ${name} twice: ${line}`);
    if (text[eq + 1] !== '"') throw new Error(`label value not quoted: ${line}`);
    let j = eq + 2;
    let value = '';
    for (; j < text.length && text[j] !== '"'; j++) {
      if (text[j] === '\\') {
        const next = text[++j];
        if (next === 'n') value += '\n';
        else if (next === '\\' || next === '"') value += next;
        else throw new Error(`bad escape \\${next}: ${line}`);
      } else value += text[j];
    }
    if (j >= text.length) throw new Error(`unterminated label value: ${line}`);
    labels[name] = value;
    i = j + 1;
    if (text[i] === ',') i++;
    else if (i < text.length) throw new Error(`expected , between labels: ${line}`);
  }
  return labels;
}

function familyOf(sampleName: string, families: Map<string, Family>): Family | undefined {
  const exact = families.get(sampleName);
  if (exact) return exact;
  for (const suffix of HISTOGRAM_SUFFIXES) {
    if (!sampleName.endsWith(suffix)) continue;
    const f = families.get(sampleName.slice(0, -suffix.length));
    if (f && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return f;
  }
  return undefined;
}

/**
 * Parses an exposition strictly: it must end with a line feed, every family has TYPE before its samples
 * and HELP and TYPE at most once, every sample belongs to the family declared just before it.
 */
export function parseExposition(text: string): Map<string, Family> {
  if (text.length > 0 && !text.endsWith('\n'))
    throw new Error('the exposition does not end with a line feed');
  const families = new Map<string, Family>();
  let current: Family | undefined;
  const declare = (name: string): Family => {
    if (!METRIC_NAME.test(name)) throw new Error(`bad metric name ${JSON.stringify(name)}`);
    let f = families.get(name);
    if (!f) {
      f = { name, type: 'untyped', help: undefined, samples: [] };
      families.set(name, f);
    } else if (f !== current) throw new Error(`${name} is declared in two places`);
    current = f;
    return f;
  };
  for (const line of text.slice(0, -1).split('\n')) {
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
      if (!m) continue; // a comment
      const f = declare(m[2]!);
      if (m[1] === 'HELP') {
        if (f.help !== undefined) throw new Error(`HELP twice for ${f.name}`);
        f.help = (m[3] ?? '').replace(/\\n/g, '\n').replace(/\\\\/g, '\\');
      } else {
        if (f.samples.length > 0 || f.type !== 'untyped')
          throw new Error(`TYPE of ${f.name} after its samples or twice`);
        if (!TYPES.has(m[3] ?? '')) throw new Error(`bad TYPE ${m[3]} for ${f.name}`);
        f.type = m[3]!;
      }
      continue;
    }
    if (line.trim() === '') throw new Error('empty line in the exposition');
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const f = familyOf(m[1]!, families);
    if (!f) throw new Error(`sample of an undeclared family: ${line}`);
    if (f !== current) throw new Error(`sample of ${f.name} outside its family's block: ${line}`);
    f.samples.push({ name: m[1]!, labels: parseLabels(m[2] ?? '', line), value: parseValue(m[3]!) });
  }
  for (const f of families.values()) if (f.type === 'histogram') checkHistogram(f);
  return families;
}

function seriesKey(labels: Record<string, string>, without?: string): string {
  return JSON.stringify(
    Object.entries(labels)
      .filter(([k]) => k !== without)
      .sort(([a], [b]) => (a < b ? -1 : 1)),
  );
}

/** Buckets ascending to +Inf, cumulative counts, `_count` equal to the +Inf bucket, a `_sum`. */
function checkHistogram(f: Family): void {
  const series = new Map<string, { bounds: number[]; counts: number[]; sum?: number; count?: number }>();
  const of = (labels: Record<string, string>) => {
    const key = seriesKey(labels, 'le');
    let s = series.get(key);
    if (!s) series.set(key, (s = { bounds: [], counts: [] }));
    return s;
  };
  for (const x of f.samples) {
    if (x.name === `${f.name}_bucket`) {
      if (x.labels.le === undefined) throw new Error(`${f.name}_bucket without le`);
      const s = of(x.labels);
      s.bounds.push(parseValue(x.labels.le));
      s.counts.push(x.value);
    } else if (x.name === `${f.name}_sum`) of(x.labels).sum = x.value;
    else if (x.name === `${f.name}_count`) of(x.labels).count = x.value;
    else throw new Error(`histogram ${f.name} has a plain sample ${x.name}`);
  }
  for (const [key, s] of series) {
    const at = `${f.name}${key}`;
    if (s.bounds.at(-1) !== Infinity) throw new Error(`${at} has no +Inf bucket`);
    for (let i = 1; i < s.bounds.length; i++) {
      if (!(s.bounds[i]! > s.bounds[i - 1]!)) throw new Error(`${at} buckets are not ascending`);
      if (s.counts[i]! < s.counts[i - 1]!) throw new Error(`${at} bucket counts are not cumulative`);
    }
    if (s.sum === undefined) throw new Error(`${at} has no _sum`);
    if (s.count !== s.counts.at(-1)) throw new Error(`${at} _count ${s.count} differs from its +Inf bucket`);
  }
}

// promlint's lists (client_golang prometheus/testutil/promlint).
const ABBREVIATED_UNITS = new Set([
  's',
  'ms',
  'us',
  'ns',
  'sec',
  'b',
  'kb',
  'mb',
  'gb',
  'tb',
  'pb',
  'm',
  'h',
  'd',
]);
const BASE_UNITS = [
  'amperes',
  'bytes',
  'celsius',
  'grams',
  'joules',
  'kelvin',
  'meters',
  'metres',
  'seconds',
  'volts',
];
const UNIT_PREFIXES = [
  'pico',
  'nano',
  'micro',
  'milli',
  'centi',
  'deci',
  'deca',
  'hecto',
  'kilo',
  'kibi',
  'mega',
  'mebi',
  'giga',
  'gibi',
  'tera',
  'tebi',
  'peta',
  'pebi',
];
const TIME_UNITS = new Set(['minutes', 'hours', 'days', 'weeks']);
const TYPE_WORDS = ['counter', 'gauge', 'histogram', 'summary'];

/** What promtool would say about one family's name and labels, and what this project's naming adds. */
function lintFamily(f: Family, prefix: string): string[] {
  const problems: string[] = [];
  const say = (p: string) => problems.push(`${f.name}: ${p}`);
  const n = f.name;
  if (!f.help) say('no help text');
  if (f.type === 'untyped') say('no TYPE');
  if (n !== n.toLowerCase() || /[a-z][A-Z]/.test(n)) say('metric names should be written in snake_case');
  if (n.includes(':')) say('metric names should not contain ":"');
  if (!n.startsWith(prefix)) say(`metric names should start with ${prefix}`);
  if (f.type === 'counter' && !n.endsWith('_total')) say('counter metrics should have "_total" suffix');
  if (f.type !== 'counter' && n.endsWith('_total'))
    say('non-counter metrics should not have "_total" suffix');
  if (f.type !== 'histogram' && f.type !== 'summary')
    for (const s of HISTOGRAM_SUFFIXES)
      if (n.endsWith(s)) say(`non-histogram metrics should not have "${s}" suffix`);
  for (const t of TYPE_WORDS)
    if (n.includes(`_${t}_`) || n.endsWith(`_${t}`)) say(`metric name should not include type '${t}'`);
  const tokens = n.split('_');
  for (const t of tokens) {
    if (ABBREVIATED_UNITS.has(t)) say(`metric names should not contain abbreviated units ("${t}")`);
    if (TIME_UNITS.has(t)) say(`use base unit "seconds" instead of "${t}"`);
    if (t === 'percent' || t === 'percentage') say('use base unit "ratio" instead of percent');
    for (const base of BASE_UNITS)
      for (const p of UNIT_PREFIXES) if (t === p + base) say(`use base unit "${base}" instead of "${t}"`);
  }
  for (const s of f.samples)
    for (const k of Object.keys(s.labels)) {
      if (k !== k.toLowerCase()) say(`label names should be written in snake_case, not ${k}`);
      if (f.type === 'histogram' && k === 'le' && !s.name.endsWith('_bucket')) say('reserved label "le"');
      if (f.type !== 'histogram' && k === 'le') say('non-histogram metrics should not use the "le" label');
    }
  // This project's naming: durations are histograms in seconds; ratios end _ratio.
  if (/(duration|latency)/.test(n) && !(f.type === 'histogram' && n.endsWith('_seconds')))
    say('durations are histograms in seconds (_seconds)');
  if (f.help && /\(ratio\)$/.test(f.help) !== n.endsWith('_ratio'))
    say('a ratio is named _ratio, and only a ratio');
  if (f.help && /\(seconds\)$/.test(f.help) !== n.endsWith('_seconds'))
    say('a value in seconds is named _seconds');
  return problems;
}

/** Every problem in the exposition: format errors first (as one problem), then naming. */
export function lintExposition(text: string, prefix = 'queue_keeper_'): string[] {
  let families: Map<string, Family>;
  try {
    families = parseExposition(text);
  } catch (e) {
    return [(e as Error).message];
  }
  return [...families.values()].flatMap((f) => lintFamily(f, prefix));
}

/** One histogram series' total count and sum (labels other than le must match exactly). */
export function histogramTotals(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
): { count: number; sum: number } {
  const f = families.get(name);
  if (!f || f.type !== 'histogram') throw new Error(`${name} is not a histogram of the scrape`);
  const key = seriesKey(labels);
  const pick = (suffix: string) =>
    f.samples.find((s) => s.name === name + suffix && seriesKey(s.labels) === key)?.value ?? NaN;
  return { count: pick('_count'), sum: pick('_sum') };
}

/** Every distinct value of a label over a family's samples. */
export function labelValues(families: Map<string, Family>, name: string, label: string): Set<string> {
  return new Set(
    (families.get(name)?.samples ?? []).flatMap((s) => (label in s.labels ? [s.labels[label]!] : [])),
  );
}
