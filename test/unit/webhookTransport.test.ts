// The pinned undici transport against real receivers on 127.0.0.1. A guard wraps every socket connect in
// this process: a dial to anything but 127.0.0.1, or a DNS lookup that is not the agent's pinned one,
// fails the test before a packet leaves — so the SSRF refusals below are proven without dialing.
import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import net, { isIP, type AddressInfo, type LookupFunction } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { parseAllowList, validateHookHost, type HostPolicy } from '../../util/notify/addressPolicy.js';
import { classifyResponse } from '../../util/notify/deliveryPolicy.js';
import { mintSecret, webhookHeaders } from '../../util/notify/webhookSignature.js';
import { createPinnedAgent, deliver, type PinnedAgentOptions } from '../../services/notify/transport.js';

// ---------------------------------------------------------------- the no-packet guard

/** Every address a socket was allowed to dial, in order. */
const dialed: string[] = [];
/** Anything that tried to leave loopback; must stay empty. */
const violations: string[] = [];
const LOOPBACK = '127.0.0.1';

const realConnect = net.Socket.prototype.connect;
const realLookup = dns.lookup;

function connectOptions(args: unknown[]): net.TcpNetConnectOpts | null {
  const first = args[0];
  if (Array.isArray(first)) return first[0] as net.TcpNetConnectOpts;
  if (typeof first === 'object' && first !== null) return first as net.TcpNetConnectOpts;
  if (typeof first === 'number')
    return { port: first, host: typeof args[1] === 'string' ? args[1] : undefined };
  return null;
}

/** Wraps the agent's lookup so its answers are checked too: a pinned name must land on 127.0.0.1. */
function guardedLookup(inner: LookupFunction): LookupFunction {
  return (hostname, options, callback) =>
    inner(hostname, options, (err, address, family) => {
      const answers = Array.isArray(address) ? address.map((a) => a.address) : [address];
      const bad = err ? [] : answers.filter((a) => a !== LOOPBACK);
      if (bad.length > 0) {
        violations.push(`lookup of ${hostname} answered ${bad.join(',')}`);
        callback(new Error('test guard: lookup left loopback'), '', 0);
        return;
      }
      if (!err) dialed.push(...answers);
      callback(err, address, family);
    });
}

before(() => {
  net.Socket.prototype.connect = function guarded(this: net.Socket, ...args: unknown[]) {
    const o = connectOptions(args);
    if (o !== null && (o as { path?: string }).path === undefined) {
      const host = o.host ?? 'localhost';
      if (isIP(host) !== 0) {
        if (host !== LOOPBACK) {
          violations.push(`dial to ${host}`);
          this.destroy(new Error('test guard: dial left loopback'));
          return this;
        }
        dialed.push(host);
      } else if (typeof o.lookup !== 'function') {
        violations.push(`name ${host} dialed without a pinned lookup`);
        this.destroy(new Error('test guard: unpinned name'));
        return this;
      } else {
        o.lookup = guardedLookup(o.lookup);
      }
    }
    return realConnect.apply(this, args as Parameters<typeof realConnect>);
  } as typeof realConnect;
  // The platform resolver may send packets; only the receivers' own listen() on the literal 127.0.0.1
  // (answered in-process, no query) may use it.
  dns.lookup = function guardedSystemLookup(this: unknown, hostname: string, ...rest: unknown[]) {
    if (hostname !== LOOPBACK) {
      violations.push(`system DNS lookup of ${hostname}`);
      throw new Error('test guard: system DNS used');
    }
    return (realLookup as (...a: unknown[]) => unknown).call(this, hostname, ...rest);
  } as unknown as typeof dns.lookup;
});

after(() => {
  net.Socket.prototype.connect = realConnect;
  dns.lookup = realLookup;
});

afterEach(() => {
  const seen = violations.splice(0);
  dialed.length = 0;
  assert.deepEqual(seen, [], 'a socket or lookup tried to leave loopback');
});

// ---------------------------------------------------------------- receivers and agents

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  servername?: string | false;
}

type Reply = (req: http.IncomingMessage, res: http.ServerResponse) => void;

