// Requests are checked against docs/openapi.yaml itself (util/requests/shape.ts over the shapes
// scripts/request-shapes.mjs compiles from it at build time): a field added to a request schema in the
// document is accepted with no other change, and a refusal names the field with the code a client knows.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parse } from 'yaml';
import { repoRoot } from '../harness.js';
import { requestShape, type ShapeValidator } from '../../util/requests/shape.js';
import { checkTargetsBody, checkUrlList } from '../../util/schedule/targetChecks.js';
import { checkResult } from '../../util/results/check.js';
import { checkEnvelope } from '../../util/channel/envelope.js';
import { checkRegister } from '../../util/sitemaps/requests.js';
import { MIN_CADENCE_MS } from '../../util/schedule/targetChecks.js';
import { isProblem, type Problem } from '../../util/problem.js';
import { ConfigError, checkPartial } from '../../util/config/schema.js';

type Json = Record<string, unknown>;
interface Generator {
  requestShapesSource(doc: unknown): string;
}

const OPENAPI = join(repoRoot, 'docs', 'openapi.yaml');
const generator = (): Promise<Generator> =>
  import(pathToFileURL(join(repoRoot, 'scripts', 'request-shapes.mjs')).href) as Promise<Generator>;

/** The shapes compiled from `doc`, loaded as the component loads its own (inside the repository, so the module finds ajv). */
async function compiled(doc: unknown, tag: string): Promise<Record<string, ShapeValidator>> {
  const file = join(repoRoot, 'dist', 'test', `shapes-${tag}-${process.pid}.js`);
  writeFileSync(file, (await generator()).requestShapesSource(doc));
  try {
    return ((await import(pathToFileURL(file).href)) as { shapes: Record<string, ShapeValidator> }).shapes;
  } finally {
    rmSync(file, { force: true });
  }
}

const document = (): Json => parse(readFileSync(OPENAPI, 'utf8')) as Json;
const schemaOf = (doc: Json, name: string): Json =>
  ((doc.components as Json).schemas as Record<string, Json>)[name]!;
/** The JSON body schema of the operation at `path` and `method`, as the document writes it inline. */
const bodyOf = (doc: Json, path: string, method: string): Json =>
  (((((doc.paths as Json)[path] as Json)[method] as Json).requestBody as Json).content as Json)[
    'application/json'
  ] as Json;
const NOW = Date.UTC(2026, 11, 7);

function problem(v: unknown): Problem {
  assert.ok(isProblem(v), `expected a problem, got ${JSON.stringify(v)}`);
  return v;
}

test('the built shapes are the ones the document compiles to (a stale dist/ fails here)', async () => {
  const built = readFileSync(join(repoRoot, 'dist', 'util', 'requests', 'shapes.js'), 'utf8');
  assert.equal(built, (await generator()).requestShapesSource(document()));
});

