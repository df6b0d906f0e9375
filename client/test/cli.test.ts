// The fleet command's argument checks (a bad flag exits 2 before anything starts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { main } from '../src/cli.js';

const creds = ['--url', 'http://127.0.0.1:9', '--username', 'u', '--password', 'p'];

test('--recycle-every below 1 or not an integer exits 2 naming the flag, before any renderer starts', async (t) => {
  const errors: string[] = [];
  t.mock.method(console, 'error', (m: string) => void errors.push(m));
  for (const bad of ['0', '2.5', 'many']) {
    errors.length = 0;
    assert.equal(await main([...creds, '--renderer', 'chromium', '--recycle-every', bad], {}, {}), 2);
    assert.deepEqual(errors, ['--recycle-every must be a positive integer']);
  }
});

test('--help names the recycle and JSON-pages flags', async (t) => {
  const out: string[] = [];
  t.mock.method(console, 'log', (m: string) => void out.push(m));
  assert.equal(await main(['--help'], {}, {}), 0);
  assert.match(out.join('\n'), /--recycle-every N/);
  assert.match(out.join('\n'), /--json-pages/);
});