// Self-signed for hooks.test, valid 2000–2100; only ever served on 127.0.0.1 inside this test.
const TLS_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg11I2EGlQW2VUcwPo
E1yH0xwfbJFDrVIbJ8VGUDuTB/+hRANCAAS7jeyLwenaQftaTv5zGMLCo2s5f8k0
nNx68CsekNU609HpHFF/dqEkLs3McrBdysWGxGG6LUDnBWk6nk9WVVwB
-----END PRIVATE KEY-----
`;
const TLS_CERT = `-----BEGIN CERTIFICATE-----
MIIBYDCCAQegAwIBAgIBATAKBggqhkjOPQQDAjAVMRMwEQYDVQQDDApob29rcy50
ZXN0MCAXDTAwMDEwMTAwMDAwMFoYDzIxMDAwMTAxMDAwMDAwWjAVMRMwEQYDVQQD
DApob29rcy50ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEu43si8Hp2kH7
Wk7+cxjCwqNrOX/JNJzcevArHpDVOtPR6RxRf3ahJC7NzHKwXcrFhsRhui1A5wVp
Op5PVlVcAaNGMEQwFQYDVR0RBA4wDIIKaG9va3MudGVzdDAMBgNVHRMBAf8EAjAA
MB0GA1UdDgQWBBSDznYZLhua2hXPv0lpuJHWwNVe2zAKBggqhkjOPQQDAgNHADBE
AiAbiyigAwvLr6Q+OyEtTcBNuegtpSrloMF+ud1pKz4BmAIgJH6BUP2N2TdeKpE3
HFePqkJi4yIANN1HyhmwtNFhWUk=
-----END CERTIFICATE-----
`;

async function receiver(
  reply: Reply,
  tls = false,
): Promise<{ port: number; seen: Seen[]; close: () => void }> {
  const seen: Seen[] = [];
  const handler: http.RequestListener = (req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      const servername = (req.socket as { servername?: string | false }).servername;
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body, servername });
      reply(req, res);
    });
  };
  const server = tls
    ? https.createServer({ key: TLS_KEY, cert: TLS_CERT }, handler)
    : http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, LOOPBACK, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    port,
    seen,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

const ok204: Reply = (_req, res) => res.writeHead(204).end();

let validations = 0;

function agentFor(
  dnsTable: Record<string, string[]>,
  allow: string[],
  extra: Partial<PinnedAgentOptions> = {},
) {
  const policy: HostPolicy = {
    allowList: parseAllowList(allow),
    selfAddresses: [LOOPBACK, '::1'],
    resolve: async (host) => {
      const answer = dnsTable[host];
      if (answer === undefined) throw new Error('ENOTFOUND');
      return answer;
    },
  };
  return createPinnedAgent({
    validate: (host) => {
      validations++;
      return validateHookHost(host, policy);
    },
    connectTimeoutMs: 2000,
    ...extra,
  });
}

const post = (url: string, agent: ReturnType<typeof createPinnedAgent>, timeoutMs = 5000) =>
  deliver({
    url,
    headers: { 'content-type': 'application/json' },
    body: '{"type":"render.ready"}',
    timeoutMs,
    agent,
  });

// ---------------------------------------------------------------- tests

test('a signed delivery reaches a receiver on 127.0.0.1 opened by an exact allow-list entry', async () => {
  const rx = await receiver(ok204);
  const agent = agentFor({}, ['127.0.0.1']);
  try {
    const secret = mintSecret();
    const body = JSON.stringify({ type: 'render.ready', reason: 'stalled', attempt: 1 });
    const headers = webhookHeaders({
      msgId: 'msg_t1',
      timestampSec: Math.floor(Date.now() / 1000),
      body,
      secrets: [secret],
      userAgent: 'queue-keeper/test',
    });
    const outcome = await deliver({
      url: `http://127.0.0.1:${rx.port}/hook?token=t`,
      headers,
      body,
      timeoutMs: 5000,
      agent,
    });
    assert.deepEqual(outcome, { status: 204 });
    assert.equal(classifyResponse(outcome), 'success');
    assert.equal(rx.seen.length, 1);
    const got = rx.seen[0]!;
    assert.equal(got.method, 'POST');
    assert.equal(got.url, '/hook?token=t');
    assert.equal(got.headers['user-agent'], 'queue-keeper/test');
    assert.deepEqual(
      new Webhook(secret).verify(got.body, got.headers as Record<string, string>),
      JSON.parse(body),
    );
    assert.deepEqual(dialed, [LOOPBACK]);
  } finally {
    await agent.close();
    rx.close();
  }
});

test('a host name is dialed only at the address its validation returned', async () => {
  const rx = await receiver(ok204);
  // Without the pinned lookup the socket would ask the system resolver again (a second, unchecked answer);
  // the guard then records a violation and this test fails — checked once by removing the pin.
  const agent = agentFor({ 'hooks.test': [LOOPBACK] }, ['127.0.0.1']);
  try {
    assert.deepEqual(await post(`http://hooks.test:${rx.port}/h`, agent), { status: 204 });
    assert.equal(rx.seen[0]!.headers.host, `hooks.test:${rx.port}`);
    assert.deepEqual(dialed, [LOOPBACK]);
  } finally {
    await agent.close();
    rx.close();
  }
});

