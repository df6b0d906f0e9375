// Harper 4.7.29 Blob probe, one node (bench/README.md, "Page storage"). Build first (`npm run build`), then:
//   node bench/blob-probe/probe.mjs [auditRetention]     e.g. 30 (seconds) to watch the audit cleanup
// The component is copied to a temp folder (Harper links node_modules/harperdb into it).
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startHarper } from '../../dist/test/harness.js';

const retention = process.argv[2];
const dir = mkdtempSync(join(tmpdir(), 'qk-blob-probe-'));
cpSync(dirname(fileURLToPath(import.meta.url)), dir, { recursive: true });
const h = await startHarper({
  componentDir: dir,
  readyPath: '/probe/',
  harperConfig: {
    logging: { level: 'warn', stdStreams: false, ...(retention ? { auditRetention: retention } : {}) },
  },
});
const P = async (b) => (await h.fetch('/probe', { body: b })).json;
const show = (what, v) => console.log(what.padEnd(34), JSON.stringify(v));
const pause = (ms) => new Promise((r) => setTimeout(r, ms));
try {
  const big = 'é'.repeat(25_000) + '<html>'; // 50,006 bytes of UTF-8
  show('createBlob', (await h.fetch('/probe/')).json);
  for (let i = 0; i < 3; i++) await P({ op: 'put', table: 'BlobPage', id: 'a', body: big + i });
  show('get a after 3 puts', await P({ op: 'get', table: 'BlobPage', id: 'a', expect: big + 2 }));
  show('stored record of a', await P({ op: 'raw', table: 'BlobPage', id: 'a' }));
  show('audited: 3 puts of a', await P({ op: 'stats', table: 'BlobPage' }));
  const ops = await h.operation({
    operation: 'search_by_id',
    database: 'probe',
    table: 'BlobPage',
    ids: ['a'],
    get_attributes: ['*'],
  });
  show('ops API search_by_id (50 KB)', ops);
  await P({ op: 'put', table: 'BlobPage', id: 'small', body: '<p>hi</p>' });
  show('stored record of a 9-byte blob', await P({ op: 'raw', table: 'BlobPage', id: 'small' }));
  show(
    'ops API search_by_id (9 B)',
    await h.operation({
      operation: 'search_by_id',
      database: 'probe',
      table: 'BlobPage',
      ids: ['small'],
      get_attributes: ['*'],
    }),
  );
  for (let i = 0; i < 3; i++)
    await P({ op: 'put', db: 'probe_local', table: 'LocalPage', id: 'a', body: big + i });
  await pause(1500);
  show('not audited: 3 puts of a', await P({ op: 'stats', db: 'probe_local', table: 'LocalPage' }));
  for (let i = 0; i < 3; i++) await P({ op: 'put', table: 'StrPage', id: 'a', body: big + i });
  show('String: 3 puts of a', await P({ op: 'stats', table: 'StrPage' }));
  await P({ op: 'put', table: 'BlobPage', id: 'p', body: big + 'p' });
  await P({ op: 'patch', table: 'BlobPage', id: 'p', note: 'patched' });
  show('p after put + patch', await P({ op: 'get', table: 'BlobPage', id: 'p', expect: big + 'p' }));
  await P({ op: 'delete', table: 'BlobPage', id: 'a' });
  await pause(1500);
  show('after deleting a', await P({ op: 'stats', table: 'BlobPage' }));
  const served = await h.fetch('/probe/?id=p', { auth: null });
  show('Response(body.stream())', {
    status: served.status,
    type: served.headers['content-type'],
    same: served.text === big + 'p',
  });
  // A file in the blob store that no record or log entry names (as a crash before commit leaves one).
  const stray = join(h.root, 'hdb', 'blobs', 'probe', '0', '0', 'fff');
  writeFileSync(stray, Buffer.alloc(20_000));
  show('cleanup_orphan_blobs', await h.operation({ operation: 'cleanup_orphan_blobs', database: 'probe' }));
  for (let i = 0; i < 50 && existsSync(stray); i++) await pause(200);
  show('stray file after the operation', { exists: existsSync(stray) });
  show('p still readable', await P({ op: 'get', table: 'BlobPage', id: 'p', expect: big + 'p' }));
  if (retention) {
    for (let s = 10; s <= 90; s += 10) {
      await pause(10_000);
      const st = await P({ op: 'stats', table: 'BlobPage' });
      show(`t+${s}s`, {
        blobs: st.blobs.names,
        auditEntries: st.auditEntries,
        p: await P({ op: 'get', table: 'BlobPage', id: 'p', expect: big + 'p' }),
      });
    }
  }
} finally {
  await h.destroy();
  rmSync(dir, { recursive: true, force: true });
}
