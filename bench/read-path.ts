// What one claim candidate's point read costs inside Harper: readRow (services/schedule/store.ts, which the
// claim calls once per candidate), the store's decoded get under it, and the raw bytes alone, timed on
// the worker itself through a route that only a scratch copy of the component has.
// Run: npx tsc -p tsconfig.json && node dist/bench/read-path.js
import { startHarper } from '../test/harness.js';
import { benchUrl, fileAll, machine } from './lib.js';
import { removeScratch, scratchComponent } from './scratch-component.js';

const ROWS = 20_000;
const component = scratchComponent({ keeper: true, readPathRoute: true });
console.log(JSON.stringify({ bench: 'read-path', ...machine(), rows: ROWS }));
const h = await startHarper({ componentDir: component, logLevel: 'warn' });
try {
  const urls = Array.from({ length: ROWS }, (_, i) => benchUrl('read', i));
  await fileAll(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() - 3_600_000 })),
  );
  for (let round = 0; round < 6; round++) {
    // Fresh connections so both workers answer; 2,000 keys × 5 passes per call (the first pass cold), then
    // the per-turn form over keys this call has not read yet.
    const keys = urls.slice(round * 3000, round * 3000 + 2000);
    const turnKeys = urls.slice(round * 3000 + 2000, round * 3000 + 3000);
    const r = await h.fetch('/prerender_admin/bench-read-path', {
      body: { keys, reps: 5, turnKeys },
      fresh: true,
    });
    console.log(JSON.stringify(r.json ?? r.text));
  }
} finally {
  await h.destroy();
  removeScratch(component);
}