test('a field added to a request schema in a copy of docs/openapi.yaml is accepted with no other change', async () => {
  const doc = document();
  (schemaOf(doc, 'Target').properties as Json).priority = { type: 'integer', minimum: 0 };
  (schemaOf(doc, 'TokenResult').properties as Json).renderer = { type: 'string' };
  (schemaOf(doc, 'ChannelMessage').properties as Json).note = { type: 'string' };
  ((bodyOf(doc, '/render_queue/sitemaps', 'post').schema as Json).properties as Json).label = {
    type: 'string',
  };
  const edited = await compiled(doc, 'edited');
  const target = { url: 'https://shop.test/a', priority: 3 };
  const result = {
    id: 'https://shop.test/a',
    leaseToken: 't',
    outcome: 'rendered',
    renderer: 'chromium-143',
  };

  // The shapes the component runs with refuse the fields the document does not name…
  const before = checkTargetsBody({ targets: [target] }, NOW);
  assert.ok(!isProblem(before));
  assert.deepEqual(before.rejected, [{ index: 0, error: 'unknown field "priority" in the target' }]);
  assert.equal(problem(checkResult(result, 1000)).code, 'unknown_field');
  assert.equal(
    problem(checkEnvelope({ note: 'hi' }, 0, { maxResults: 100, maxCredits: 10 })).code,
    'unknown_field',
  );
  const sitemap = { url: 'https://shop.test/sitemap.xml', label: 'shop' };
  assert.equal(problem(checkRegister(sitemap)).code, 'unknown_field');

  // …and the same checks over the edited copy's shapes accept them.
  const after = checkTargetsBody({ targets: [target] }, NOW, {
    targets: requestShape('fileTargets', 'body', {}, edited),
    target: requestShape('fileTargets$targets', 'target', {}, edited),
  });
  assert.ok(!isProblem(after));
  assert.deepEqual(after.rejected, []);
  assert.equal(after.accepted[0]!.target.url, target.url);
  const checked = checkResult(result, 1000, requestShape('reportResult', 'result', {}, edited));
  assert.ok(!isProblem(checked), JSON.stringify(checked));
  assert.equal(checked.outcome, 'rendered');
  const env = checkEnvelope(
    { note: 'hi', credits: 2 },
    0,
    { maxResults: 100, maxCredits: 10 },
    requestShape('openChannel$message', 'message', {}, edited),
  );
  assert.ok(!isProblem(env));
  assert.equal(env.credits, 2);
  const registered = checkRegister(
    sitemap,
    requestShape('registerSitemap', 'body', { url: 'invalid_url', cadenceMs: 'invalid_cadence' }, edited),
  );
  assert.ok(!isProblem(registered), JSON.stringify(registered));
  assert.equal(registered.url, sitemap.url);
});

test("a rule added to a URL list's items in a copy of docs/openapi.yaml applies to each URL with no other change", async () => {
  const doc = document();
  const items = (schemaOf(doc, 'UrlList').properties as Record<string, Json>).urls!.items as Json;
  items.maxLength = 30;
  const edited = await compiled(doc, 'items');
  const body = { urls: ['https://shop.test/a', 'https://shop.test/a-much-longer-path'] };
  const before = checkUrlList(body);
  assert.ok(!isProblem(before));
  assert.deepEqual(before.rejected, []);
  const after = checkUrlList(body, undefined, {
    list: requestShape('deleteTargets', 'body', {}, edited),
    item: requestShape('deleteTargets$urls', 'url', {}, edited),
  });
  assert.ok(!isProblem(after));
  assert.deepEqual(
    after.urls.map((u) => u.index),
    [0],
  );
  assert.deepEqual(after.rejected, [
    { index: 1, error: 'the url must be a string of at most 30 characters' },
  ]);
});

test("a cadence's documented minimum is the configured default cadence's, the bound its named check applies", () => {
  const doc = document();
  const register = bodyOf(doc, '/render_queue/sitemaps', 'post').schema as Json;
  for (const [where, schema] of [
    ['Target', schemaOf(doc, 'Target')],
    ['registerSitemap', register],
  ] as const)
    assert.equal(((schema.properties as Json).cadenceMs as Json).minimum, MIN_CADENCE_MS, where);
});

