// Filing throughput through the API: 100,000 targets (~100-char URLs) in batches of 10,000 into a real
// Harper (2 worker threads), 3 runs on a fresh root each; prints rows/s per run and the median.
// Run: npm run build && node dist/bench/file-targets.js
import { cpus } from 'node:os';
import { setContractChecks, startHarper } from '../test/harness.js';

// Measures the server: no client-side checks of the answers against docs/openapi.yaml.
setContractChecks(false);

const ROWS = Number(process.env.ROWS ?? 100_000);
const BATCH = 10_000;
const RUNS = Number(process.env.RUNS ?? 3);

function url(run: number, i: number): string {
  // ~100 characters, like a real product URL.
  return `https://shop.example.com/catalogue/category-${i % 97}/product-${String(i).padStart(8, '0')}-run${run}?ref=bench-xxxxxxx`;
}

async function oneRun(run: number): Promise<number> {
  const h = await startHarper({ logLevel: 'warn' });
  try {
    const t0 = performance.now();
    for (let start = 0; start < ROWS; start += BATCH) {
      const targets = Array.from({ length: Math.min(BATCH, ROWS - start) }, (_, k) => ({
        url: url(run, start + k),
      }));
      const r = await h.fetch('/render_queue/targets', { body: { targets } });
      if (r.status !== 200 || r.json.upserted !== targets.length)
        throw new Error(`batch failed: ${r.status} ${r.text.slice(0, 200)}`);
    }
    const ms = performance.now() - t0;
    return (ROWS / ms) * 1000;
  } finally {
    await h.destroy();
  }
}

const rates: number[] = [];
for (let run = 0; run < RUNS; run++) {
  const rate = await oneRun(run);
  rates.push(rate);
  console.log(`run ${run + 1}: ${Math.round(rate)} rows/s`);
}
const sorted = [...rates].sort((a, b) => a - b);
console.log(
  JSON.stringify({
    bench: 'file-targets',
    rows: ROWS,
    batch: BATCH,
    runs: rates.map(Math.round),
    medianRowsPerSec: Math.round(sorted[Math.floor(sorted.length / 2)]!),
    node: process.version,
    cpu: cpus()[0]?.model,
    cores: cpus().length,
    date: new Date().toISOString(),
  }),
);
