// Generated malformed requests against every endpoint of a real Harper: wrong credentials and
// roles, odd methods and paths, cross-site markers, wrong content types, oversized, non-JSON, invalid
// UTF-8, deeply nested, duplicate-key, `__proto__` and wrong-typed bodies, hostile strings. Every answer
// must be below 500, `{error, code}` when 4xx, with the status docs/http-api.md gives, and documented by
// docs/openapi.yaml (an answer to a path no operation serves by its `x-unrouted` 401/404/405); afterwards the schedule,
// the config, fleets, hooks and pauses are exactly what they were.
//
// A second run aims at the prerender fleet protocol's framing (a job_result of raw bytes without a lease
// token): garbled and huge x-metadata-size values, metadata cut short, not JSON or of the wrong type in
// each field, random or truncated bytes as a gzip or br page. Malformed framing must be a 400
// {error, code}; a well-formed result a 204 that changes nothing (no row here was ever granted).
//
// Seed: QK_FUZZ_SEED (default 13); counts: QK_FUZZ_RUNS (default 1200) and QK_FUZZ_FRAMED_RUNS (default
// 600). A failure prints the seed and the request, so `QK_FUZZ_SEED=<seed> npm test` replays it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import http from 'node:http';
import fc from 'fast-check';
import {
  ADMIN_PASS,
  ADMIN_USER,
  basicAuth,
  startHarper,
  type Credentials,
  type HarperInstance,
} from '../harness.js';
import { contract } from '../contract.js';
import { FORWARDED_HEADERS } from '../prerenderFleet.js';

const SEED = Number(process.env.QK_FUZZ_SEED ?? 13);
const RUNS = Number(process.env.QK_FUZZ_RUNS ?? 1200);
const FRAMED_RUNS = Number(process.env.QK_FUZZ_FRAMED_RUNS ?? 600);
const CONCURRENCY = 8;

let h: HarperInstance;
const users: Record<string, Credentials | null> = {
  none: null,
  wrongPassword: { username: ADMIN_USER, password: 'not-the-password' },
  admin: { username: ADMIN_USER, password: ADMIN_PASS },
  feeder: { username: 'fz-feeder', password: 'fz-feeder-pass' },
  discover: { username: 'fz-discover', password: 'fz-discover-pass' },
  fleet: { username: 'fz-fleet', password: 'fz-fleet-pass' },
  nobody: { username: 'fz-nobody', password: 'fz-nobody-pass' },
};
type Who = keyof typeof users;
let fleetId = '';

before(
  async () => {
    h = await startHarper();
    await h.operation({ operation: 'add_role', role: 'fz_no_queue_role', permission: { super_user: false } });
    await h.addUser(users.feeder!.username, users.feeder!.password, 'render_feeder');
    await h.addUser(users.discover!.username, users.discover!.password, 'render_discover');
    await h.addUser(users.fleet!.username, users.fleet!.password, 'render_fleet');
    await h.addUser(users.nobody!.username, users.nobody!.password, 'fz_no_queue_role');
    // Rows due in two days: claims answer [] and nothing the fuzz sends may change them.
    const dueAt = Date.now() + 2 * 86_400_000;
    const targets = Array.from({ length: 30 }, (_, i) => ({ url: `https://fuzz.example.com/p/${i}`, dueAt }));
    const filed = await h.fetch('/render_queue/targets', { body: { targets } });
    assert.equal(filed.json.upserted, 30, filed.text);
    const f = await h.fetch('/prerender_admin/fleets', { body: { name: 'fuzz-fleet' } });
    assert.equal(f.status, 200, f.text);
    fleetId = f.json.id;
  },
  { timeout: 180_000 },
);

after(async () => {
  agent.destroy();
  await h?.destroy();
});

// ------------------------------------------------------------------ the state that must not change

async function snapshot() {
  const rows = (await h.operation({
    operation: 'sql',
    sql: 'SELECT * FROM render_schedule.RenderSchedule',
  })) as Array<Record<string, unknown>>;
  const canon = rows
    .map((r) =>
      JSON.stringify(
        Object.keys(r)
          .sort()
          .map((k) => [k, r[k]]),
      ),
    )
    .sort()
    .join('\n');
  const control = (await h.operation({
    operation: 'sql',
    sql: 'SELECT * FROM render_queue.QueueControl',
  })) as unknown[];
  return {
    rows: rows.length,
    checksum: createHash('sha256').update(canon).digest('hex'),
    config: (await h.fetch('/prerender_admin/config')).json,
    fleets: (await h.fetch('/prerender_admin/fleets')).json,
    hooks: (await h.fetch('/prerender_admin/hooks')).json,
    control: control.length,
  };
}

// ------------------------------------------------------------------ endpoints and their roles

type BodyKind =
  | 'none'
  | 'targets'
  | 'urls'
  | 'claim'
  | 'result'
  | 'results'
  | 'url'
  | 'scope'
  | 'config'
  | 'fleet'
  | 'hook'
  | 'sitemap'
  | 'extend'
  | 'rowUrls'
  | 'empty';

interface Endpoint {
  method: string;
  path: (rand: string) => string;
  who: Who[]; // besides admin
  body: BodyKind;
  /** Statuses a body-level malformation may answer (the envelope checks come first). */
  ok: number[];
  /** Answers without credentials (the probes); wrong credentials are still refused. */
  public?: true;
}

