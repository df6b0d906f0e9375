// What one schedule row's rewrite costs inside Harper, by the form of the write, timed on the worker
// itself through a route only a scratch copy of the component has. Every form rewrites rows that exist
// (as a result does) in one transaction() per batch of BATCH rows, and waits for the commit:
//   owner     the product's whole result write (ScheduleOwner.applyResults: group commit, key locks, the read
//             before deciding, the rule, put, commit, read-back)
//   put       Table.put(key, whole record, txn)        the product's form of the write itself
//   putTxnPath  put, with Harper's commit made to take its one-callback path at any batch size
//   patch     Table.patch(key, changed fields, txn)
//   rawPut    primaryStore.put(key, record)             lmdb alone, no Harper: the floor, not a product form
// Reported per form: wall µs per row and the worker thread's on-CPU µs per row (/proc/thread-self/schedstat),
// which leaves out lmdb's write thread. Batches of 25 take Harper's per-write ifVersion chain, batches of
// 200 its one transaction callback (it switches at 100 writes).
// Run: npx tsc -p tsconfig.json && node dist/bench/write-path.js [rounds]
import { startHarper } from '../test/harness.js';
import { benchUrl, fileAll, loadavg, machine } from './lib.js';
import { removeScratch, scratchComponent } from './scratch-component.js';

const ROUNDS = Number(process.argv[2] ?? 3);
const ROWS = 20_000;
const component = scratchComponent({ keeper: true, writePathRoute: true });
console.log(JSON.stringify({ bench: 'write-path', ...machine(), rows: ROWS, rounds: ROUNDS }));
const h = await startHarper({ componentDir: component, logLevel: 'warn' });
try {
  const urls = Array.from({ length: ROWS }, (_, i) => benchUrl('write', i));
  await fileAll(
    h,
    urls.map((url) => ({ url, dueAt: Date.now() + 3_600_000 })),
  );
  const forms = ['owner', 'put', 'putTxnPath', 'patch', 'rawPut'];
  for (let round = 1; round <= ROUNDS; round++) {
    for (const batch of [25, 200]) {
      // Forms interleaved in a rotating order; each rewrites 4,000 rows of its own.
      for (let f = 0; f < forms.length; f++) {
        const form = forms[(f + round) % forms.length]!;
        const start = ((round * 7 + f * 3 + batch) * 1000) % (ROWS - 4000);
        const r = await h.fetch('/prerender_admin/bench-write-path', {
          body: { form, batch, keys: urls.slice(start, start + 4000) },
        });
        console.log(JSON.stringify({ round, load: loadavg(), ...(r.json as object) }));
      }
    }
  }
} finally {
  await h.destroy();
  removeScratch(component);
}
