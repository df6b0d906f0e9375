// Named attacks, one test each, against a real Harper (docs/http-api.md, "What is refused, and why"); git
// history has the fix each one guards. The generated requests of fuzz.test.ts keep the rest closed.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { basicAuth, startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { until } from '../wait.js';

let h: HarperInstance;
const feeder: Credentials = { username: 'ab-feeder', password: 'ab-feeder-pass' };
const discoverer: Credentials = { username: 'ab-discover', password: 'ab-discover-pass' };
const fleet: Credentials = { username: 'ab-fleet', password: 'ab-fleet-pass' };
const HOUR = 3_600_000;

before(
  async () => {
    h = await startHarper();
    await h.addUser(feeder.username, feeder.password, 'render_feeder');
    await h.addUser(discoverer.username, discoverer.password, 'render_discover');
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
  },
  { timeout: 180_000 },
);

after(async () => {
  await h?.destroy();
});

async function explainRow(url: string) {
  const r = await h.fetch('/prerender_admin/explain', { body: { url: url } });
  assert.equal(r.status, 200, r.text);
  return r.json.row as Record<string, unknown> | null;
}

async function sql(q: string): Promise<Array<Record<string, unknown>>> {
  return (await h.operation({ operation: 'sql', sql: q })) as Array<Record<string, unknown>>;
}

async function restoreConfig(partial: Record<string, unknown>) {
  const r = await h.fetch('/prerender_admin/config', { body: partial });
  assert.equal(r.status, 200, r.text);
}

test('hole 1: a lone surrogate or a control character in a URL is refused per item on targets, discover, delete and the admin bodies', async () => {
  // Sent as raw JSON: the escape \ud800 is a lone surrogate that new URL() accepts; \u0085 is a C1 control.
  const raw = (urls: string[]) => '[' + urls.map((u) => `"${u}"`).join(',') + ']';
  const bad = [
    'https://a1.example.com/p/1\\ud800',
    'https://a1.example.com/p/\\u0085',
    'https://a1.example.com/p/\\"q',
  ];
  const good = 'https://a1.example.com/p/fine';
  const t = await h.fetch('/render_queue/targets', {
    auth: feeder,
    method: 'POST',
    rawBody: `{"targets":[${[...bad, good].map((u) => `{"url":"${u}"}`).join(',')}]}`,
  });
  assert.equal(t.status, 200, t.text);
  assert.equal(t.json.upserted, 1);
  assert.deepEqual(
    t.json.rejected.map((x: { index: number }) => x.index),
    [0, 1, 2],
  );
  assert.match(t.json.rejected[0].error, /well-formed Unicode/);
  assert.match(t.json.rejected[1].error, /control/);
  const d = await h.fetch('/render_queue/discover', {
    auth: discoverer,
    method: 'POST',
    rawBody: `{"urls":${raw(['https://a1.example.com/d/\\ud800', 'https://a1.example.com/d/\\u0085'])}}`,
  });
  assert.deepEqual([d.status, d.json.filed, d.json.rejected.length], [200, 0, 2], d.text);
  const del = await h.fetch('/render_queue/targets', {
    auth: feeder,
    method: 'DELETE',
    rawBody: `{"urls":${raw(['https://a1.example.com/p/1\\ud800'])}}`,
  });
  assert.deepEqual([del.status, del.json.deleted, del.json.rejected.length], [200, 0, 1], del.text);
  for (const path of ['/prerender_admin/explain', '/prerender_admin/revalidate']) {
    const r = await h.fetch(path, { method: 'POST', rawBody: '{"url":"https://a1.example.com/p/1\\ud800"}' });
    assert.deepEqual([r.status, r.json.code], [400, 'invalid_url'], r.text);
  }
  assert.ok(await explainRow(good));
  assert.equal((await sql(`SELECT cacheKey FROM render_schedule.RenderSchedule`)).length, 1);
});

