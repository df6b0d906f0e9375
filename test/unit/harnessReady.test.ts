// The harness's readiness wait against plain local servers (no Harper): its deadline holds even when
// the server accepts a request and never answers, which is how a half-booted Harper can behave.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { waitReady } from '../harness.js';

const servers: http.Server[] = [];
after(() => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
});

async function serve(handler: http.RequestListener): Promise<string> {
  const s = http.createServer(handler);
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

test(
  'a ready path that accepts the request and never answers fails at the deadline instead of waiting forever',
  { timeout: 10_000 },
  async () => {
    let asked = 0;
    const url = await serve(() => void asked++);
    const started = Date.now();
    await assert.rejects(
      waitReady(url, '/hang', { threads: 2, deadline: started + 1500, failed: () => undefined }),
      /not ready after timeout \(\/hang: no answer\)/,
    );
    const took = Date.now() - started;
    assert.ok(took < 4000, `gave up after ${took} ms`);
    assert.ok(asked >= 1, 'the request reached the server');
  },
);

test(
  'readiness waits for every worker to report in, and stops waiting when the process has failed',
  { timeout: 10_000 },
  async () => {
    let workers = 0;
    const url = await serve((_req, res) => {
      workers++;
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ workersReady: workers }));
    });
    await waitReady(url, '/health', { threads: 3, deadline: Date.now() + 5000, failed: () => undefined });
    assert.equal(workers, 3);
    await assert.rejects(
      waitReady(url, '/health', {
        threads: 99,
        deadline: Date.now() + 5000,
        failed: () => 'Harper exited during start',
      }),
      /Harper exited during start/,
    );
  },
);

test(
  'a 404 or a 5xx is not ready: the wait runs to the deadline and names the last answer',
  { timeout: 10_000 },
  async () => {
    const url = await serve((req, res) => res.writeHead(req.url === '/missing' ? 404 : 500).end());
    for (const [path, status] of [
      ['/missing', 404],
      ['/broken', 500],
    ] as const)
      await assert.rejects(
        waitReady(url, path, { threads: 1, deadline: Date.now() + 600, failed: () => undefined }),
        new RegExp(`last answer ${status}`),
      );
  },
);