const EP: Endpoint[] = [
  {
    method: 'POST',
    path: () => '/render_queue/targets',
    who: ['feeder'],
    body: 'targets',
    ok: [200, 400, 413],
  },
  {
    method: 'DELETE',
    path: () => '/render_queue/targets',
    who: ['feeder'],
    body: 'urls',
    ok: [200, 400, 413],
  },
  {
    method: 'POST',
    path: () => '/render_queue/discover',
    who: ['discover'],
    body: 'urls',
    ok: [200, 400, 413],
  },
  { method: 'POST', path: () => '/render_queue/claim', who: ['fleet'], body: 'claim', ok: [200, 400] },
  {
    method: 'POST',
    path: () => '/render_queue/job_result',
    who: ['fleet'],
    body: 'result',
    ok: [400, 404, 409, 413],
  },
  {
    method: 'POST',
    path: () => '/render_queue/job_results',
    who: ['fleet'],
    body: 'results',
    ok: [200, 400],
  },
  // No row here was ever granted: a well-formed extension is 409 superseded, never a change.
  { method: 'POST', path: () => '/render_queue/extend', who: ['fleet'], body: 'extend', ok: [400, 409] },
  ...[
    'queue-state',
    'overview',
    'config',
    'metrics',
    'fleets',
    'hooks',
    'stall-ledger',
    'health',
    'console',
  ].map((p): Endpoint => ({
    method: 'GET',
    path: () => `/prerender_admin/${p}`,
    who: [],
    body: 'none',
    ok: [200, 503],
  })),
  { method: 'GET', path: (r) => `/prerender_admin/console/${r}`, who: [], body: 'none', ok: [404] },
  ...['GET', 'HEAD'].flatMap((method) =>
    (['live', 'ready'] as const).map((p): Endpoint => ({
      method,
      path: () => `/prerender_admin/${p}`,
      who: ['none', 'feeder', 'discover', 'fleet', 'nobody'],
      body: 'none',
      ok: p === 'live' ? [200] : [200, 503],
      public: true,
    })),
  ),
  // The two lists' query strings: random cursors, limits and queues are a 400 naming them, never a 500.
  ...(['failing', 'retired'] as const).map((list): Endpoint => ({
    method: 'GET',
    path: (r) =>
      `/prerender_admin/${list}?cursor=${encodeURIComponent(r)}&limit=${r.length % 600}&queue=${encodeURIComponent(r.slice(0, 3))}`,
    who: [],
    body: 'none',
    ok: [200, 400],
  })),
  {
    method: 'GET',
    path: (r) =>
      `/prerender_admin/rows?state=${encodeURIComponent(['due', 'leased', 'failing', 'all', r][r.length % 5]!)}&prefix=${encodeURIComponent(r)}&cursor=${encodeURIComponent(r.slice(1))}&limit=${r.length % 600}`,
    who: [],
    body: 'none',
    ok: [200, 400],
  },
  // Only URLs and keys of no row, or refused entries: nothing the fuzz sends may change a row.
  ...(['/rows/render-now', '/rows/release'] as const).map((p): Endpoint => ({
    method: 'POST',
    path: () => `/prerender_admin${p}`,
    who: [],
    body: 'rowUrls',
    ok: [200, 400],
  })),
  { method: 'DELETE', path: () => '/prerender_admin/rows', who: [], body: 'rowUrls', ok: [200, 400] },
  { method: 'POST', path: () => '/prerender_admin/explain', who: [], body: 'url', ok: [400] },
  { method: 'POST', path: () => '/prerender_admin/revalidate', who: [], body: 'url', ok: [400] },
  { method: 'POST', path: () => '/prerender_admin/pause', who: [], body: 'scope', ok: [400] },
  { method: 'POST', path: () => '/prerender_admin/resume', who: [], body: 'scope', ok: [400] },
  { method: 'POST', path: () => '/prerender_admin/config', who: [], body: 'config', ok: [200, 400] },
  { method: 'POST', path: () => '/prerender_admin/fleets', who: [], body: 'fleet', ok: [400] },
  { method: 'DELETE', path: (r) => `/prerender_admin/fleets/${r}`, who: [], body: 'empty', ok: [400, 404] },
  { method: 'POST', path: () => '/prerender_admin/hooks', who: [], body: 'hook', ok: [400, 404] },
  {
    method: 'POST',
    path: (r) => `/prerender_admin/hooks/${r}/${['rotate', 'enable', 'disable'][r.length % 3]}`,
    who: [],
    body: 'empty',
    ok: [400, 404],
  },
  { method: 'DELETE', path: (r) => `/prerender_admin/hooks/${r}`, who: [], body: 'empty', ok: [400, 404] },
  // A device's removal: a random name is a 400, a path with more segments a 404, a listed device 409; a
  // well-formed name out of the list starts a removal (202) that deletes nothing, as no row has it. A body
  // other than an empty object is a 400 before the name is looked at.
  {
    method: 'DELETE',
    path: (r) => `/prerender_admin/devices/${r.length % 5 === 0 ? 'desktop' : r}`,
    who: [],
    body: 'empty',
    ok: [202, 400, 404, 409],
  },
  { method: 'POST', path: () => '/render_queue/sitemaps', who: ['feeder'], body: 'sitemap', ok: [400] },
  {
    method: 'GET',
    path: (r) => `/render_queue/sitemaps?limit=${encodeURIComponent(r)}`,
    who: ['feeder'],
    body: 'none',
    ok: [200, 400],
  },
  { method: 'GET', path: (r) => `/render_queue/sitemaps/${r}`, who: ['feeder'], body: 'none', ok: [404] },
  {
    method: 'POST',
    path: (r) => `/render_queue/sitemaps/${r}/refresh`,
    who: ['feeder'],
    body: 'empty',
    ok: [400, 404],
  },
  {
    method: 'DELETE',
    path: (r) => `/render_queue/sitemaps/${r}`,
    who: ['feeder'],
    body: 'empty',
    ok: [400, 404],
  },
];

/** Method+path pairs that exist, for the 405 rule (prefix routes by their prefix). */
const KNOWN: Array<[string, RegExp]> = [
  ['POST', /^\/render_queue\/targets\/?$/],
  ['DELETE', /^\/render_queue\/targets\/?$/],
  ['POST', /^\/render_queue\/(discover|claim|job_result|job_results)\/?$/],
  ['POST', /^\/render_queue\/extend\/?$/],
  [
    'GET',
    /^\/prerender_admin\/(queue-state|overview|config|metrics|fleets|hooks|stall-ledger|health|console)\/?$/,
  ],
  ['POST', /^\/prerender_admin\/(explain|revalidate|pause|resume|config|fleets|hooks)\/?$/],
  ['DELETE', /^\/prerender_admin\/fleets\/.+/],
  ['POST', /^\/prerender_admin\/hooks\/.+/],
  ['DELETE', /^\/prerender_admin\/hooks\/.+/],
  ['DELETE', /^\/prerender_admin\/devices\/.+/],
  ['GET', /^\/prerender_admin\/console\/.+/],
  ['GET', /^\/prerender_admin\/(failing|retired)\/?(\?.*)?$/],
  ['GET', /^\/prerender_admin\/rows\/?(\?.*)?$/],
  ['DELETE', /^\/prerender_admin\/rows\/?(\?.*)?$/],
  ['POST', /^\/prerender_admin\/rows\/(render-now|release)\/?$/],
  ['GET', /^\/prerender_admin\/(live|ready)\/?$/],
  ['HEAD', /^\/prerender_admin\/(live|ready)\/?$/],
  ['POST', /^\/render_queue\/sitemaps\/?(\?.*)?$/],
  ['GET', /^\/render_queue\/sitemaps\/?(\?.*)?$/],
  ['GET', /^\/render_queue\/sitemaps\/.+/],
  ['POST', /^\/render_queue\/sitemaps\/.+/],
  ['DELETE', /^\/render_queue\/sitemaps\/.+/],
];

// ------------------------------------------------------------------ hostile values

/** URLs refused by construction (never a URL that could file, delete or revalidate a row). */
const badUrl = fc.oneof(
  fc.constantFrom(
    'https://a.example/p/1\ud800',
    'https://a.example/\udc00',
    'https://a.example/x\u0000y',
    'https://a.example/x\u0085y',
    'https://a.example/x\u009by',
    'https://a.example/x\u007fy',
    'https://a.example/x"y',
    'https://a.example/x\\y',
    'https://a.example/a b',
    'ftp://a.example/x',
    'javascript:alert(1)',
    '/relative/path',
    '',
    'https://',
    'https://a.example/' + 'x'.repeat(1900),
  ),
  fc.string({ unit: 'grapheme', maxLength: 40 }).map((s) => `https://a.example/${s}\ud800`),
  fc.string({ unit: 'binary', maxLength: 40 }).map((s) => `https://a.example/${s}\u0001`),
  fc.oneof(fc.integer(), fc.boolean(), fc.constant(null), fc.object(), fc.array(fc.nat())),
);

const hostileString = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 50 }),
  fc.string({ unit: 'grapheme', maxLength: 50 }),
  fc.constantFrom('\ud800', '\n\r', '✓', '__proto__', 'constructor', '"\\', '\u2028', 'x'.repeat(5000)),
);