test('https names the hook host in SNI and the certificate check while dialing the pinned address', async () => {
  const rx = await receiver(ok204, true);
  const agent = agentFor({ 'hooks.test': [LOOPBACK] }, ['127.0.0.1'], { ca: TLS_CERT });
  const untrusting = agentFor({ 'hooks.test': [LOOPBACK] }, ['127.0.0.1']);
  try {
    assert.deepEqual(await post(`https://hooks.test:${rx.port}/h`, agent), { status: 204 });
    assert.equal(rx.seen[0]!.servername, 'hooks.test');
    // Without the private CA the certificate is not trusted: a network failure with a plain phrase.
    assert.deepEqual(await post(`https://hooks.test:${rx.port}/h`, untrusting), {
      error: 'network',
      phrase: 'TLS handshake failed',
    });
  } finally {
    await agent.close();
    await untrusting.close();
    rx.close();
  }
});

test('the same receiver without an exact entry is refused and never dialed', async () => {
  const rx = await receiver(ok204);
  const none = agentFor({}, []);
  const broad = agentFor({}, ['127.0.0.0/8', '0.0.0.0/0']);
  try {
    for (const agent of [none, broad]) {
      assert.deepEqual(await post(`http://127.0.0.1:${rx.port}/`, agent), {
        error: 'refused',
        phrase: 'resolves to a loopback address',
      });
    }
    assert.equal(rx.seen.length, 0);
    assert.deepEqual(dialed, []);
  } finally {
    await none.close();
    await broad.close();
    rx.close();
  }
});

test('a name resolving to a private address is refused without dialing anything', async () => {
  const agent = agentFor(
    { 'internal.test': ['10.0.0.5'], 'mixed.test': [LOOPBACK, '10.0.0.5'], 'meta.test': ['169.254.169.254'] },
    ['127.0.0.1'],
  );
  try {
    const cases: [string, string][] = [
      ['http://internal.test/hook', 'resolves to a private address'],
      ['http://mixed.test:8080/hook', 'resolves to a private address'],
      ['http://meta.test/latest', 'resolves to a cloud metadata address'],
      ['http://10.0.0.5/hook', 'resolves to a private address'],
      ['http://169.254.169.254/latest', 'resolves to a cloud metadata address'],
      ['http://[::ffff:10.0.0.5]/', 'resolves to a private address'],
      ['http://nowhere.test/', 'does not resolve'],
    ];
    for (const [url, phrase] of cases) {
      const outcome = await post(url, agent);
      assert.deepEqual(outcome, { error: 'refused', phrase }, url);
      assert.equal(classifyResponse(outcome), 'fail');
    }
    assert.deepEqual(dialed, [], 'nothing was dialed');
  } finally {
    await agent.close();
  }
});

test('a literal host is dialed only when the validator vouched for that very address', async () => {
  // A validator answering for some other address must not open the literal the socket would dial.
  const agent = createPinnedAgent({
    validate: async () => ({ ok: true, addresses: [LOOPBACK] }),
    connectTimeoutMs: 2000,
  });
  try {
    assert.deepEqual(await post('http://10.0.0.5/hook', agent), {
      error: 'refused',
      phrase: 'does not resolve',
    });
    assert.deepEqual(dialed, []);
  } finally {
    await agent.close();
  }
});

test('every attempt validates again, so a name that rebinds to a private address is caught', async () => {
  const rx = await receiver(ok204);
  // Race guard: the check-then-dial window is closed by validating on every new connection and by never
  // reusing one. With keep-alive back on (`pipelining: 0` removed) this test fails — checked once by hand.
  const table: Record<string, string[]> = { 'rebind.test': [LOOPBACK] };
  const agent = agentFor(table, ['127.0.0.1']);
  try {
    validations = 0;
    assert.deepEqual(await post(`http://rebind.test:${rx.port}/`, agent), { status: 204 });
    assert.deepEqual(await post(`http://rebind.test:${rx.port}/`, agent), { status: 204 });
    assert.equal(validations, 2, 'no pooled connection skips the check');
    table['rebind.test'] = ['10.1.2.3'];
    assert.deepEqual(await post(`http://rebind.test:${rx.port}/`, agent), {
      error: 'refused',
      phrase: 'resolves to a private address',
    });
    assert.equal(rx.seen.length, 2);
    assert.deepEqual(dialed, [LOOPBACK, LOOPBACK]);
  } finally {
    await agent.close();
    rx.close();
  }
});