test('hole 2: a cross-site form, a text/plain body, a foreign Origin or Sec-Fetch-Site cross/same-site cannot change state', async () => {
  const before = await sql('SELECT * FROM render_queue.QueueControl');
  const attempts: Array<[string, Record<string, string>, string | undefined, number, string]> = [
    // A <form enctype=text/plain> body that parses as JSON: 415 before anything reads it.
    [
      '/prerender_admin/pause',
      { 'content-type': 'text/plain' },
      '{"scope":"all"}',
      415,
      'unsupported_media_type',
    ],
    [
      '/prerender_admin/pause',
      { 'content-type': 'application/x-www-form-urlencoded' },
      'scope=all',
      415,
      'unsupported_media_type',
    ],
    [
      '/prerender_admin/config',
      { 'content-type': 'text/plain' },
      '{"queue":{"feederRoles":["x"]}}',
      415,
      'unsupported_media_type',
    ],
    // An empty-body form post still carries a content type: refused too.
    ['/prerender_admin/pause', { 'content-type': 'text/plain' }, '', 415, 'unsupported_media_type'],
    ['/prerender_admin/pause', { 'sec-fetch-site': 'cross-site' }, '{"scope":"all"}', 403, 'cross_site'],
    ['/prerender_admin/pause', { 'sec-fetch-site': 'same-site' }, '{"scope":"all"}', 403, 'cross_site'],
    ['/prerender_admin/pause', { origin: 'https://evil.example' }, '{"scope":"all"}', 403, 'cross_site'],
    ['/prerender_admin/pause', { origin: 'null' }, '{"scope":"all"}', 403, 'cross_site'],
    [
      '/prerender_admin/pause',
      { origin: `http://127.0.0.1:${h.ports.http! + 1}` },
      '{"scope":"all"}',
      403,
      'cross_site',
    ],
    [
      '/render_queue/targets',
      { origin: 'https://evil.example' },
      '{"targets":[{"url":"https://x2.example.com/"}]}',
      403,
      'cross_site',
    ],
    // Scope is required, and a hostname must name a node.
    ['/prerender_admin/pause', {}, '{}', 400, 'invalid_scope'],
    ['/prerender_admin/pause', {}, '{"scope":"not-a-node.example"}', 400, 'invalid_scope'],
  ];
  for (const [path, headers, body, status, code] of attempts) {
    const r = await h.fetch(path, { method: 'POST', headers, rawBody: body });
    assert.deepEqual(
      [r.status, r.json?.code],
      [status, code],
      `${path} ${JSON.stringify(headers)}: ${r.text}`,
    );
  }
  assert.deepEqual(await sql('SELECT * FROM render_queue.QueueControl'), before);
  assert.equal((await h.fetch('/prerender_admin/overview')).json.paused, false);
  assert.equal(await explainRow('https://x2.example.com/'), null);
  // The console's own requests: same origin, JSON; and a request with no body needs no content type.
  const same = await h.fetch('/prerender_admin/pause', {
    body: { scope: 'all' },
    headers: { origin: h.url, 'sec-fetch-site': 'same-origin' },
  });
  assert.equal(same.status, 200, same.text);
  const resumed = await h.fetch('/prerender_admin/resume', {
    body: { scope: 'all' },
    headers: { origin: h.url },
  });
  assert.equal(resumed.status, 200, resumed.text);
  const empty = await h.fetch('/prerender_admin/hooks/00000000-0000-0000-0000-000000000000/rotate', {
    method: 'POST',
  });
  assert.equal(empty.status, 404, empty.text);
});

