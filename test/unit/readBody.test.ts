// services/http/requestChecks.ts readBody over a plain node http server (no Harper): what a refused or
// cut-short body answers. The over-limit answers through Harper are in test/integration/abuse.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http, { type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readBody } from '../../services/http/requestChecks.js';
import { HttpError } from '../../services/runtime/httpError.js';

/** A server answering each request from readBody(req, limit) after `delayMs`: 200 with the size, or the error. */
async function server(limit: number, delayMs = 0) {
  const outcomes: Array<number | string> = [];
  const srv = http.createServer((req: IncomingMessage, res) => {
    void (async () => {
      if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
      try {
        const body = await readBody(req, limit);
        outcomes.push(body.length);
        res.writeHead(200).end(String(body.length));
      } catch (e) {
        const err = e as HttpError;
        outcomes.push(`${err.status} ${err.code}`);
        res.writeHead(err.status, err.headers ?? {}).end(err.code);
      }
    })();
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { port: (srv.address() as AddressInfo).port, outcomes, close: () => srv.close() };
}

test('a chunked body that crosses a limit of 64 MiB or more is read to its end and gets its 413, not a broken pipe', async () => {
  const s = await server(64 << 20);
  try {
    const got = await new Promise<{ status: number; connection?: string }>((resolve, reject) => {
      const req = http.request(
        { host: '127.0.0.1', port: s.port, method: 'POST', headers: { 'transfer-encoding': 'chunked' } },
        (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
        },
      );
      req.on('error', reject);
      const chunk = Buffer.alloc(1 << 20, 0x61);
      let sent = 0;
      const pump = () => {
        while (sent < 70) {
          sent++;
          if (!req.write(chunk)) return void req.once('drain', pump);
        }
        req.end();
      };
      pump();
    }).catch((e: Error) => ({ status: -1, connection: e.message }));
    assert.deepEqual(got, { status: 413, connection: 'close' });
  } finally {
    s.close();
  }
});

test('a request whose connection closed while it waited (before the body was read) is refused, not left pending', async () => {
  const s = await server(1 << 20, 150);
  try {
    const req = http.request({
      host: '127.0.0.1',
      port: s.port,
      method: 'POST',
      headers: { 'content-length': '1000' },
    });
    req.on('error', () => undefined);
    req.write(Buffer.alloc(500, 0x61)); // half the body, then the client goes away
    await new Promise((r) => setTimeout(r, 30));
    req.destroy();
    const deadline = Date.now() + 3000;
    while (s.outcomes.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(s.outcomes, ['400 invalid_body']);
  } finally {
    s.close();
  }
});

test('a body within its limit is read whole, an empty one too', async () => {
  const s = await server(1024);
  try {
    for (const body of ['x'.repeat(1024), '']) {
      const r = await fetch(`http://127.0.0.1:${s.port}/`, { method: 'POST', body });
      assert.equal(r.status, 200);
      assert.equal(await r.text(), String(body.length));
    }
  } finally {
    s.close();
  }
});
