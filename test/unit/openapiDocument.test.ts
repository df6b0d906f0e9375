// docs/openapi.yaml is a valid OpenAPI 3.1 document, its schemas compile, it names every configuration key
// and every error code the code can answer with, and the checker the integration tests run every answer
// through (test/contract.ts) refuses answers that depart from it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { CONFIG_KEYS } from '../../util/config/keys.js';
import { OPENAPI_PATH, contract, type Answer } from '../contract.js';
import { repoRoot } from '../harness.js';
import { sourceFiles } from '../sourceFiles.js';

type Json = Record<string, unknown>;

test('docs/openapi.yaml validates against the OpenAPI 3.1 schema', async () => {
  const validator = new Validator();
  const result = await validator.validate(readFileSync(OPENAPI_PATH, 'utf8'));
  assert.equal(validator.version, '3.1');
  assert.deepEqual(result.errors ?? [], []);
  assert.equal(result.valid, true);
});

test('every response and header schema compiles under JSON Schema 2020-12', () => {
  assert.ok(contract().compileAll() > 100);
});

test("the Config schema names every configuration key with the key's default", () => {
  const c = contract();
  const config = c.resolve({ $ref: '#/components/schemas/Config' });
  for (const key of CONFIG_KEYS) {
    let node: Json = config;
    for (const part of key.path.split('.')) {
      const props = node.properties as Json | undefined;
      assert.ok(props?.[part], `docs/openapi.yaml Config lacks ${key.path}`);
      assert.ok((node.required as string[] | undefined)?.includes(part), `${key.path} is not required`);
      node = props[part] as Json;
    }
    assert.deepEqual(node.default, key.default, `the default of ${key.path}`);
  }
});

/** Every `code` value an error schema of the document allows, by status. */
function documentedCodes(): Map<string, Set<string>> {
  const c = contract();
  const byStatus = new Map<string, Set<string>>();
  const collect = (status: string, v: unknown): void => {
    if (Array.isArray(v)) return v.forEach((x) => collect(status, x));
    if (typeof v !== 'object' || v === null) return;
    const o = v as Json;
    if (typeof o.$ref === 'string') return collect(status, c.resolve(o));
    const code = (o.properties as Json | undefined)?.code as Json | undefined;
    const values = [...((code?.enum as unknown[]) ?? []), ...(code?.const !== undefined ? [code.const] : [])];
    for (const value of values) {
      if (!byStatus.has(status)) byStatus.set(status, new Set());
      byStatus.get(status)!.add(String(value));
    }
    for (const x of Object.values(o)) collect(status, x);
  };
  const unrouted = (c.doc['x-unrouted'] as Json).responses as Json;
  const all = [...c.operations().map((op) => op.responses), unrouted];
  for (const responses of all) for (const [status, r] of Object.entries(responses)) collect(status, r);
  return byStatus;
}

test('every error code the server throws is documented with its status', () => {
  const codes = documentedCodes();
  // The channel's refusals travel as WebSocket frames, listed in its operation's description.
  const channel = contract()
    .operations()
    .find((op) => op.template === '/render_queue/channel')!;
  const channelText = String(
    ((contract().doc.paths as Json)['/render_queue/channel'] as Json & { get: Json }).get.description,
  );
  assert.ok(channel);
  const thrown: Array<{ status: string; code: string; file: string }> = [];
  const files = ['util', 'services'].flatMap((d) => sourceFiles(join(repoRoot, d)));
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/new HttpError\(\s*(\d{3}),\s*'([a-z_A-Z]+)'\s*,/g))
      thrown.push({ status: m[1]!, code: m[2]!, file });
    for (const m of text.matchAll(/badRequest\(\s*'([a-z_A-Z]+)'\s*,/g))
      thrown.push({ status: '400', code: m[1]!, file });
  }
  assert.ok(thrown.length > 40, `found only ${thrown.length} error sites`);
  const missing = thrown.filter(
    (t) =>
      !codes.get(t.status)?.has(t.code) &&
      !(t.file.includes('channel') && channelText.includes(`\`${t.code}\``)),
  );
  assert.deepEqual(
    missing.map((t) => `${t.status} ${t.code} (${t.file.slice(repoRoot.length + 1)})`),
    [],
  );
});

const json = (body: unknown) => JSON.stringify(body);
const answer = (a: Partial<Answer> & Pick<Answer, 'path' | 'status'>): Answer => ({
  method: 'GET',
  headers: { 'content-type': 'application/json' },
  text: '',
  ...a,
});