test('a 302 is reported as the answer and never followed, even towards metadata', async () => {
  let port = 0;
  const rx = await receiver((req, res) => {
    const to = req.url === '/hook' ? `http://127.0.0.1:${port}/elsewhere` : 'http://169.254.169.254/latest';
    res.writeHead(302, { location: to }).end();
  });
  port = rx.port;
  const agent = agentFor({}, ['127.0.0.1']);
  try {
    for (const path of ['/hook', '/meta']) {
      const outcome = await post(`http://127.0.0.1:${port}${path}`, agent);
      assert.deepEqual(outcome, { status: 302 });
      assert.equal(classifyResponse(outcome), 'fail');
    }
    assert.deepEqual(
      rx.seen.map((s) => s.url),
      ['/hook', '/meta'],
    );
  } finally {
    await agent.close();
    rx.close();
  }
});

test('a receiver that never answers times out within the attempt limit', async () => {
  const rx = await receiver(() => undefined);
  const agent = agentFor({}, ['127.0.0.1']);
  try {
    const outcome = await post(`http://127.0.0.1:${rx.port}/slow`, agent, 200);
    assert.deepEqual(outcome, { error: 'timeout', phrase: 'timed out' });
    assert.equal(classifyResponse(outcome), 'retry');
  } finally {
    await agent.close();
    rx.close();
  }
});

test('a receiver that drops the connection is a network error whose phrase names no address', async () => {
  const rx = await receiver((req) => req.socket.destroy());
  const closed = await receiver(ok204);
  closed.close();
  const agent = agentFor({}, ['127.0.0.1']);
  try {
    const reset = await post(`http://127.0.0.1:${rx.port}/`, agent);
    assert.deepEqual(reset, { error: 'network', phrase: 'connection reset' });
    const refused = await post(`http://127.0.0.1:${closed.port}/`, agent);
    assert.deepEqual(refused, { error: 'network', phrase: 'connection refused' });
    assert.equal(classifyResponse(refused), 'retry');
  } finally {
    await agent.close();
    rx.close();
  }
});

test('proxy variables in the environment are ignored', async () => {
  const rx = await receiver(ok204);
  const agent = agentFor({}, ['127.0.0.1']);
  const saved = { http: process.env.HTTP_PROXY, https: process.env.HTTPS_PROXY };
  // A proxy on a private address: if it were used, the guard would record a dial to it.
  process.env.HTTP_PROXY = 'http://10.0.0.1:3128';
  process.env.HTTPS_PROXY = 'http://10.0.0.1:3128';
  try {
    assert.deepEqual(await post(`http://127.0.0.1:${rx.port}/`, agent), { status: 204 });
    assert.deepEqual(dialed, [LOOPBACK]);
  } finally {
    if (saved.http === undefined) delete process.env.HTTP_PROXY;
    else process.env.HTTP_PROXY = saved.http;
    if (saved.https === undefined) delete process.env.HTTPS_PROXY;
    else process.env.HTTPS_PROXY = saved.https;
    await agent.close();
    rx.close();
  }
});

test('a temporary DNS failure (EAI_AGAIN) is a retryable dns outcome, not a refusal, and dials nothing', async () => {
  const eaiAgain = Object.assign(new Error('getaddrinfo EAI_AGAIN flaky.test'), { code: 'EAI_AGAIN' });
  const enotfound = Object.assign(new Error('getaddrinfo ENOTFOUND gone.test'), { code: 'ENOTFOUND' });
  const policy: HostPolicy = {
    allowList: [],
    selfAddresses: [LOOPBACK],
    resolve: async (host) => {
      throw host === 'flaky.test' ? eaiAgain : enotfound;
    },
  };
  const agent = createPinnedAgent({
    validate: (host) => validateHookHost(host, policy),
    connectTimeoutMs: 2000,
  });
  try {
    const flaky = await post('https://flaky.test/hook', agent);
    assert.deepEqual(flaky, {
      error: 'dns',
      phrase: 'could not be resolved just now (temporary DNS failure)',
    });
    assert.equal(classifyResponse(flaky), 'retry');
    // A name that does not exist is the name's own answer: refused, not retried.
    const gone = await post('https://gone.test/hook', agent);
    assert.deepEqual(gone, { error: 'refused', phrase: 'does not resolve' });
    assert.equal(classifyResponse(gone), 'fail');
    assert.deepEqual(dialed, []);
  } finally {
    await agent.close();
  }
});
