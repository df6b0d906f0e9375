// Harper 4.7.29 Blob probe, two replicating nodes (docs/clusters.md recipe): does a blob reach the other
// node, byte for byte, and does a delete come back? Build first, then: node bench/blob-probe/cluster.mjs
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ADMIN_PASS, ADMIN_USER, startHarper } from '../../dist/test/harness.js';

const dir = mkdtempSync(join(tmpdir(), 'qk-blob-probe-'));
cpSync(dirname(fileURLToPath(import.meta.url)), dir, { recursive: true });
// Each node replicates on its HTTP port (test/harness.ts `replicationHostname`).
const node = (name) => startHarper({ componentDir: dir, readyPath: '/probe/', replicationHostname: name });
const a = await node('node-a');
const b = await node('node-b');
const P = async (n, body) => (await n.fetch('/probe', { body })).json;
try {
  const authorization = 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64');
  await b.operation({
    operation: 'add_node',
    hostname: 'node-a',
    url: a.replicationUrl,
    authorization,
    retain_authorization: true,
  });
  const big = 'ü'.repeat(150_000) + 'end'; // 300,003 bytes
  await P(a, { op: 'put', table: 'BlobPage', id: 'c', body: big });
  const t0 = Date.now();
  let seen;
  while (Date.now() - t0 < 20_000) {
    seen = await P(b, { op: 'get', table: 'BlobPage', id: 'c', expect: big });
    if (!seen.missing) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  console.log('on node-b after', Date.now() - t0, 'ms', JSON.stringify(seen));
  console.log('node-b blob files', JSON.stringify((await P(b, { op: 'stats', table: 'BlobPage' })).blobs));
  await P(b, { op: 'delete', table: 'BlobPage', id: 'c' });
  await new Promise((r) => setTimeout(r, 1500));
  console.log(
    'node-a after the delete on node-b',
    JSON.stringify(await P(a, { op: 'get', table: 'BlobPage', id: 'c' })),
  );
} finally {
  await Promise.all([a.destroy(), b.destroy()]);
  rmSync(dir, { recursive: true, force: true });
}