test('hole 2/9: a pause names this node or all; a resume deletes its row, so scopes cannot pile up', async () => {
  const node = (await h.fetch('/prerender_admin/overview')).json.node as string;
  const p = await h.fetch('/prerender_admin/pause', { body: { scope: node } });
  assert.deepEqual(p.json, { scope: node, paused: true });
  const claim = await h.fetch('/render_queue/claim', { auth: fleet, body: {} });
  assert.equal(claim.headers['x-queue-status'], 'paused');
  assert.equal((await sql('SELECT * FROM render_queue.QueueControl')).length, 1);
  const r = await h.fetch('/prerender_admin/resume', { body: { scope: node } });
  assert.deepEqual(r.json, { scope: node, paused: false });
  assert.deepEqual(await sql('SELECT * FROM render_queue.QueueControl'), []);
  for (let i = 0; i < 50; i++) {
    const x = await h.fetch('/prerender_admin/pause', { body: { scope: `host-${i}.example` } });
    assert.equal(x.status, 400);
  }
  assert.deepEqual(await sql('SELECT * FROM render_queue.QueueControl'), []);
});

/** A raw request on one keep-alive socket, so a second request shows whether the first left it usable. */
function onSocket(
  agent: http.Agent,
  path: string,
  method: string,
  write: (req: http.ClientRequest) => void,
  headers: Record<string, string> = {},
) {
  return new Promise<{ status: number; text: string; connection?: string }>((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: h.ports.http,
        path,
        method,
        agent,
        headers: {
          authorization: basicAuth({ username: 'admin', password: 'admin-pass-for-tests' }),
          ...headers,
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, text, connection: res.headers.connection }),
        );
      },
    );
    req.on('error', reject);
    write(req);
  });
}

test('hole 3: bodies over their endpoint limit are 413 from content-length and while chunked, and the next request works', async (t) => {
  await restoreConfig({ render: { maxBatchBytes: 1 << 20 } });
  t.after(() => restoreConfig({ render: { maxBatchBytes: 64 << 20 } }));
  const big = (n: number) =>
    JSON.stringify({
      results: [{ id: 'https://x3.example.com/', leaseToken: 1, outcome: 'rendered', body: 'x'.repeat(n) }],
    });
  // job_results: render.maxBatchBytes, judged from content-length before anything is buffered.
  const batch = await h.fetch('/render_queue/job_results', { auth: fleet, rawBody: big((1 << 20) + 10) });
  assert.deepEqual([batch.status, batch.json.code], [413, 'payload_too_large']);
  // job_result: render.maxBodyBytes + 64 KiB (5 MiB + 64 KiB by default).
  const one = await h.fetch('/render_queue/job_result', {
    auth: fleet,
    rawBody: JSON.stringify({
      id: 'https://x3.example.com/',
      leaseToken: 1,
      outcome: 'rendered',
      body: 'x'.repeat((5 << 20) + (64 << 10)),
    }),
  });
  assert.deepEqual([one.status, one.json.code], [413, 'payload_too_large']);
  // Admin bodies: 1 MiB. Feeding bodies: 16 MiB (17 MiB is refused).
  const admin = await h.fetch('/prerender_admin/config', {
    rawBody: JSON.stringify({ x: 'y'.repeat(1 << 20) }),
  });
  assert.equal(admin.status, 413);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    // Chunked (no content-length): counted while reading, refused once over 16 MiB, never buffered whole.
    const chunk = Buffer.alloc(1 << 20, 'x');
    const chunked = await onSocket(
      agent,
      '/render_queue/targets',
      'POST',
      (req) => {
        req.write('{"targets":[{"url":"https://x3.example.com/","pad":"');
        let n = 0;
        const pump = () => {
          while (n < 17) {
            n++;
            if (!req.write(chunk)) return void req.once('drain', pump);
          }
          req.end('"}]}');
        };
        pump();
      },
      { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    );
    assert.equal(chunked.status, 413, chunked.text);
    assert.equal(chunked.connection, 'close');
    // The next request on the same agent gets a clean answer, not a half-read socket.
    const next = await onSocket(agent, '/prerender_admin/health', 'GET', (req) => req.end());
    assert.equal(next.status, 200, next.text);
    const declared = await onSocket(
      agent,
      '/prerender_admin/config',
      'POST',
      (req) => req.end('{"a":"' + 'z'.repeat(1 << 20) + '"}'),
      {
        'content-type': 'application/json',
      },
    );
    assert.equal(declared.status, 413);
    const again = await onSocket(agent, '/prerender_admin/health', 'GET', (req) => req.end());
    assert.equal(again.status, 200);
  } finally {
    agent.destroy();
  }
  assert.equal(await explainRow('https://x3.example.com/'), null);
});

