// The fleet command: its argument checks (a bad flag exits 2 before anything starts), its help, and
// --channel choosing the persistent channel over HTTP claims.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { main } from '../src/cli.js';
import { FakeChannelServer } from './fakeChannelServer.js';
import { until } from './fakeClock.js';

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

test('--help describes --channel', async (t) => {
  const out: string[] = [];
  t.mock.method(console, 'log', (m: string) => void out.push(m));
  assert.equal(await main(['--help'], {}, {}), 0);
  assert.match(
    out.join('\n'),
    /--channel {2,}hold one WebSocket open to the server \(\/render_queue\/channel\)/,
  );
});

test('--channel runs the fleet over the persistent channel: it credits its slots over one socket and sends no HTTP request, and SIGTERM stops it', async (t) => {
  const server = new FakeChannelServer();
  await server.start();
  t.after(() => server.stop());
  const out: string[] = [];
  t.mock.method(console, 'log', (m: string) => void out.push(m));
  t.mock.method(console, 'error', () => {});
  const args = ['--url', server.url, '--username', 'u', '--password', 'p', '--concurrency', '3'];
  const run = main([...args, '--channel', '--stats-every', '0'], {}, {});
  await until('the credits over the socket', () => server.messages.some((m) => m.credits === 3), 10_000);
  assert.equal(server.sockets.length, 1);
  assert.equal(server.sockets[0]!.auth, 'Basic ' + Buffer.from('u:p').toString('base64'));
  assert.equal(server.httpRequests, 0, 'no claim over HTTP');
  assert.match(out.join('\n'), /, over the channel/);
  process.emit('SIGTERM');
  assert.equal(await run, 0);
  // A stopping fleet withdraws its credits on the socket (sent as it closes, so it may land after exit).
  await until('the withdraw', () => server.messages.some((m) => m.withdraw === true));
});

test('without --channel the same fleet claims over HTTP', async (t) => {
  const server = new FakeChannelServer();
  await server.start();
  t.after(() => server.stop());
  t.mock.method(console, 'log', () => {});
  t.mock.method(console, 'error', () => {});
  const args = ['--url', server.url, '--username', 'u', '--password', 'p', '--stats-every', '0'];
  const run = main(args, {}, {});
  await until('a claim over HTTP', () => server.httpRequests > 0, 10_000);
  process.emit('SIGTERM');
  assert.equal(await run, 0);
  assert.equal(server.sockets.length, 0);
});
