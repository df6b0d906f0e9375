// The sitemap routes' bodies and query strings (util/sitemaps/requests.ts): the body's shape is the
// document's, the named checks after it say what a schema cannot, and every refusal keeps the code a
// client already knows (docs/sitemaps.md, docs/openapi.yaml).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  checkForgetQuery,
  checkListQuery,
  checkRefresh,
  checkRegister,
} from '../../util/sitemaps/requests.js';
import { MAX_CADENCE_MS, MIN_CADENCE_MS } from '../../util/schedule/targetChecks.js';
import { isProblem } from '../../util/problem.js';

const URL_OK = 'https://shop.test/sitemap.xml';

/** `[body, code, message]`: the message a string to match exactly, or a pattern. */
type Refusal = [unknown, string, string | RegExp];

function refuses(check: (body: unknown) => unknown, cases: readonly Refusal[]): void {
  for (const [body, code, message] of cases) {
    const p = check(body);
    assert.ok(isProblem(p), `${JSON.stringify(body)} was accepted`);
    assert.equal(p.code, code, `${JSON.stringify(body)}: ${p.message}`);
    if (typeof message === 'string') assert.equal(p.message, message);
    else assert.match(p.message, message);
  }
}

test('a registration is refused with the codes and field names a client knows', () => {
  refuses(checkRegister, [
    [[URL_OK], 'invalid_body', 'the body must be a JSON object, not an array'],
    [null, 'invalid_body', 'the body must be a JSON object, not null'],
    [{ url: URL_OK, extra: 1 }, 'unknown_field', 'unknown field "extra" in the body'],
    [{}, 'invalid_url', 'url must be a string, not missing'],
    [{ url: 5 }, 'invalid_url', 'url must be a string, not a number'],
    [{ url: 'not a url' }, 'invalid_url', /^url must not contain whitespace/],
    [{ url: 'ftp://shop.test/s.xml' }, 'invalid_url', 'url must be an absolute http(s) URL'],
    [{ url: `https://shop.test/${'a'.repeat(1900)}` }, 'invalid_url', 'url must be at most 1900 bytes'],
    [{ url: 'https://shop.test/\ud800' }, 'invalid_url', /lone surrogate/],
    [{ url: 'https://u:pw@shop.test/s.xml' }, 'invalid_url', 'url must not contain credentials'],
    [{ url: URL_OK, cadenceMs: 'daily' }, 'invalid_cadence', /^cadenceMs must be an integer/],
    [{ url: URL_OK, cadenceMs: 1.5 }, 'invalid_cadence', /^cadenceMs must be an integer/],
    [{ url: URL_OK, cadenceMs: MIN_CADENCE_MS - 1 }, 'invalid_cadence', /^cadenceMs must be/],
    [{ url: URL_OK, cadenceMs: MAX_CADENCE_MS + 1 }, 'invalid_cadence', /^cadenceMs must be between/],
    [{ url: URL_OK, cadenceMs: 2 ** 60 }, 'invalid_cadence', /^cadenceMs must be between/],
    [
      { url: URL_OK, deleteRemoved: 'yes' },
      'invalid_body',
      'deleteRemoved must be true or false, not a string',
    ],
  ]);
});

test('a registration that passes is its typed value, nulls read as absent', () => {
  assert.deepEqual(checkRegister({ url: URL_OK }), { url: URL_OK, cadenceMs: null, deleteRemoved: false });
  assert.deepEqual(checkRegister({ url: URL_OK, cadenceMs: null, deleteRemoved: null }), {
    url: URL_OK,
    cadenceMs: null,
    deleteRemoved: false,
  });
  assert.deepEqual(checkRegister({ url: URL_OK, cadenceMs: MAX_CADENCE_MS, deleteRemoved: true }), {
    url: URL_OK,
    cadenceMs: MAX_CADENCE_MS,
    deleteRemoved: true,
  });
});

test('a refresh takes no body or {allowLargeRemoval}, and nothing else', () => {
  assert.deepEqual(checkRefresh(undefined), { allowLargeRemoval: false });
  assert.deepEqual(checkRefresh({}), { allowLargeRemoval: false });
  assert.deepEqual(checkRefresh({ allowLargeRemoval: null }), { allowLargeRemoval: false });
  assert.deepEqual(checkRefresh({ allowLargeRemoval: true }), { allowLargeRemoval: true });
  refuses(checkRefresh, [
    [null, 'invalid_body', 'the body must be a JSON object, not null'],
    [[], 'invalid_body', 'the body must be a JSON object, not an array'],
    [{ allowLargeRemoval: 1 }, 'invalid_body', 'allowLargeRemoval must be true or false, not a number'],
    [{ allowLargeRemoval: true, force: true }, 'unknown_field', 'unknown field "force" in the body'],
  ]);
});

test('the list and forget query strings are refused as invalid_query', () => {
  const q = (s: string) => new URLSearchParams(s);
  assert.deepEqual(checkListQuery(q('')), { limit: 100, cursor: undefined });
  assert.deepEqual(checkListQuery(q('limit=5&cursor=abc')), { limit: 5, cursor: 'abc' });
  for (const bad of ['limit=0', 'limit=1001', 'limit=x', 'cursor=', `cursor=${'c'.repeat(201)}`]) {
    const p = checkListQuery(q(bad));
    assert.ok(isProblem(p), bad);
    assert.equal(p.code, 'invalid_query');
  }
  assert.deepEqual(checkForgetQuery(q('')), { deleteTargets: false });
  assert.deepEqual(checkForgetQuery(q('deleteTargets=true')), { deleteTargets: true });
  const p = checkForgetQuery(q('deleteTargets=yes'));
  assert.ok(isProblem(p));
  assert.deepEqual([p.code, p.message], ['invalid_query', 'deleteTargets must be true or false']);
});