/**
 * One raw connection: `send` writes bytes, `response()` resolves with the next whole HTTP response's
 * status line, headers and body (content-length framed), or rejects after `ms` with what had arrived.
 */
function rawConnection(port: number) {
  const sock = net.connect(port, '127.0.0.1');
  let buf = Buffer.alloc(0);
  let wake: (() => void) | null = null;
  sock.on('data', (c: Buffer) => {
    buf = Buffer.concat([buf, c]);
    wake?.();
  });
  const parse = () => {
    const text = buf.toString('latin1');
    for (;;) {
      const headEnd = text.indexOf('\r\n\r\n');
      if (headEnd < 0) return undefined;
      const head = text.slice(0, headEnd);
      const status = Number(head.slice(9, 12));
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (status === 100) {
        buf = buf.subarray(headEnd + 4);
        return parse();
      }
      if (buf.length < headEnd + 4 + length) return undefined;
      const body = buf.subarray(headEnd + 4, headEnd + 4 + length).toString('utf8');
      buf = buf.subarray(headEnd + 4 + length);
      return { status, head: head.toLowerCase(), body };
    }
  };
  return {
    send: (b: string | Buffer) => new Promise<void>((r) => sock.write(b, () => r())),
    response: (ms: number) =>
      new Promise<{ status: number; head: string; body: string }>((resolve, reject) => {
        const timer = setTimeout(() => {
          wake = null;
          reject(
            new Error(`no whole response within ${ms} ms; got ${JSON.stringify(buf.toString('latin1'))}`),
          );
        }, ms);
        wake = () => {
          const r = parse();
          if (r === undefined) return;
          clearTimeout(timer);
          wake = null;
          resolve(r);
        };
        wake();
      }),
    close: () => sock.destroy(),
  };
}

test('a declared body over the limit is answered 413 at once, and the connection serves again once the body is in', async () => {
  const auth = basicAuth({ username: 'admin', password: 'admin-pass-for-tests' });
  const declared = 2_000_000; // admin bodies: 1 MiB
  const stallAfter = (await h.fetch('/prerender_admin/config')).json.stall.after;
  const c = rawConnection(Number(h.ports.http));
  try {
    await c.send(
      `POST /prerender_admin/config HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: ${auth}\r\n` +
        `content-type: application/json\r\ncontent-length: ${declared}\r\n\r\n{"stall":`,
    );
    // Before this change the answer waited for all 2,000,000 bytes: this wait would time out.
    const early = await c.response(10_000);
    assert.equal(early.status, 413, early.body);
    assert.equal(JSON.parse(early.body).code, 'payload_too_large');
    assert.ok(!early.head.includes('connection: close'), early.head);
    await c.send(Buffer.alloc(declared - 9, 0x20));
    await c.send(`GET /prerender_admin/health HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: ${auth}\r\n\r\n`);
    const next = await c.response(10_000);
    assert.equal(next.status, 200, next.body);
  } finally {
    c.close();
  }
  // Expect: 100-continue gets the final 413 without sending a byte of the body.
  const e = rawConnection(Number(h.ports.http));
  try {
    await e.send(
      `POST /render_queue/targets HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: ${auth}\r\n` +
        `content-type: application/json\r\nexpect: 100-continue\r\ncontent-length: ${(16 << 20) + 1}\r\n\r\n`,
    );
    const refused = await e.response(10_000);
    assert.equal(refused.status, 413, refused.body);
  } finally {
    e.close();
  }
  assert.equal((await h.fetch('/prerender_admin/config')).json.stall.after, stallAfter, 'nothing applied');
});