test('a refusal names the field and says what it must be, with the code a client already knows', () => {
  const result = requestShape('reportResult', 'result');
  const claim = requestShape('claim', 'body', { limit: 'invalid_limit', queues: 'invalid_queues' });
  const cases: Array<[Problem | null, string, string | RegExp]> = [
    [
      result.check({ id: 'a', leaseToken: 't', outcome: 'rendered', x: 1 }),
      'unknown_field',
      'unknown field "x" in the result',
    ],
    [result.check([1]), 'invalid_body', 'the result must be a JSON object, not an array'],
    [
      result.check({ id: 'a', outcome: 'rendered' }),
      'invalid_body',
      'leaseToken must be the token the claim returned, not missing',
    ],
    [
      result.check({ id: 'a', leaseToken: true, outcome: 'rendered' }),
      'invalid_body',
      'leaseToken must be the token the claim returned, not a boolean',
    ],
    [
      result.check({ id: 'a', leaseToken: 't', outcome: 'done' }),
      'invalid_body',
      /^outcome must be one of rendered, failed, redirected, non-indexable, not "done"$/,
    ],
    [
      result.check({ id: 'a', leaseToken: 't', outcome: 'failed', error: { name: 5 } }),
      'invalid_body',
      /^error\.name must be a string, not a number$/,
    ],
    [
      result.check({ id: 'a', leaseToken: 't', outcome: 'failed', error: 'boom' }),
      'invalid_body',
      'error must be {name, message}, not "boom"',
    ],
    [
      result.check({ id: 'a', leaseToken: 't', outcome: 'rendered', statusCode: 1000 }),
      'invalid_body',
      'statusCode must be an integer HTTP status, not 1000',
    ],
    [claim.check({ limit: 0 }), 'invalid_limit', 'limit must be an integer of at least 1, not 0'],
    [claim.check({ queues: [] }), 'invalid_queues', /^queues must be an array of 1 to 100 items/],
    [claim.check({ limit: 2, other: 1 }), 'unknown_field', 'unknown field "other" in the body'],
  ];
  for (const [p, code, message] of cases) {
    assert.ok(p, `refused: ${String(message)}`);
    assert.equal(p.code, code, p.message);
    if (typeof message === 'string') assert.equal(p.message, message);
    else assert.match(p.message, message);
  }
  assert.equal(result.check({ id: 'a', leaseToken: 't', outcome: 'rendered' }), null);
});

test('a shape the document does not have is an error when the module asking for it loads, not at the first request', () => {
  assert.throws(() => requestShape('noSuchOperation', 'body'), /no request shape noSuchOperation/);
});

test('the config update is held to "an object" by the document, and its keys to the configuration key list', () => {
  const shape = requestShape('updateConfig', 'body');
  assert.deepEqual(
    [shape.check([1])?.code, shape.check([1])?.message],
    ['invalid_body', 'the body must be a JSON object, not an array'],
  );
  assert.equal(shape.check(undefined)?.code, 'invalid_body');
  // A known section that is not an object passes the shape: the key list refuses it naming the section,
  // which the route answers as invalid_config with that `key`.
  assert.equal(shape.check({ stall: 5 }), null);
  assert.throws(
    () => checkPartial({ stall: 5 }),
    (e) => e instanceof ConfigError && e.key === 'stall',
  );
  assert.equal(shape.check({ nosuch: { x: 1 } }), null, 'an unknown key is ignored, not refused');
});

test("the pause scope's and a fleet's bounds are the document's, refused with the codes a client knows", () => {
  const pause = requestShape('pause', 'body', { scope: 'invalid_scope' });
  const cases: Array<[Problem | null, string, string]> = [
    [pause.check({}), 'invalid_scope', 'scope must be "all" or the hostname of a node, not missing'],
    [pause.check({ scope: '' }), 'invalid_scope', 'scope must be "all" or the hostname of a node, not ""'],
    [
      pause.check({ scope: 7 }),
      'invalid_scope',
      'scope must be "all" or the hostname of a node, not a number',
    ],
  ];
  const fleet = requestShape('createFleet', 'body', {
    name: 'invalid_name',
    queues: 'invalid_queues',
    username: 'invalid_username',
  });
  cases.push(
    [fleet.check({ name: 5 }), 'invalid_name', 'name must be a string, not a number'],
    [fleet.check({ name: 'f', queues: 'q' }), 'invalid_queues', ''],
    [fleet.check({ name: 'f', queues: [''] }), 'invalid_queues', ''],
    [fleet.check({ name: 'f', queues: Array(101).fill('q') }), 'invalid_queues', ''],
    [fleet.check({ name: 'f', username: 'u'.repeat(201) }), 'invalid_username', ''],
  );
  for (const [p, code, message] of cases) {
    assert.ok(p, `refused with ${code}`);
    assert.equal(p.code, code, p.message);
    if (message) assert.equal(p.message, message);
  }
  assert.equal(pause.check({ scope: 'x'.repeat(254) })?.code, 'invalid_scope');
  assert.equal(pause.check({ scope: 'all' }), null);
});
