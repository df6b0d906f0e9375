// The origin prerender fleets reach a node at (util/prerender/origin.ts): derived by the fleet's own rule.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { derivedOrigin, originHost } from '../../util/prerender/origin.js';

test("a derived origin follows the fleet's rule: http for localhost and 127.0.0.1, https for any other name", () => {
  assert.equal(derivedOrigin('127.0.0.1', { port: 9926 }), 'http://127.0.0.1:9926');
  assert.equal(derivedOrigin('localhost', { port: '127.0.0.1:9000' }), 'http://localhost:9000');
  assert.equal(derivedOrigin('render-1.example.com', { port: 9926 }), 'https://render-1.example.com:9926');
  assert.equal(derivedOrigin('::1', { port: 9926 }), 'https://[::1]:9926');
  assert.equal(derivedOrigin('render-1.example.com', undefined), 'https://render-1.example.com:9926');
});

test("the derived port is Harper's listener for the origin's scheme: securePort for https when there is one", () => {
  const both = { port: 9926, securePort: '0.0.0.0:9927' };
  assert.equal(derivedOrigin('render-1.example.com', both), 'https://render-1.example.com:9927');
  assert.equal(derivedOrigin('127.0.0.1', both), 'http://127.0.0.1:9926');
  assert.equal(
    derivedOrigin('render-1.example.com', { port: null, securePort: 9443 }),
    'https://render-1.example.com:9443',
  );
});

test('the host a fleet dials is the origin host, without the port', () => {
  assert.equal(originHost('http://127.0.0.1:9926'), '127.0.0.1');
  assert.equal(originHost('https://render-1.example.com'), 'render-1.example.com');
});