const anyJson = fc.jsonValue({ maxDepth: 4 });

/** Endpoint-shaped bodies that are wrong in some way; each names the statuses it may get. */
function shapedBody(kind: BodyKind): fc.Arbitrary<{ value: unknown; ok?: number[] }> {
  const v = (a: fc.Arbitrary<unknown>, ok?: number[]) => a.map((value) => ({ value, ok }));
  switch (kind) {
    case 'targets':
      return fc.oneof(
        v(
          fc.record({ targets: fc.array(fc.record({ url: badUrl }), { minLength: 1, maxLength: 5 }) }),
          [200],
        ),
        v(
          fc.record({
            targets: fc.array(
              fc.record({
                url: fc.constant('https://fuzz.example.com/never-filed'),
                dueAt: fc.oneof(fc.constantFrom(0, -1, 946684799999, 9e15), fc.double({ max: 9e11 })),
              }),
              { minLength: 1, maxLength: 3 },
            ),
          }),
          [200],
        ),
        v(
          fc.record({
            targets: fc.array(
              fc.record({
                url: fc.constant('https://fuzz.example.com/never-filed'),
                cadenceMs: fc.oneof(fc.integer({ max: 59_999 }), fc.double(), hostileString),
              }),
              { minLength: 1, maxLength: 3 },
            ),
          }),
          [200],
        ),
        v(
          fc.record({
            targets: fc.oneof(
              anyJson.filter((x) => !Array.isArray(x)),
              fc.constant({}),
            ),
          }),
          [400],
        ),
        v(fc.record({ targets: fc.constant([]), extra: anyJson }), [400]),
      );
    case 'urls':
      return fc.oneof(
        v(fc.record({ urls: fc.array(badUrl, { minLength: 1, maxLength: 5 }) }), [200]),
        v(fc.record({ urls: anyJson.filter((x) => !Array.isArray(x)) }), [400]),
        v(fc.record({ urls: fc.constant([]), extra: anyJson }), [400]),
      );
    case 'claim':
      return fc.oneof(
        v(
          fc.record({
            limit: fc.oneof(
              fc.integer({ max: 0 }),
              fc.double().filter((d) => !Number.isInteger(d)),
              hostileString,
              fc.object(),
            ),
          }),
          [400],
        ),
        v(fc.record({ limit: fc.integer({ min: 1, max: 10_000 }) }), [200]),
        v(
          fc.dictionary(
            hostileString.filter((k) => k !== 'limit' && k !== 'queues'),
            anyJson,
            { minKeys: 1, maxKeys: 3 },
          ),
          [400],
        ),
      );
    case 'result':
    case 'results': {
      const result = fc.record(
        {
          id: fc.oneof(badUrl, hostileString, fc.constant('https://fuzz.example.com/unknown')),
          leaseToken: fc.oneof(fc.double(), hostileString, fc.constant(null)),
          outcome: fc.oneof(fc.constantFrom('rendered', 'failed', 'nope'), hostileString),
          statusCode: fc.oneof(fc.integer(), fc.double(), hostileString),
          body: fc.oneof(hostileString, fc.integer()),
        },
        { requiredKeys: ['id'] },
      );
      if (kind === 'result') return v(result, [400, 404, 409]);
      return fc.oneof(
        v(fc.record({ results: fc.array(result, { minLength: 1, maxLength: 5 }) }), [200]),
        v(
          fc.record({
            results: fc.oneof(
              fc.constant([]),
              anyJson.filter((x) => !Array.isArray(x)),
            ),
          }),
          [400],
        ),
        v(fc.record({ results: fc.array(result, { minLength: 101, maxLength: 103 }) }), [400]),
      );
    }
    case 'extend':
      return fc.oneof(
        v(
          fc.record(
            {
              id: fc.oneof(badUrl, hostileString, fc.constant('https://fuzz.example.com/p/1|desktop')),
              leaseToken: fc.oneof(hostileString, fc.constant('0'.repeat(28))),
              byMs: fc.integer({ min: 1, max: 604_800_000 }),
            },
            { requiredKeys: ['id', 'byMs'] },
          ),
          [400, 409],
        ),
        v(
          fc.record({
            id: fc.constant('https://fuzz.example.com/p/1'),
            byMs: fc.oneof(
              fc.integer({ max: 0 }),
              fc.double(),
              hostileString,
              fc.integer({ min: 604_800_001 }),
            ),
          }),
          [400],
        ),
        v(
          fc.record({ id: fc.constant('https://fuzz.example.com/p/1'), byMs: fc.constant(1000), x: anyJson }),
          [400],
        ),
      );
    case 'rowUrls':
      return fc.oneof(
        v(fc.record({ urls: fc.array(badUrl, { minLength: 1, maxLength: 5 }) }), [400]),
        v(
          fc.record({
            urls: fc.array(
              fc.constantFrom(
                'https://fuzz.example.com/never-filed',
                'https://fuzz.example.com/never-filed|desktop',
              ),
              { minLength: 1, maxLength: 3 },
            ),
          }),
          [200],
        ),
        v(fc.record({ urls: anyJson.filter((x) => !Array.isArray(x)) }), [400]),
        v(fc.record({ urls: fc.constant([]) }), [400]),
        v(fc.record({ urls: fc.constant(['https://fuzz.example.com/never-filed']), extra: anyJson }), [400]),
      );
    case 'url':
      return fc.oneof(
        v(fc.record({ url: badUrl })),
        v(fc.record({ url: fc.constant('https://a.example/'), more: anyJson })),
      );
    case 'scope':
      return fc.oneof(
        v(fc.record({ scope: hostileString.filter((s) => s !== 'all') })),
        v(fc.record({ scope: fc.oneof(fc.integer(), fc.object(), fc.constant(null)) })),
        v(fc.constant({})),
        v(fc.record({ scope: fc.constant('all'), other: anyJson })),
      );
    case 'config':
      return fc.oneof(
        v(
          fc.constantFrom(
            { stall: { after: 5 } },
            { stall: { after: '2000' } },
            { stall: { after: 1e999 } },
            { notify: { allowCidrs: ['10.0.0.0/40'] } },
            { notify: { allowCidrs: ['999.1.1.1'] } },
            { notify: { allowCidrs: ['::::'] } },
            { render: { routes: [{ name: 'r'.repeat(65), match: 'prefix', path: '/p/' }] } },
            { render: { routes: [{ name: 'ok', match: 'prefix', path: '/p/', evil: 1 }] } },
            { render: { maxBatchBytes: 1 } },
            { queue: { feederRoles: 'render_feeder' } },
          ),
          [400],
        ),
        // Unknown keys only, hostile ones included: 200 with the keys reported, nothing applied.
        v(
          fc.dictionary(
            hostileString.filter((k) => !['queue', 'render', 'notify', 'stall', 'maintenance'].includes(k)),
            anyJson,
            { minKeys: 1, maxKeys: 5 },
          ),
          [200],
        ),
        v(fc.oneof(fc.array(anyJson), fc.string(), fc.integer()), [400]),
      );
    case 'fleet':
      return fc.oneof(
        v(
          fc.record({
            name: fc.oneof(
              fc.integer(),
              fc.constant(''),
              fc.constant('x'.repeat(61)),
              fc.constantFrom('a"b', 'a\\b', 'a\nb', '\ud800', 'a\u0085'),
            ),
          }),
        ),
        v(
          fc.record({
            name: fc.constant('ok-name'),
            queues: fc.oneof(
              fc.constant('q'),
              fc.array(fc.oneof(fc.integer(), fc.constant('q'.repeat(65))), { minLength: 1 }),
            ),
          }),
        ),
        v(fc.record({ name: fc.constant('ok-name'), extra: anyJson })),
      );
    case 'hook': {
      const ssrf = fc.constantFrom(
        'https://127.0.0.1/',
        'https://[::1]/',
        'https://[::ffff:127.0.0.1]/',
        'https://[::ffff:10.0.0.1]/',
        'https://[64:ff9b::a00:1]/',
        'https://2130706433/',
        'https://0177.0.0.1/',
        'https://0x7f.0.0.1/',
        'https://127.1/',
        'https://169.254.169.254./latest',
        'https://10.0.0.1./',
        'https://0/',
        'http://8.8.8.8/',
        'https://user:pw@1.1.1.1/',
        'not a url',
      );
      return fc.oneof(
        v(fc.record({ fleetId: fc.constant('FLEET'), url: ssrf }), [400]),
        v(fc.record({ fleetId: fc.oneof(hostileString, fc.integer()), url: ssrf }), [400, 404]),
        v(fc.record({ fleetId: fc.constant('FLEET'), url: ssrf, queues: fc.constant('x') }), [400]),
      );
    }
    case 'sitemap': {
      // Every one is refused before anything is dialled or resolved: literal addresses the sitemap
      // policy refuses (sitemaps.allowCidrs is empty here), plain http, or a URL that is not one.
      const refusedHost = fc.constantFrom(
        'https://127.0.0.1/sitemap.xml',
        'https://[::1]/robots.txt',
        'https://[::ffff:127.0.0.1]/s.xml',
        'https://2130706433/s.xml',
        'https://0x7f.0.0.1/s.xml',
        'https://169.254.169.254/latest',
        'https://10.0.0.1/s.xml.gz',
        'https://192.168.1.1/robots.txt',
        'http://127.0.0.1/s.xml',
        'https://user:pw@127.0.0.1/s.xml',
      );
      return fc.oneof(
        v(fc.record({ url: badUrl })),
        v(fc.record({ url: refusedHost })),
        v(
          fc.record({
            url: refusedHost,
            cadenceMs: fc.oneof(fc.integer({ max: 59_999 }), fc.double(), hostileString),
          }),
        ),
        v(fc.record({ url: refusedHost, deleteRemoved: fc.oneof(hostileString, fc.integer()) })),
        v(fc.record({ url: refusedHost, extra: anyJson })),
        v(anyJson.filter((x) => typeof x !== 'object' || x === null || Array.isArray(x))),
      );
    }
    case 'empty':
      return fc.oneof(v(fc.constant(undefined)), v(fc.record({ x: anyJson }), [400, 404]));
    case 'none':
      return v(fc.constant(undefined));
  }
}