const hook = {
  id: 'h',
  fleetId: 'f',
  url: 'https://hooks.test/wake?redacted',
  queues: [],
  enabled: true,
  disabledReason: null,
  consecutiveFailures: 0,
  lastStatus: null,
  lastError: null,
  lastAttemptAt: null,
  createdAt: 1,
  previousSecretValidUntil: null,
  secretOpens: true,
};

test('the checker passes answers that follow the document', () => {
  const c = contract();
  const ok: Answer[] = [
    answer({
      path: '/prerender_admin/health',
      status: 200,
      text: json({ ok: true, workersReady: 2, workerCount: 2 }),
    }),
    answer({
      method: 'POST',
      path: '/render_queue/claim',
      status: 200,
      headers: { 'content-type': 'application/json', 'x-queue-status': 'empty' },
      text: '[]',
    }),
    answer({
      method: 'POST',
      path: '/render_queue/job_result',
      status: 204,
      headers: { 'x-result-status': 'applied' },
    }),
    answer({
      path: '/render_queue/nowhere?x=1',
      status: 404,
      text: json({ error: 'no endpoint', code: 'not_found' }),
    }),
    answer({
      method: 'PUT',
      path: '/render_queue/claim',
      status: 405,
      text: json({ error: 'no', code: 'method_not_allowed' }),
    }),
    answer({ path: '/prerender_admin/fleets/', status: 200, text: '[]' }),
    answer({
      method: 'POST',
      path: '/prerender_admin/hooks',
      status: 200,
      text: json({ ...hook, secret: 'whsec_x' }),
    }),
    answer({ path: '/prerender_admin/hooks?fleetId=f', status: 200, text: json([hook]) }),
    answer({ method: 'HEAD', path: '/prerender_admin/health', status: 405 }),
    answer({ path: '/SomeTable/1', status: 500, text: 'not ours' }),
  ];
  for (const a of ok) assert.deepEqual(c.problems(a), [], `${a.method} ${a.path} ${a.status}`);
});

test('the checker refuses answers that depart from the document', () => {
  const c = contract();
  const bad: Array<[Answer, RegExp]> = [
    [
      answer({
        path: '/prerender_admin/health',
        status: 200,
        text: json({ ok: 'yes', workersReady: 2, workerCount: 2 }),
      }),
      /ok/,
    ],
    [
      answer({
        path: '/prerender_admin/health',
        status: 200,
        text: json({ ok: true, workersReady: 2, workerCount: 2, extra: 1 }),
      }),
      /additional/,
    ],
    [
      answer({ path: '/prerender_admin/health', status: 418, text: json({ error: 'x', code: 'teapot' }) }),
      /418 is not documented/,
    ],
    [
      answer({ path: '/render_queue/nowhere', status: 500, text: json({ error: 'x', code: 'internal' }) }),
      /x-unrouted.*500/,
    ],
    [
      answer({ path: '/render_queue/nowhere', status: 404, text: json({ error: 'x', code: 'gone' }) }),
      /code/,
    ],
    [answer({ method: 'POST', path: '/render_queue/job_result', status: 204 }), /x-result-status is missing/],
    [
      answer({
        method: 'POST',
        path: '/render_queue/job_result',
        status: 204,
        headers: { 'x-result-status': 'lost' },
      }),
      /x-result-status/,
    ],
    [
      answer({
        method: 'POST',
        path: '/render_queue/job_result',
        status: 204,
        headers: { 'x-result-status': 'applied' },
        text: '{}',
      }),
      /without a body/,
    ],
    [
      answer({ method: 'POST', path: '/render_queue/claim', status: 200, text: '[]' }),
      /x-queue-status is missing/,
    ],
    [answer({ path: '/prerender_admin/metrics', status: 200, text: 'x 1' }), /content type/],
    [
      answer({
        method: 'POST',
        path: '/render_queue/targets',
        status: 400,
        text: json({ error: 'x', code: 'invalid_limit' }),
      }),
      /code/,
    ],
    [answer({ path: '/prerender_admin/health', status: 200, text: '<html>' }), /not JSON/],
    [
      answer({ path: '/prerender_admin/hooks', status: 200, text: json([{ ...hook, secret: 'whsec_x' }]) }),
      /unevaluated/,
    ],
  ];
  for (const [a, why] of bad) {
    const problems = c.problems(a);
    assert.ok(problems.length > 0, `${a.method} ${a.path} ${a.status} ${a.text} passed`);
    assert.match(problems.join('\n'), why);
  }
});
