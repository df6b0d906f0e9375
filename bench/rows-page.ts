// What one page of GET /prerender_admin/rows costs at a large row count: ROWS rows (default 200,000, due
// tomorrow) filed into a real Harper (2 worker threads), then SAMPLES requests of each kind, timed from
// the client: a full page of `all` (500 rows), a page under a narrow prefix, `due` when no row is due (the
// walk reads its whole 5,000-row scan limit and answers an empty page with a `next`), and `leased` with
// no lease out (the node's noted grants only). Prints p50/p99/max ms per kind.
// Run: npm run build && ROWS=200000 node dist/bench/rows-page.js
import { setContractChecks, startHarper } from '../test/harness.js';
import { loadavg, machine, summarize } from './lib.js';

setContractChecks(false);

const ROWS = Number(process.env.ROWS ?? 200_000);
const SAMPLES = Number(process.env.SAMPLES ?? 30);
const BATCH = 10_000;

const url = (i: number) => `https://shop.example.com/c/${i % 97}/p-${String(i).padStart(8, '0')}`;

async function main(): Promise<void> {
  const h = await startHarper({ logLevel: 'warn' });
  try {
    const dueAt = Date.now() + 86_400_000;
    const t0 = performance.now();
    for (let start = 0; start < ROWS; start += BATCH) {
      const targets = Array.from({ length: Math.min(BATCH, ROWS - start) }, (_, k) => ({
        url: url(start + k),
        dueAt,
      }));
      const r = await h.fetch('/render_queue/targets', { body: { targets } });
      if (r.status !== 200) throw new Error(`filing failed: ${r.status} ${r.text.slice(0, 200)}`);
    }
    console.log(`filed ${ROWS} rows in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    const kinds: Record<string, string> = {
      'all, limit 500': 'state=all&limit=500',
      'all, prefix of ~1,000 rows, limit 50': `state=all&limit=50&prefix=${encodeURIComponent('https://shop.example.com/c/42/')}`,
      'due, none due (5,000 rows read, empty page)': 'state=due&limit=50',
      'leased, none out': 'state=leased&limit=50',
    };
    const out: Record<string, unknown> = {};
    for (const [name, query] of Object.entries(kinds)) {
      const samples: number[] = [];
      let rows = 0;
      for (let i = 0; i < SAMPLES; i++) {
        const s = performance.now();
        const r = await h.fetch(`/prerender_admin/rows?${query}`, { fresh: i % 2 === 1 });
        samples.push(performance.now() - s);
        if (r.status !== 200) throw new Error(`${name}: ${r.status} ${r.text.slice(0, 200)}`);
        rows = (r.json as { rows: unknown[] }).rows.length;
      }
      const sum = summarize(samples);
      out[name] = { ...sum, rows };
      console.log(
        `${name}: ${rows} rows; p50 ${sum.p50.toFixed(1)} ms, p99 ${sum.p99.toFixed(1)} ms, max ${sum.max.toFixed(1)} ms`,
      );
    }
    console.log(
      JSON.stringify({ machine: machine(), loadavg: loadavg(), rows: ROWS, samples: SAMPLES, out }),
    );
  } finally {
    await h.destroy();
  }
}

void main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