// ------------------------------------------------------------------ one generated request

interface Req {
  method: string;
  path: string;
  who: Who;
  headers: Record<string, string>;
  raw?: string | Buffer;
  /** Acceptable statuses and, for envelope refusals, the code. */
  expect: number[];
  code?: string;
  label: string;
}

const rand = fc.string({
  unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789-_.'.split('')),
  minLength: 1,
  maxLength: 40,
});

/** Null most of the time; the arbitrary `pct` percent of the time. */
const rarely = <T>(a: fc.Arbitrary<T>, pct: number): fc.Arbitrary<T | null> =>
  fc.oneof({ arbitrary: fc.constant(null), weight: 100 - pct }, { arbitrary: a, weight: pct });

const requestArb: fc.Arbitrary<Req> = fc
  .record({
    ep: fc.constantFrom(...EP),
    // Mostly the endpoint's own role, so most requests get past the envelope to the body checks.
    who: fc.oneof(
      { arbitrary: fc.constant<Who | 'right'>('right'), weight: 6 },
      { arbitrary: fc.constantFrom<Who | 'right'>(...(Object.keys(users) as Who[])), weight: 4 },
    ),
    r: rand,
    methodSwap: rarely(fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'), 8),
    pathJunk: rarely(
      fc.oneof(
        rand.map((s) => `zz${s}`),
        fc.constantFrom('..%2f..', '%ff', '%', '//', 'x/'.repeat(300)),
      ),
      8,
    ),
    site: rarely(
      fc.oneof(
        fc.constantFrom(
          { 'sec-fetch-site': 'cross-site' },
          { 'sec-fetch-site': 'same-site' },
          { origin: 'null' },
          { origin: 'https://evil.example' },
        ),
        fc.constantFrom({ 'sec-fetch-site': 'same-origin' }, { 'sec-fetch-site': 'none' }),
      ),
      15,
    ),
    ctype: rarely(
      fc.constantFrom(
        'text/plain',
        'application/x-www-form-urlencoded',
        'multipart/form-data; boundary=x',
        'application/json; charset=latin1',
        'application/jsonx',
        'application/octet-stream',
        '',
      ),
      12,
    ),
    mutation: fc.constantFrom(
      'shaped',
      'shaped',
      'shaped',
      'notjson',
      'badutf8',
      'deep',
      'wrongtype',
      'dupkeys',
      'proto',
      'huge',
    ),
    notJson: fc.string({ unit: 'binary', maxLength: 60 }),
    depth: fc.integer({ min: 33, max: 50_000 }),
    wrong: fc.oneof(fc.integer(), fc.string(), fc.array(fc.nat(), { maxLength: 3 }), fc.boolean()),
    shaped: fc.constant(null),
  })
  .chain((g) => shapedBody(g.ep.body).map((shaped) => ({ ...g, shaped })))
  .map((g0): Req => {
    const g = { ...g0, who: (g0.who === 'right' ? (g0.ep.who[0] ?? 'admin') : g0.who) as Who };
    const method = g.methodSwap ?? g.ep.method;
    const path = g.pathJunk !== null ? `/${g.ep.path(g.r).split('/')[1]}/${g.pathJunk}` : g.ep.path(g.r);
    const headers: Record<string, string> = { ...((g.site ?? {}) as Record<string, string>) };
    const label = `${method} ${path.slice(0, 80)} as ${g.who} [${g.mutation}${g.site ? ' ' + JSON.stringify(g.site) : ''}${g.ctype !== null ? ' ct=' + g.ctype : ''}]`;
    const base = { method, path, who: g.who, headers, label };
    // A probe, by its method and exact path, answers anyone who sends no credentials.
    const probe = g.ep.public === true && g.pathJunk === null && (method === 'GET' || method === 'HEAD');
    if (g.who === 'none' && probe) return { ...base, expect: g.ep.ok };
    if (g.who === 'none' || g.who === 'wrongPassword')
      return { ...base, expect: [401], code: 'unauthenticated' };
    const known = KNOWN.filter(([, re]) => re.test(path));
    if (known.length === 0) return { ...base, expect: [404], code: 'not_found' };
    if (!known.some(([m]) => m === method))
      return { ...base, expect: [405], code: method === 'HEAD' ? undefined : 'method_not_allowed' };
    if (g.methodSwap !== null && g.methodSwap !== g.ep.method) {
      // Another endpoint at the same path (GET/POST config, hooks, fleets): only the envelope is judged.
      return { ...base, expect: [200, 400, 403, 404, 413, 415, 503] };
    }
    if (g.who !== 'admin' && !g.ep.who.includes(g.who)) return { ...base, expect: [403], code: 'forbidden' };
    if (method === 'GET' || method === 'HEAD') return { ...base, expect: g.ep.ok };
    if (g.site && /cross-site|same-site|null|evil/.test(JSON.stringify(g.site)))
      return { ...base, headers, expect: [403], code: 'cross_site' };
    // The body.
    let raw: string | Buffer | undefined;
    let expect = g.ep.ok;
    let code: string | undefined;
    const shapedValue = (g.shaped.value as unknown) ?? undefined;
    const fix = (s: string) => s.replace('"FLEET"', JSON.stringify(fleetId));
    switch (g.mutation) {
      case 'shaped':
        raw = shapedValue === undefined ? undefined : fix(JSON.stringify(shapedValue));
        expect = g.shaped.ok ?? g.ep.ok;
        break;
      case 'notjson':
        raw = `{${g.notJson},,}`;
        expect = [400];
        code = 'invalid_json';
        break;
      case 'badutf8':
        raw = Buffer.concat([
          Buffer.from('{"url":"https://a.example/'),
          Buffer.from([0xff, 0xfe, 0xc3]),
          Buffer.from('"}'),
        ]);
        expect = [400];
        code = 'invalid_json';
        break;
      case 'deep':
        raw = '['.repeat(g.depth) + ']'.repeat(g.depth);
        expect = [400];
        code = 'invalid_json';
        break;
      case 'wrongtype':
        raw = JSON.stringify(g.wrong);
        expect = g.ep.body === 'claim' ? [200, 400] : g.ep.body === 'empty' ? [400, 404] : [400];
        break;
      case 'dupkeys': {
        const s = JSON.stringify(shapedValue ?? {});
        raw = s === '{}' ? '{"a":1,"a":2}' : fix(s.replace(/^\{/, '{"__dup":1,"__dup":2,'));
        expect = g.ep.body === 'config' ? [200, 400] : g.ep.body === 'empty' ? [400, 404] : [400];
        break;
      }
      case 'proto':
        raw = '{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}';
        expect =
          g.ep.body === 'config'
            ? [200]
            : g.ep.body === 'claim'
              ? [400]
              : g.ep.body === 'empty'
                ? [400, 404]
                : [400];
        break;
      case 'huge':
        // Over 1 MiB: the admin and sitemap limit (413); under the feeding limit, where the huge string is a
        // bad field (400).
        raw = JSON.stringify({ pad: 'x'.repeat(1_100_000) });
        expect =
          path.startsWith('/prerender_admin/') ||
          path.startsWith('/render_queue/sitemaps') ||
          /claim$/.test(path) ||
          /extend$/.test(path) ||
          /job_result$/.test(path)
            ? [413]
            : [400];
        code = expect[0] === 413 ? 'payload_too_large' : undefined;
        if (/job_result$/.test(path)) expect = [400, 413];
        if (/job_results$/.test(path)) expect = [400];
        break;
    }
    if (g.ctype !== null) {
      // '' stands for no content-type header at all.
      if (g.ctype !== '') headers['content-type'] = g.ctype;
      const octet = g.ctype === 'application/octet-stream' && /job_result$/.test(path);
      if (octet) return { ...base, headers, raw, expect: [400, 415] };
      if (g.ctype !== '' || raw !== undefined)
        return { ...base, headers, raw, expect: [415], code: 'unsupported_media_type' };
    } else if (raw !== undefined) headers['content-type'] = 'application/json';
    return { ...base, headers, raw, expect, code: expect.length === 1 ? code : undefined };
  });

const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });

