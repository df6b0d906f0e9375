// The fleet command: its argument checks (a bad flag exits 2 before anything starts), its help,
// --channel choosing the persistent channel over HTTP claims, and --devices reaching the renderer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { main } from '../src/cli.js';
import { DEVICE_PROFILES } from '../src/deviceProfiles.js';
import type { Job } from '../src/types.js';
import { ack, FakeChannelServer } from './fakeChannelServer.js';
import { until } from './fakeClock.js';
import { closeLoopback, listenLoopback } from './loopback.js';

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

/** A temporary folder for files a test hands the command, removed after the test. */
function scratch(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'qk-fleet-cli-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('--devices that cannot be read or holds a malformed table exits 2 naming the file and the field, before any renderer starts', async (t) => {
  const dir = scratch(t);
  const errors: string[] = [];
  t.mock.method(console, 'error', (m: string) => void errors.push(m));
  const files: Array<[string, string | null, RegExp]> = [
    ['missing.json', null, /^--devices .*missing\.json: ENOENT/],
    ['broken.json', '{"mobile": ', /^--devices .*broken\.json: .*JSON/],
    ['list.json', '["mobile"]', /^--devices .*list\.json: devices must be an object/],
    [
      'bad.json',
      '{"mobile": {"viewport": {"width": 0}}}',
      /^--devices .*bad\.json: devices\.mobile\.viewport/,
    ],
  ];
  for (const [name, text, message] of files) {
    if (text !== null) writeFileSync(join(dir, name), text);
    errors.length = 0;
    assert.equal(await main([...creds, '--renderer', 'chromium', '--devices', join(dir, name)], {}, {}), 2);
    assert.equal(errors.length, 1);
    assert.match(errors[0]!, message);
  }
});

test('the command renders each job with its device profile, as --devices changes it', async (t) => {
  const agents = new Map<string, string | undefined>();
  const site = http.createServer((req, res) => {
    agents.set(req.url!, req.headers['user-agent']);
    res.writeHead(200, { 'content-type': 'text/html' }).end('<p>x</p>');
  });
  const origin = await listenLoopback(site);
  t.after(() => closeLoopback(site));
  const dir = scratch(t);
  writeFileSync(join(dir, 'devices.json'), JSON.stringify({ tablet: { userAgent: 'TabletBot/3' } }));

  const server = new FakeChannelServer();
  await server.start();
  t.after(() => server.stop());
  const job = (path: string, deviceType: string): Job => ({
    id: `${origin}${path}|${deviceType}`,
    url: `${origin}${path}`,
    queue: 'q',
    isFromSitemap: false,
    expiresAt: Date.now() + 60_000,
    leaseToken: `tok-${path}`,
    callbackOrigin: server.url,
    deviceType,
  });
  const jobs = [job('/m', 'mobile'), job('/t', 'tablet'), job('/w', 'watch')];
  let pushed = false;
  server.onMessage = (m, s) => {
    s.send(ack(m));
    if (m.credits && !pushed) {
      pushed = true;
      s.send({ type: 'jobs', jobs, now: Date.now() });
    }
  };
  t.mock.method(console, 'log', () => {});
  t.mock.method(console, 'error', () => {});
  const args = ['--url', server.url, '--username', 'u', '--password', 'p', '--stats-every', '0'];
  const run = main([...args, '--channel', '--json-pages', '--devices', join(dir, 'devices.json')], {}, {});
  const reported = () => server.messages.flatMap((m) => m.results ?? []).map((r) => r.id);
  await until('the three results', () => reported().length === 3, 10_000);
  process.emit('SIGTERM');
  assert.equal(await run, 0);
  assert.deepEqual(reported().sort(), jobs.map((j) => j.id).sort());
  assert.deepEqual(Object.fromEntries(agents), {
    '/m': DEVICE_PROFILES.mobile.userAgent,
    '/t': 'TabletBot/3',
    '/w': DEVICE_PROFILES.desktop.userAgent,
  });
});