test('hole 4: unknown config keys with a newline, a ✓ or by the thousand never break the answer or half-apply', async (t) => {
  t.after(() => restoreConfig({ stall: { after: 120000 } }));
  const hostile = { 'evil\r\nx-injected: 1': 1, 'check✓': 2, 'lone\ud800': 3, stall: { after: 4321 } };
  const r = await h.fetch('/prerender_admin/config', { body: hostile });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.stall.after, 4321);
  assert.equal(r.headers['x-injected'], undefined);
  assert.equal(r.headers['x-ignored-count'], '3');
  assert.deepEqual(String(r.headers['x-ignored-keys']).split(',').map(decodeURIComponent), [
    'evil\r\nx-injected: 1',
    'check✓',
    'lone\ufffd',
  ]);
  const many = Object.fromEntries(
    Array.from({ length: 5000 }, (_, i) => [`unknown-key-${i}-${'k'.repeat(50)}`, i]),
  );
  const m = await h.fetch('/prerender_admin/config', { body: many });
  assert.equal(m.status, 200);
  assert.equal(m.headers['x-ignored-count'], '5000');
  assert.ok(String(m.headers['x-ignored-keys']).length <= 1024);
  // A bad value next to a good one applies neither.
  const half = await h.fetch('/prerender_admin/config', { body: { stall: { after: 9999, maxNudges: 0 } } });
  assert.deepEqual([half.status, half.json.code, half.json.key], [400, 'invalid_config', 'stall.maxNudges']);
  assert.equal((await h.fetch('/prerender_admin/config')).json.stall.after, 4321);
  // The warn-once set is bounded: a flood of unknown keys ends in one line, not 5,000.
  await until(
    'the one overflow warning',
    () => /Unknown configuration keys keep arriving/.test(h.output()),
    5000,
  );
  assert.ok((h.output().match(/Unknown configuration key unknown-key-/g) ?? []).length <= 1000);
});

test('hole 4: a result whose id is nested 100,000 deep is a 400, never a 500', async () => {
  const deep = '['.repeat(100_000) + ']'.repeat(100_000);
  for (const path of ['/render_queue/job_results', '/render_queue/job_result', '/render_queue/claim']) {
    const body = path.endsWith('results')
      ? `{"results":[{"id":${deep},"leaseToken":1,"outcome":"rendered"}]}`
      : path.endsWith('claim')
        ? `{"limit":${deep}}`
        : `{"id":${deep},"leaseToken":1,"outcome":"rendered"}`;
    const r = await h.fetch(path, { auth: fleet, rawBody: body });
    assert.deepEqual([r.status, r.json.code], [400, 'invalid_json'], `${path}: ${r.text.slice(0, 200)}`);
  }
});

test('hole 5: bad notify.allowCidrs entries are refused naming the key, and hooks keep working', async (t) => {
  for (const bad of ['10.0.0.0/40', '999.1.1.1', '::::']) {
    const r = await h.fetch('/prerender_admin/config', { body: { notify: { allowCidrs: [bad] } } });
    assert.deepEqual([r.status, r.json.code, r.json.key], [400, 'invalid_config', 'notify.allowCidrs'], bad);
  }
  assert.deepEqual((await h.fetch('/prerender_admin/config')).json.notify.allowCidrs, []);
  const f = await h.fetch('/prerender_admin/fleets', { body: { name: 'cidr-fleet' } });
  t.after(() => h.fetch(`/prerender_admin/fleets/${f.json.id}`, { method: 'DELETE' }));
  const hook = await h.fetch('/prerender_admin/hooks', {
    body: { fleetId: f.json.id, url: 'https://10.1.2.3/hook' },
  });
  assert.deepEqual([hook.status, hook.json.code], [400, 'invalid_url'], hook.text);
  assert.match(hook.json.error, /private address/);
});

