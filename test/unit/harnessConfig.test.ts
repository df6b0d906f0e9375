// The root config the harness hands Harper, without Harper: every listener on 127.0.0.1 (none on `::`,
// which 4.7.29 opens for an authentication listener with no port and, in workers after the first, for
// the operations domain socket), a test's own `harperConfig` merged in without losing those settings,
// and a config that would listen beyond loopback refused before anything starts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { harperRootConfig, loopbackProblems, mergeConfig } from '../harness.js';

const ports = { http: 12001, ops: 12002, mqtt: 12003, mqtts: 12004, repl: 12005 };

test('the default config pins authentication to the HTTP port and has no domain socket', () => {
  const c = harperRootConfig({}, ports) as Record<string, Record<string, unknown>>;
  assert.deepEqual(loopbackProblems(c), []);
  assert.equal(c.authentication!.port, '127.0.0.1:12001');
  assert.equal(c.authentication!.authorizeLocal, false);
  assert.deepEqual(c.operationsApi!.network, {
    port: '127.0.0.1:12002',
    securePort: null,
    domainSocket: null,
  });
  assert.deepEqual(c.replication, { securePort: '127.0.0.1:12005' });
  assert.deepEqual(c.threads, { count: 2 });
});

test('a cluster node replicates on its HTTP port', () => {
  const c = harperRootConfig({ replicationHostname: 'node-a', threads: 1 }, ports);
  assert.deepEqual(c.replication, {
    hostname: 'node-a',
    url: 'ws://127.0.0.1:12001',
    port: '127.0.0.1:12001',
    securePort: '127.0.0.1:12005',
  });
  assert.deepEqual(c.threads, { count: 1 });
});

test("a test's own authentication, operationsApi and replication keep the loopback settings", () => {
  const c = harperRootConfig(
    {
      harperConfig: {
        authentication: { cacheTTL: 1000 },
        operationsApi: { network: { cors: false } },
        replication: { hostname: 'node-b' },
        threads: { count: 2, debug: { host: '127.0.0.1' } },
        logging: { level: 'warn' },
      },
    },
    ports,
  ) as Record<string, Record<string, unknown>>;
  assert.deepEqual(c.authentication, { authorizeLocal: false, port: '127.0.0.1:12001', cacheTTL: 1000 });
  assert.deepEqual(c.operationsApi!.network, {
    port: '127.0.0.1:12002',
    securePort: null,
    domainSocket: null,
    cors: false,
  });
  assert.deepEqual(c.replication, { securePort: '127.0.0.1:12005', hostname: 'node-b' });
  assert.deepEqual(c.threads, { count: 2, debug: { host: '127.0.0.1' } });
  assert.deepEqual(c.logging, { level: 'warn', stdStreams: true });
});

test('a config that would listen beyond loopback is refused, with the reason', () => {
  const refused = (harperConfig: Record<string, unknown>, reason: RegExp) =>
    assert.throws(() => harperRootConfig({ harperConfig }, ports), reason);
  refused({ operationsApi: { network: { domainSocket: '/tmp/ops.sock' } } }, /domainSocket must be null/);
  refused({ authentication: { port: null } }, /authentication.port must be http.port/);
  refused({ http: { securePort: 12009 } }, /http.securePort is 12009, not "127.0.0.1:<port>"/);
  refused({ mqtt: { network: { port: '0.0.0.0:1883' } } }, /mqtt.network.port is "0.0.0.0:1883"/);
  refused(
    { replication: { url: 'ws://127.0.0.1:12010', port: '127.0.0.1:12010' } },
    /replication.port must be http.port .* add_node fails/,
  );
});

test('mergeConfig merges nested objects and lets any other value replace', () => {
  assert.deepEqual(mergeConfig({ a: { b: 1, c: 2 }, d: [1], e: 1 }, { a: { c: null }, d: [2], f: 'x' }), {
    a: { b: 1, c: null },
    d: [2],
    e: 1,
    f: 'x',
  });
});
