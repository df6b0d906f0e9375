// A scrape checked through a maintained parser of the Prometheus text format. The parser is lenient
// (it reads `x{ 1` as a sample with an empty value), so every sample is also required to be a number and
// every family to be typed, which is what a Prometheus server would insist on. Histograms are kept but
// not read here (the parser loses their labels): histogramTotals in test/promLint.ts reads them.
import assert from 'node:assert/strict';
import parse, { type ParsedFamily } from 'parse-prometheus-text-format';

export function parseScrape(text: string): Map<string, ParsedFamily> {
  const families = parse(text);
  const byName = new Map<string, ParsedFamily>();
  for (const f of families) {
    assert.match(f.name, /^[a-zA-Z_:][a-zA-Z0-9_:]*$/, `metric name ${f.name}`);
    assert.ok(['COUNTER', 'GAUGE', 'HISTOGRAM'].includes(f.type), `${f.name} is typed (${f.type})`);
    assert.ok(!byName.has(f.name), `${f.name} declared once`);
    // The parser folds a histogram's series together; test/promLint.ts reads histograms strictly.
    if (f.type === 'HISTOGRAM') continue;
    for (const m of f.metrics) {
      assert.ok(
        m.value === 'NaN' || (Number.isFinite(Number(m.value)) && m.value.trim() !== ''),
        `${f.name} value ${JSON.stringify(m.value)}`,
      );
    }
    byName.set(f.name, f);
  }
  return byName;
}

/** The value of an unlabelled sample (or the sum over label sets). */
export function total(families: Map<string, ParsedFamily>, name: string): number {
  const f = families.get(name);
  assert.ok(f, `${name} is in the scrape`);
  return f.metrics.reduce((a, m) => a + Number(m.value), 0);
}