test('hole 6: without credentials every path and method under both prefixes is 401, never 404 or 405', async () => {
  const cases: Array<[string, string]> = [
    ['GET', '/render_queue/no-such-thing'],
    ['GET', '/prerender_admin/secret/route/x'],
    ['GET', '/render_queue/claim'],
    ['HEAD', '/prerender_admin/config'],
    ['OPTIONS', '/render_queue/targets'],
    ['PUT', '/prerender_admin/config'],
    ['DELETE', '/prerender_admin/nothing'],
    ['PATCH', '/render_queue/%ff'],
    ['GET', '/render_queue'],
  ];
  for (const [method, path] of cases) {
    const r = await h.fetch(path, { method, auth: null });
    assert.equal(r.status, 401, `${method} ${path}`);
    if (method !== 'HEAD') assert.equal(r.json.code, 'unauthenticated');
  }
  // The same paths as absolute-form request targets (RFC 9112 §3.2.2): 401 without credentials, and the
  // route itself with them. (Harper answered both with its plain 404 before.)
  const auth = basicAuth({ username: 'admin', password: 'admin-pass-for-tests' });
  const c = rawConnection(Number(h.ports.http));
  try {
    const base = `http://127.0.0.1:${h.ports.http}`;
    await c.send(`GET ${base}/render_queue/claim HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`);
    const anonymous = await c.response(10_000);
    assert.equal(anonymous.status, 401, anonymous.body);
    assert.equal(JSON.parse(anonymous.body).code, 'unauthenticated');
    await c.send(
      `GET ${base}/prerender_admin/config HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: ${auth}\r\n\r\n`,
    );
    const admin = await c.response(10_000);
    assert.equal(admin.status, 200, admin.body);
    assert.ok(JSON.parse(admin.body).stall, 'the config itself');
  } finally {
    c.close();
  }
});

test('hole 6: a refresh token sent as a Bearer token is 401 in the API shape, not Harper’s plain 404', async () => {
  const tokens = (await h.operation({
    operation: 'create_authentication_tokens',
    username: fleet.username,
    password: fleet.password,
  })) as { operation_token: string; refresh_token: string };
  const bearer = (token: string) => ({ auth: null, headers: { authorization: `Bearer ${token}` } });
  const cases: Array<[string, string]> = [
    ['POST', '/render_queue/claim'],
    ['GET', '/prerender_admin/queue-state'],
    ['DELETE', '/prerender_admin/anything'],
  ];
  for (const [method, path] of cases) {
    const r = await h.fetch(path, {
      method,
      ...bearer(tokens.refresh_token),
      ...(method === 'POST' ? { body: { limit: 1 } } : {}),
    });
    assert.deepEqual([r.status, r.json?.code], [401, 'unauthenticated'], `${method} ${path}`);
  }
  const ok = await h.fetch('/render_queue/claim', { ...bearer(tokens.operation_token), body: { limit: 1 } });
  assert.equal(ok.status, 200, 'the operation token itself is accepted');
});

test('hole 7: names and URLs that would not fit a 4 KiB wake are refused where they enter', async () => {
  const longFleet = await h.fetch('/prerender_admin/fleets', { body: { name: 'f'.repeat(61) } });
  assert.deepEqual([longFleet.status, longFleet.json.code], [400, 'invalid_name']);
  const quoteFleet = await h.fetch('/prerender_admin/fleets', { body: { name: 'a"b' } });
  assert.deepEqual([quoteFleet.status, quoteFleet.json.code], [400, 'invalid_name']);
  const route = await h.fetch('/prerender_admin/config', {
    body: { render: { routes: [{ name: 'r'.repeat(65), match: 'prefix', path: '/p/' }] } },
  });
  assert.deepEqual([route.status, route.json.key], [400, 'render.routes[0].name']);
  const escaped = await h.fetch('/render_queue/targets', {
    auth: feeder,
    body: { targets: [{ url: 'https://x7.example.com/"a"' }, { url: 'https://x7.example.com/a\\b' }] },
  });
  assert.equal(escaped.json.rejected.length, 2);
});

