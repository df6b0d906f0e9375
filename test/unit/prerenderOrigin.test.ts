// The origin prerender fleets reach a node at (util/prerender/origin.ts): derived by the fleet's own rule.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { derivedOrigin, httpPortOf, originHost } from '../../util/prerender/origin.js';

test("a derived origin follows the fleet's rule: http for localhost and 127.0.0.1, https for any other name", () => {
  assert.equal(derivedOrigin('127.0.0.1', 9926), 'http://127.0.0.1:9926');
  assert.equal(derivedOrigin('localhost', 9000), 'http://localhost:9000');
  assert.equal(derivedOrigin('render-1.example.com', 9926), 'https://render-1.example.com:9926');
  assert.equal(derivedOrigin('::1', 9926), 'https://[::1]:9926');
});

test("Harper's HTTP port is read from a number, a host:port string or the secure port, else 9926", () => {
  assert.equal(httpPortOf({ port: 9926 }), 9926);
  assert.equal(httpPortOf({ port: '127.0.0.1:19926', securePort: null }), 19926);
  assert.equal(httpPortOf({ port: null, securePort: 9443 }), 9443);
  assert.equal(httpPortOf(undefined), 9926);
});

test('the host a fleet dials is the origin host, without the port', () => {
  assert.equal(originHost('http://127.0.0.1:9926'), '127.0.0.1');
  assert.equal(originHost('https://render-1.example.com'), 'render-1.example.com');
});