/** One request exactly as generated: the harness would add a content type, this sends only what it is told. */
function send(
  r: Pick<Req, 'method' | 'path' | 'who' | 'headers' | 'raw'>,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
): Promise<{ status: number; text: string; json: any; headers: http.IncomingHttpHeaders }> {
  const headers: Record<string, string> = { ...r.headers };
  const who = users[r.who];
  if (who) headers.authorization = basicAuth(who);
  if (r.raw !== undefined) headers['content-length'] = String(Buffer.byteLength(r.raw));
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port: h.ports.http, path: r.path, method: r.method, headers, agent },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, text, json, headers: res.headers });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (r.raw !== undefined) req.write(r.raw);
    req.end();
  });
}

test(`at least 1,000 generated malformed requests: every answer < 500, {error, code}, the status docs/http-api.md gives, nothing changed`, async () => {
  const beforeState = await snapshot();
  const reqs = fc.sample(requestArb, { seed: SEED, numRuns: RUNS });
  const failures: string[] = [];
  const statuses: Record<number, number> = {};
  let next = 0;
  const worker = async () => {
    while (next < reqs.length) {
      const r = reqs[next++]!;
      let res;
      try {
        res = await send(r);
      } catch (e) {
        failures.push(`${r.label}: transport error ${(e as Error).message}`);
        continue;
      }
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      const problems: string[] = [];
      if (res.status >= 500) problems.push('a 5xx');
      if (!r.expect.includes(res.status))
        problems.push(`status ${res.status}, expected ${r.expect.join('|')}`);
      if (res.status >= 400 && r.method !== 'HEAD') {
        if (typeof res.json?.error !== 'string' || typeof res.json?.code !== 'string')
          problems.push('not {error, code}');
        else if (r.code && res.json.code !== r.code)
          problems.push(`code ${res.json.code}, expected ${r.code}`);
      }
      problems.push(
        ...contract().problems({
          method: r.method,
          path: r.path,
          status: res.status,
          headers: res.headers,
          text: res.text,
        }),
      );
      if (problems.length) failures.push(`${r.label}: ${problems.join('; ')}: ${res.text.slice(0, 200)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const afterState = await snapshot();
  console.log(
    `fuzz: ${reqs.length} requests, seed ${SEED} (QK_FUZZ_SEED), statuses ${JSON.stringify(statuses)}`,
  );
  assert.ok(reqs.length >= 1000);
  assert.deepEqual(failures.slice(0, 20), [], `seed ${SEED}: ${failures.length} failing requests`);
  assert.deepEqual(
    afterState,
    beforeState,
    `seed ${SEED}: the schedule, config, fleets, hooks or pauses changed`,
  );
  assert.equal(({} as Record<string, unknown>).polluted, undefined, 'no prototype was polluted');
});

// ------------------------------------------------------------------ the prerender fleet framing

/** What a framed result must get: malformed → 400; well-formed → 204 with one of `statuses`. */
interface FramedCase {
  label: string;
  body: Buffer;
  /** x-metadata-size, or null for no header at all. */
  size: string | null;
  workerId: string;
  encoding: string | null;
  expect: 'malformed' | 'wellFormed' | 'either';
  /** The x-result-status values a 204 may carry. */
  statuses: string[];
}

/** No row here was ever granted, so a well-formed result changes nothing, whoever sends it. */
const UNGRANTED = ['superseded', 'unknown_job'];
// The fleet's own header list (test/prerenderFleet.ts), kept apart from the implementation's on purpose.
const ALLOWED_HEADERS: readonly string[] = FORWARDED_HEADERS;

const framedId = fc.oneof(
  fc.nat({ max: 29 }).map((i) => `https://fuzz.example.com/p/${i}`),
  rand.map((r) => `https://fuzz.example.com/framed/${r}`),
);

/** Well-formed metadata of a result with a page (outcome rendered or implied) or without one. */
const goodMeta = (withPage: boolean) =>
  fc.record(
    {
      id: framedId,
      statusCode: fc.integer({ min: 100, max: 599 }),
      headers: fc.dictionary(
        fc.constantFrom(...ALLOWED_HEADERS),
        fc.string({ unit: 'grapheme-ascii', maxLength: 80 }),
        { maxKeys: 4 },
      ),
      renderTime: fc.nat({ max: 120_000 }),
      redirectedTo: fc.constant('https://fuzz.example.com/elsewhere'),
      isIndexable: fc.boolean(),
      outcome: withPage ? fc.constant('rendered') : fc.constantFrom('redirected', 'non-indexable', 'error'),
      reason: hostileString,
      error: fc.record(
        { name: hostileString, message: hostileString, phase: fc.constantFrom('navigation', 'settle') },
        { requiredKeys: ['name', 'message'] },
      ),
      // A newer fleet's fields: ignored, never refused.
      newerField: anyJson,
    },
    { requiredKeys: ['id', 'headers'] },
  );

/** A wrong value for one metadata field (every one a fleet bug: 400). */
const wrongField = fc.oneof(
  fc.record({
    field: fc.constant('id'),
    value: fc.oneof(fc.integer(), fc.boolean(), fc.constant(null), fc.object(), fc.constant('')),
  }),
  fc.record({
    field: fc.constant('url'),
    value: fc.oneof(fc.integer(), fc.boolean(), fc.object(), fc.array(fc.nat())),
  }),
  fc.record({
    field: fc.constant('statusCode'),
    value: fc.oneof(
      fc.constant('200'),
      fc.boolean(),
      fc.object(),
      fc.double().filter((d) => !Number.isInteger(d)),
    ),
  }),
  fc.record({
    field: fc.constant('headers'),
    value: fc.oneof(
      hostileString,
      fc.integer(),
      fc.array(fc.string()),
      fc.boolean(),
      fc.record({ etag: fc.oneof(fc.integer(), fc.boolean(), fc.object()) }),
    ),
  }),
  fc.record({
    field: fc.constant('renderTime'),
    value: fc.oneof(hostileString, fc.boolean(), fc.object(), fc.array(fc.nat())),
  }),
  fc.record({
    field: fc.constant('redirectedTo'),
    value: fc.oneof(fc.integer(), fc.boolean(), fc.object(), fc.array(fc.nat())),
  }),
  fc.record({
    field: fc.constant('isIndexable'),
    value: fc.oneof(fc.constantFrom('false', 'no'), fc.integer(), fc.object(), fc.array(fc.nat())),
  }),
  fc.record({
    field: fc.constant('outcome'),
    value: fc.oneof(
      hostileString.filter((o) => !['rendered', 'redirected', 'non-indexable', 'error'].includes(o)),
      fc.integer(),
      fc.boolean(),
      fc.object(),
    ),
  }),
  fc.record({
    field: fc.constant('reason'),
    value: fc.oneof(fc.integer(), fc.boolean(), fc.object(), fc.array(fc.nat())),
  }),
  fc.record({
    field: fc.constant('error'),
    value: fc.oneof(
      hostileString,
      fc.integer(),
      fc.array(fc.nat()),
      fc.boolean(),
      fc.record({ name: fc.integer(), message: fc.constant('m') }),
      fc.record({ name: fc.constant('n'), message: fc.object() }),
      fc.record({ name: fc.constant('n'), message: fc.constant('m'), phase: fc.integer() }),
    ),
  }),
);

/** x-metadata-size values that are not a decimal byte count (no whitespace: a parser trims it). */
const garbledSize = fc.oneof(
  fc.constantFrom('abc', '-1', '1.5', '0x10', '1e3', 'NaN', 'Infinity', '12abc', '0b101', '-0'),
  fc.stringMatching(/^[0-9]{0,6}[a-zA-Z.,;:_+-][0-9a-zA-Z]{0,6}$/),
  fc.bigInt({ min: 10n ** 10n, max: 10n ** 40n }).map(String),
);

const pageText = fc.string({ unit: 'grapheme', maxLength: 300 }).map((s) => `<html><body>${s}</body></html>`);

const framedArb: fc.Arbitrary<FramedCase> = fc
  .record({
    withPage: fc.boolean(),
    encoding: fc.constantFrom<'gzip' | 'br' | 'identity'>('gzip', 'br', 'identity'),
    text: pageText,
    workerId: fc.stringMatching(/^[A-Za-z0-9._-]{1,40}$/),
    kind: fc.constantFrom(
      'good',
      'good',
      'good',
      'garbledSize',
      'missingSize',
      'sizeOff',
      'cutMetadata',
      'notJson',
      'badUtf8',
      'notObject',
      'wrongField',
      'wrongField',
      'wrongField',
      'randomPage',
      'cutPage',
      'oddEncoding',
    ),
    meta: fc.boolean().chain((p) => goodMeta(p).map((m) => ({ p, m }))),
    wrong: wrongField,
    garbled: garbledSize,
    sizeDelta: fc.integer({ min: 1, max: 5000 }),
    junk: fc.string({ unit: 'binary', maxLength: 60 }),
    notObject: fc.oneof(fc.array(anyJson, { maxLength: 3 }), fc.integer(), fc.string(), fc.constant(null)),
    randomBytes: fc.uint8Array({ minLength: 1, maxLength: 400 }),
    cut: fc.integer({ min: 1, max: 50 }),
    oddEncoding: fc.constantFrom('deflate', 'zstd', 'gzip, br', 'x-gzip', 'compress', 'GZIP'),
  })
  .map((g): FramedCase => {
    // The page follows the metadata's own choice: a page only where an outcome is rendered or implied.
    const withPage = g.meta.p;
    const meta: Record<string, unknown> = { ...g.meta.m, url: g.meta.m.id };
    const headers = { ...(meta.headers as Record<string, string>) };
    let page = Buffer.alloc(0);
    if (withPage) {
      const raw = Buffer.from(g.text, 'utf8');
      page = g.encoding === 'gzip' ? gzipSync(raw) : g.encoding === 'br' ? brotliCompressSync(raw) : raw;
      if (g.encoding !== 'identity') headers['content-encoding'] = g.encoding;
    }
    meta.headers = headers;
    const id = String(meta.id);
    const encoding = withPage && g.encoding !== 'identity' ? g.encoding : null;
    const build = (m: Buffer, p: Buffer = page) => ({ body: Buffer.concat([m, p]), metaLen: m.length });
    const json = (v: unknown) => Buffer.from(JSON.stringify(v), 'utf8');
    const base = { workerId: g.workerId, encoding, statuses: UNGRANTED };
    const label = (what: string) => `${what} [${id.slice(0, 60)} ${encoding ?? 'identity'}]`;
    const malformed = (what: string, body: Buffer, size: string | null): FramedCase => ({
      ...base,
      label: label(what),
      body,
      size,
      expect: 'malformed',
    });
    switch (g.kind) {
      case 'good': {
        const f = build(json(meta));
        return {
          ...base,
          label: label('well-formed'),
          body: f.body,
          size: String(f.metaLen),
          expect: 'wellFormed',
        };
      }
      case 'garbledSize': {
        const f = build(json(meta));
        return malformed(`x-metadata-size ${JSON.stringify(g.garbled)}`, f.body, g.garbled);
      }
      case 'missingSize':
        return malformed('no x-metadata-size', build(json(meta)).body, null);
      case 'sizeOff': {
        // A byte count that is not the metadata's: past the body, or one that cuts the JSON, or one that
        // takes page bytes into it (valid JSON only if those bytes are all whitespace: then either answer).
        const f = build(json(meta));
        const n =
          g.sizeDelta % 3 === 0
            ? f.body.length + g.sizeDelta
            : f.metaLen + (g.sizeDelta % 2 ? 1 : -1) * g.sizeDelta;
        if (n <= 0 || n === f.metaLen) return malformed(`x-metadata-size ${n}`, f.body, String(n));
        if (
          n > f.metaLen &&
          n <= f.body.length &&
          /^[ \t\r\n]*$/.test(f.body.subarray(f.metaLen, n).toString('latin1'))
        )
          return {
            ...base,
            label: label(`x-metadata-size ${n} over whitespace`),
            body: f.body,
            size: String(n),
            expect: 'either',
            statuses: [...UNGRANTED, 'undecodable'],
          };
        return malformed(`x-metadata-size ${n} of ${f.metaLen}`, f.body, String(n));
      }
      case 'cutMetadata': {
        // The body ends inside the metadata; the header still names the whole metadata.
        const m = json(meta);
        const cut = Math.min(g.cut, m.length - 1);
        return malformed(`metadata cut ${cut} bytes short`, m.subarray(0, m.length - cut), String(m.length));
      }
      case 'notJson': {
        const m = Buffer.from(`{${g.junk},,`, 'utf8');
        return malformed('metadata not JSON', build(m).body, String(m.length));
      }
      case 'badUtf8': {
        const m = Buffer.concat([
          Buffer.from('{"id":"https://fuzz.example.com/', 'utf8'),
          Buffer.from([0xff, 0xfe, 0xc3]),
          Buffer.from('","url":"u","headers":{}}'),
        ]);
        return malformed('metadata not UTF-8', build(m).body, String(m.length));
      }
      case 'notObject': {
        const m = json(g.notObject);
        return malformed(
          `metadata ${JSON.stringify(g.notObject).slice(0, 40)}`,
          build(m).body,
          String(m.length),
        );
      }
      case 'wrongField': {
        const bad = { ...meta, [g.wrong.field]: g.wrong.value };
        const m = json(bad);
        return malformed(
          `${g.wrong.field}: ${JSON.stringify(g.wrong.value).slice(0, 40)}`,
          build(m).body,
          String(m.length),
        );
      }
      case 'randomPage': {
        // Random bytes said to be gzip or br: a well-formed result whose page may not decode.
        const enc = g.encoding === 'identity' ? 'gzip' : g.encoding;
        const m = json({ ...meta, outcome: 'rendered', headers: { ...headers, 'content-encoding': enc } });
        const f = build(m, Buffer.from(g.randomBytes));
        return {
          ...base,
          encoding: enc,
          label: label(`${g.randomBytes.length} random bytes as ${enc}`),
          body: f.body,
          size: String(f.metaLen),
          expect: 'wellFormed',
          statuses: [...UNGRANTED, 'undecodable'],
        };
      }
      case 'cutPage': {
        // Cut inside the page, never all of it (a rendered result with no page bytes is another case).
        const f = build(json(meta));
        const cut = withPage ? Math.min(g.cut, page.length - 1) : 0;
        const body = f.body.subarray(0, f.body.length - cut);
        return {
          ...base,
          label: label(`page cut ${cut} bytes short`),
          body,
          size: String(f.metaLen),
          expect: 'wellFormed',
          statuses: [...UNGRANTED, 'undecodable'],
        };
      }
      case 'oddEncoding': {
        // A content-encoding the protocol does not name: refused, or taken as bytes that do not decode.
        const m = json({
          ...meta,
          outcome: 'rendered',
          headers: { ...headers, 'content-encoding': g.oddEncoding },
        });
        const f = build(m, Buffer.from(g.text, 'utf8'));
        return {
          ...base,
          label: label(`content-encoding ${g.oddEncoding}`),
          body: f.body,
          size: String(f.metaLen),
          expect: 'either',
          statuses: [...UNGRANTED, 'undecodable'],
        };
      }
    }
  });

test('generated prerender-protocol results: malformed framing or metadata is a 400 {error, code}, a well-formed one a 204 that changes nothing, never a 500', async () => {
  const beforeState = await snapshot();
  const cases = fc.sample(framedArb, { seed: SEED, numRuns: FRAMED_RUNS });
  const failures: string[] = [];
  const tally: Record<string, number> = {};
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const c = cases[next++]!;
      const headers: Record<string, string> = {
        'content-type': 'application/octet-stream',
        'x-worker-id': c.workerId,
      };
      if (c.size !== null) headers['x-metadata-size'] = c.size;
      let res;
      try {
        res = await send({
          method: 'POST',
          path: '/render_queue/job_result',
          who: 'fleet',
          headers,
          raw: c.body,
        });
      } catch (e) {
        failures.push(`${c.label}: transport error ${(e as Error).message}`);
        continue;
      }
      const rs = res.headers['x-result-status'];
      const key = `${c.expect}:${res.status}${typeof rs === 'string' ? ' ' + rs : ''}`;
      tally[key] = (tally[key] ?? 0) + 1;
      const problems: string[] = [];
      if (res.status >= 500) problems.push('a 5xx');
      const as400 =
        res.status === 400 && typeof res.json?.error === 'string' && typeof res.json?.code === 'string';
      const as204 =
        res.status === 204 && res.text === '' && typeof rs === 'string' && c.statuses.includes(rs);
      if (c.expect === 'malformed' && !as400) problems.push(`expected 400 {error, code}, got ${res.status}`);
      if (c.expect === 'wellFormed' && !as204)
        problems.push(
          `expected 204 with x-result-status ${c.statuses.join('|')}, got ${res.status} ${String(rs)}`,
        );
      if (c.expect === 'either' && !as400 && !as204) problems.push(`expected 400 or 204, got ${res.status}`);
      problems.push(
        ...contract().problems({
          method: 'POST',
          path: '/render_queue/job_result',
          status: res.status,
          headers: res.headers,
          text: res.text,
        }),
      );
      if (problems.length) failures.push(`${c.label}: ${problems.join('; ')}: ${res.text.slice(0, 200)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  console.log(`fuzz (framed): ${cases.length} results, seed ${SEED}, answers ${JSON.stringify(tally)}`);
  const count = (e: FramedCase['expect']) => cases.filter((c) => c.expect === e).length;
  assert.ok(count('malformed') >= FRAMED_RUNS / 3, `${count('malformed')} malformed`);
  assert.ok(count('wellFormed') >= FRAMED_RUNS / 5, `${count('wellFormed')} well-formed`);
  assert.deepEqual(failures.slice(0, 20), [], `seed ${SEED}: ${failures.length} failing results`);
  const health = await h.fetch('/prerender_admin/health', { fresh: true });
  assert.equal(health.status, 200, 'Harper still serves');
  assert.deepEqual(
    await snapshot(),
    beforeState,
    `seed ${SEED}: the schedule, config, fleets, hooks or pauses changed`,
  );
});

// ------------------------------------------------------------------ serving: /p/<url> (docs/serving.md)

const SERVING_RUNS = Number(process.env.QK_FUZZ_SERVING_RUNS ?? 400);

interface ServeCase {
  label: string;
  method: string;
  path: string;
  who: Who;
  headers: Record<string, string>;
  expect: number[];
  code?: string;
}

/** A /p/ target: served and unserved hosts, filed and unfiled URLs, and URLs no target could have. */
const serveTarget = fc.oneof(
  fc.nat({ max: 40 }).map((i) => ({ url: `https://fuzz.example.com/p/${i}`, valid: true })),
  rand.map((s) => ({ url: `https://fuzz.example.com/${s}?q=${s}`, valid: true })),
  rand.map((s) => ({ url: `https://other.example.org/${s}`, valid: true })),
  rand.map((s) => ({ url: `http://127.0.0.1:1/${s}`, valid: true })),
  fc.constantFrom(
    { url: '', valid: false },
    { url: 'ftp://fuzz.example.com/x', valid: false },
    { url: 'fuzz.example.com/x', valid: false },
    { url: 'https://fuzz.example.com/%22', valid: true },
    { url: 'https://fuzz.example.com/%ff%fe', valid: true },
    { url: 'javascript:alert(1)', valid: false },
    { url: 'https:', valid: false },
    { url: 'https://fuzz.example.com/' + 'x'.repeat(2000), valid: false },
  ),
);

const headerJunk = fc.string({
  unit: fc.constantFrom(...' abcxyz,;=*"/W0123456789-_.'.split('')),
  maxLength: 60,
});

const serveArb: fc.Arbitrary<ServeCase> = fc
  .record({
    target: serveTarget,
    method: fc.oneof(
      { arbitrary: fc.constantFrom('GET', 'HEAD'), weight: 8 },
      { arbitrary: fc.constantFrom('POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH'), weight: 2 },
    ),
    who: fc.constantFrom<Who>('none', 'none', 'none', 'wrongPassword', 'fleet'),
    ifNoneMatch: rarely(headerJunk, 30),
    ifModifiedSince: rarely(fc.oneof(headerJunk, fc.constant('Wed, 02 Dec 2026 10:00:00 GMT')), 20),
    acceptEncoding: rarely(headerJunk, 30),
    device: rarely(
      hostileString.filter((s) => /^[\x21-\x7e]*$/.test(s)),
      20,
    ),
    renderNow: rarely(headerJunk, 20),
    loop: rarely(fc.constantFrom('1', '0', 'yes', ''), 10),
  })
  .map((g): ServeCase => {
    const headers: Record<string, string> = {};
    if (g.ifNoneMatch !== null) headers['if-none-match'] = g.ifNoneMatch;
    if (g.ifModifiedSince !== null) headers['if-modified-since'] = g.ifModifiedSince;
    if (g.acceptEncoding !== null) headers['accept-encoding'] = g.acceptEncoding;
    if (g.device !== null) headers['x-device-type'] = g.device;
    if (g.renderNow !== null) headers['x-render-now'] = g.renderNow;
    if (g.loop !== null) headers['x-queue-keeper-origin'] = g.loop;
    // A path the client's URL parser would rewrite is sent as generated (raw target).
    const path = `/p/${g.target.url}`;
    const label = `${g.method} ${path.slice(0, 80)} as ${g.who} ${JSON.stringify(headers).slice(0, 120)}`;
    const base = { label, method: g.method, path, who: g.who, headers };
    if (g.method !== 'GET' && g.method !== 'HEAD')
      return { ...base, expect: [405], code: 'method_not_allowed' };
    if (g.loop !== null) return { ...base, expect: [508], code: 'loop_detected' };
    if (!g.target.valid) return { ...base, expect: [400], code: 'invalid_url' };
    // Nothing is stored here: every valid URL is a miss, and the miss policy is notFound.
    return { ...base, expect: [404], code: 'not_found' };
  });

test('generated /p/ requests: hostile URLs and headers, any credentials, never a 500, nothing changed', async (t) => {
  // Only loopback is ever dialed: the miss policy answers 404 (never an origin fetch), nothing is filed.
  const cfg = (await h.fetch('/prerender_admin/config')).json as { serving: Record<string, unknown> };
  t.after(() =>
    h.fetch('/prerender_admin/config', {
      body: {
        serving: {
          hosts: cfg.serving.hosts,
          onMiss: cfg.serving.onMiss,
          discoverPerMinute: cfg.serving.discoverPerMinute,
        },
      },
    }),
  );
  const set = await h.fetch('/prerender_admin/config', {
    body: {
      serving: { hosts: ['fuzz.example.com', '127.0.0.1:1'], onMiss: 'notFound', discoverPerMinute: 0 },
    },
  });
  assert.equal(set.status, 200, set.text);
  const beforeState = await snapshot();
  const cases = fc.sample(serveArb, { seed: SEED, numRuns: SERVING_RUNS });
  const failures: string[] = [];
  const statuses: Record<number, number> = {};
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const c = cases[next++]!;
      let res;
      try {
        res = await send({ ...c, raw: undefined });
      } catch (e) {
        failures.push(`${c.label}: transport error ${(e as Error).message}`);
        continue;
      }
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      const problems: string[] = [];
      // 508 is the loop guard's refusal (docs/serving.md), asked for by the request: the only 5xx allowed.
      if (res.status >= 500 && !(res.status === 508 && c.expect.includes(508))) problems.push('a 5xx');
      if (!c.expect.includes(res.status))
        problems.push(`status ${res.status}, expected ${c.expect.join('|')}`);
      if (res.status >= 400 && c.method !== 'HEAD') {
        if (typeof res.json?.error !== 'string' || typeof res.json?.code !== 'string')
          problems.push('not {error, code}');
        else if (c.code && res.json.code !== c.code)
          problems.push(`code ${res.json.code}, expected ${c.code}`);
      }
      problems.push(
        ...contract().problems({
          method: c.method,
          path: c.path,
          status: res.status,
          headers: res.headers,
          text: res.text,
        }),
      );
      if (problems.length) failures.push(`${c.label}: ${problems.join('; ')}: ${res.text.slice(0, 200)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  console.log(`fuzz (serving): ${cases.length} requests, seed ${SEED}, statuses ${JSON.stringify(statuses)}`);
  assert.deepEqual(failures.slice(0, 20), [], `seed ${SEED}: ${failures.length} failing /p/ requests`);
  assert.ok((statuses[404] ?? 0) > 0 && (statuses[400] ?? 0) > 0 && (statuses[508] ?? 0) > 0);
  assert.deepEqual(await snapshot(), beforeState, `seed ${SEED}: a /p/ request changed something`);
});