test('hole 10: due times before 2000 or beyond ten years, non-finite numbers and absurd cadences are refused per item', async () => {
  const now = Date.now();
  const r = await h.fetch('/render_queue/targets', {
    auth: feeder,
    method: 'POST',
    rawBody: JSON.stringify({
      targets: [
        { url: 'https://x10.example.com/a', dueAt: 0 },
        { url: 'https://x10.example.com/b', dueAt: now + 11 * 365 * 24 * HOUR },
        { url: 'https://x10.example.com/c', dueAt: 'INF' },
        { url: 'https://x10.example.com/d', cadenceMs: 1 },
        { url: 'https://x10.example.com/e', cadenceMs: 'INF' },
        { url: 'https://x10.example.com/ok', dueAt: now + HOUR },
      ],
    }).replace(/"INF"/g, '1e999'),
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(
    r.json.rejected.map((x: { index: number }) => x.index),
    [0, 1, 2, 3, 4],
  );
  assert.match(r.json.rejected[0].error, /2000-01-01/);
  assert.equal(r.json.upserted, 1);
  const claim = await h.fetch('/render_queue/claim', { auth: fleet, rawBody: '{"limit":1e999}' });
  assert.deepEqual([claim.status, claim.json.code], [400, 'invalid_limit']);
  const cfg = await h.fetch('/prerender_admin/config', { rawBody: '{"stall":{"after":1e999}}' });
  assert.deepEqual([cfg.status, cfg.json.key], [400, 'stall.after']);
});

test('SSRF: IPv4-mapped, NAT64, decimal, octal, hex, short and trailing-dot forms are refused without dialing', async (t) => {
  // A listener on 127.0.0.1 counts connections: nothing may dial it (or anything) while hooks are checked.
  let dials = 0;
  const srv = net.createServer((s) => {
    dials++;
    s.destroy();
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => srv.close());
  const port = (srv.address() as AddressInfo).port;
  const f = await h.fetch('/prerender_admin/fleets', { body: { name: 'ssrf-fleet' } });
  t.after(() => h.fetch(`/prerender_admin/fleets/${f.json.id}`, { method: 'DELETE' }));
  const forms: Array<[string, RegExp]> = [
    [`https://[::ffff:127.0.0.1]:${port}/`, /loopback/],
    [`https://[::ffff:7f00:1]:${port}/`, /loopback/],
    ['https://[::ffff:10.0.0.1]/', /private/],
    ['https://[64:ff9b::a00:1]/', /private/],
    ['https://[64:ff9b::a9fe:a9fe]/', /metadata/],
    [`https://2130706433:${port}/`, /loopback/],
    [`https://0177.0.0.1:${port}/`, /loopback/],
    [`https://0x7f.0.0.1:${port}/`, /loopback/],
    [`https://127.1:${port}/`, /loopback/],
    [`https://127.0.0.1.:${port}/`, /loopback/],
    ['https://169.254.169.254./latest/meta-data', /metadata/],
    ['https://0xa9fea9fe/', /metadata/],
    ['https://0/', /unspecified/],
    [`https://[::1]:${port}/`, /loopback/],
  ];
  for (const [url, phrase] of forms) {
    const r = await h.fetch('/prerender_admin/hooks', { body: { fleetId: f.json.id, url } });
    assert.deepEqual([r.status, r.json.code], [400, 'invalid_url'], `${url}: ${r.text}`);
    assert.match(r.json.error, phrase, url);
    assert.doesNotMatch(r.json.error, /127\.0\.0\.1|10\.0\.0\.1|169\.254/, 'no resolved address is echoed');
  }
  assert.equal(dials, 0);
  assert.deepEqual((await h.fetch(`/prerender_admin/hooks?fleetId=${f.json.id}`)).json, []);
});
