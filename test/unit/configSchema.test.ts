import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  applyValues,
  changedPaths,
  checkPartial,
  CONFIG_KEYS,
  ConfigError,
  configWarnings,
  defaultConfig,
  getPath,
  mergePartials,
} from '../../util/config/schema.js';

test('every documented default is in the schema', () => {
  const d = defaultConfig();
  assert.equal(d.queue.keeper.publishInterval, 1000);
  assert.equal(d.queue.keeper.stateInterval, 5000);
  assert.equal(d.queue.keeper.verifyInterval, 3_600_000);
  assert.equal(d.queue.ready.capacity, 5000);
  assert.equal(d.queue.ready.sitemapBoost, 2);
  assert.equal(d.queue.ready.urgentHeadStart, 1);
  assert.equal(d.queue.ready.changedHeadStart, 1);
  assert.equal(d.queue.jobLeaseTime, 600_000);
  assert.equal(d.queue.maxClaimLimit, 25);
  assert.equal(d.queue.maxLeases, 4096);
  assert.equal(d.queue.statusSyncInterval, 60_000);
  assert.deepEqual(d.queue.fleetRoles, ['render_fleet']);
  assert.deepEqual(d.queue.feederRoles, ['render_feeder']);
  assert.deepEqual(d.queue.discoverRoles, ['render_discover']);
  assert.equal(d.render.defaultInterval, 86_400_000);
  assert.deepEqual(d.render.routes, []);
  assert.deepEqual(d.render.failureRetry, {
    fastRetries: 2,
    backoffFactor: 2,
    maxBackoff: 604_800_000,
    nonSitemapPenalty: 4,
  });
  assert.equal(d.render.maxBodyBytes, 5_242_880);
  assert.equal(d.notify.allowHttp, false);
  assert.deepEqual(d.notify.allowCidrs, []);
  assert.equal(d.notify.attemptTimeout, 5000);
  assert.equal(d.notify.maxAttempts, 3);
  assert.equal(d.notify.maxHooksPerFleet, 5);
  assert.equal(d.notify.disableAfterFailures, 10);
  assert.equal(d.notify.ratePerMinute, 120);
  assert.equal(d.notify.edgeCooldown, 60_000);
  assert.equal(d.stall.after, 120_000);
  assert.deepEqual(d.stall.backoff, [300_000, 1_200_000, 3_600_000, 21_600_000]);
  assert.equal(d.stall.maxNudges, 5);
  assert.equal(d.stall.sweepLimit, 4);
  assert.equal(d.maintenance.tickInterval, 30_000);
});

test('a nested partial is checked and applied; other keys keep their values', () => {
  const { values, unknown } = checkPartial({
    stall: { after: 2000 },
    queue: { keeper: { publishInterval: 250 } },
  });
  assert.deepEqual(unknown, []);
  const cfg = applyValues(defaultConfig(), values);
  assert.equal(cfg.stall.after, 2000);
  assert.equal(cfg.queue.keeper.publishInterval, 250);
  assert.equal(cfg.stall.maxNudges, 5);
  assert.deepEqual(changedPaths(defaultConfig(), cfg).sort(), [
    'queue.keeper.publishInterval',
    'stall.after',
  ]);
});

function refusal(partial: unknown): ConfigError {
  try {
    checkPartial(partial);
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    return e;
  }
  assert.fail('expected a ConfigError');
}

test('a known section given anything but an object is refused naming the section, not ignored as unknown', () => {
  for (const [partial, key] of [
    [{ stall: 5 }, 'stall'],
    [{ queue: { keeper: 'fast' } }, 'queue.keeper'],
    [{ notify: null }, 'notify'],
    [{ render: [1, 2] }, 'render'],
  ] as const) {
    const e = refusal(partial);
    assert.equal(e.key, key);
    assert.match(e.message, /is a section of keys and must be an object/);
  }
  // Lenient (stored overrides): the error is collected and nothing is taken from the section.
  const lenient = checkPartial({ stall: 5, queue: { maxClaimLimit: 10 } }, { lenient: true });
  assert.deepEqual(
    lenient.errors.map((e) => e.key),
    ['stall'],
  );
  assert.deepEqual([...lenient.values.keys()], ['queue.maxClaimLimit']);
  assert.deepEqual(lenient.unknown, []);
  assert.deepEqual(checkPartial({ nosuch: 5 }).unknown, ['nosuch'], 'a name we do not know is still unknown');
});

test('a bad value is refused with the key named', () => {
  assert.equal(refusal({ stall: { after: 'soon' } }).key, 'stall.after');
  assert.equal(refusal({ queue: { keeper: { publishInterval: 50 } } }).key, 'queue.keeper.publishInterval');
  assert.equal(
    refusal({ queue: { keeper: { publishInterval: 70000 } } }).key,
    'queue.keeper.publishInterval',
  );
  assert.equal(refusal({ queue: { maxClaimLimit: 2.5 } }).key, 'queue.maxClaimLimit');
  assert.equal(refusal({ notify: { allowHttp: 'yes' } }).key, 'notify.allowHttp');
  assert.equal(refusal({ stall: { backoff: [1000, 'x'] } }).key, 'stall.backoff[1]');
  assert.equal(
    refusal({ render: { routes: [{ name: 'a', match: 'glob', path: '/' }] } }).key,
    'render.routes[0].match',
  );
  assert.equal(
    refusal({ render: { routes: [{ name: 'a', match: 'exact', path: '/', renderInterval: 5 }] } }).key,
    'render.routes[0].renderInterval',
  );
  assert.equal(refusal({ queue: { fleetRoles: 'render_fleet' } }).key, 'queue.fleetRoles');
  assert.equal(refusal({ notify: { allowCidrs: ['not an address'] } }).key, 'notify.allowCidrs');
  assert.match(refusal({ stall: { after: 5 } }).message, /stall\.after must be at least 1000/);
  // A cadence over a year is refused with the bound it broke named, not only the lower one.
  assert.match(
    refusal({
      render: { routes: [{ name: 'a', match: 'exact', path: '/', renderInterval: 366 * 86_400_000 }] },
    }).message,
    /renderInterval must be an integer from 60000 to 31536000000 ms \(365 days\)/,
  );
});

test('verifyInterval accepts 0 (off) but nothing between 0 and 10 s', () => {
  assert.equal(
    checkPartial({ queue: { keeper: { verifyInterval: 0 } } }).values.get('queue.keeper.verifyInterval'),
    0,
  );
  assert.equal(refusal({ queue: { keeper: { verifyInterval: 5000 } } }).key, 'queue.keeper.verifyInterval');
});

test('unknown keys are reported by path and ignored', () => {
  const { values, unknown } = checkPartial({
    stall: { after: 2000, soon: 1 },
    nope: { a: 1 },
    queue: { keeperz: 3 },
  });
  assert.deepEqual(unknown.sort(), ['nope', 'queue.keeperz', 'stall.soon']);
  assert.deepEqual([...values.keys()], ['stall.after']);
});

test('overrides merge nested objects and replace arrays', () => {
  const merged = mergePartials(
    { stall: { after: 2000, backoff: [1000, 2000] } },
    { stall: { backoff: [5000] }, notify: { allowHttp: true } },
  );
  assert.deepEqual(merged, { stall: { after: 2000, backoff: [5000] }, notify: { allowHttp: true } });
});

test('every key has a description, an effect and a default that passes its own check', () => {
  for (const k of CONFIG_KEYS) {
    assert.ok(k.description.length > 10, k.path);
    const partial: Record<string, unknown> = {};
    let o = partial;
    const parts = k.path.split('.');
    parts.slice(0, -1).forEach((p) => (o = (o[p] = {}) as Record<string, unknown>));
    o[parts[parts.length - 1]!] = k.default;
    const { values } = checkPartial(partial);
    assert.deepEqual(values.get(k.path), k.default);
    assert.deepEqual(getPath(defaultConfig(), k.path), k.default);
  }
});

test('notify.allowCidrs is checked by the transport parser: a bad entry is refused naming notify.allowCidrs', () => {
  for (const bad of [
    '10.0.0.0/40',
    '999.1.1.1',
    '::::',
    '10.0.0.1/',
    '1.2.3.4/8/9',
    'fe80::1%eth0',
    '0x7f.1',
  ])
    assert.throws(
      () => checkPartial({ notify: { allowCidrs: ['10.0.0.0/8', bad] } }),
      (e) => e instanceof ConfigError && e.key === 'notify.allowCidrs' && /allowCidrs\[1\]/.test(e.message),
      bad,
    );
  assert.deepEqual(
    checkPartial({ notify: { allowCidrs: ['10.0.0.0/8', '127.0.0.1', '::1/128'] } }).values.get(
      'notify.allowCidrs',
    ),
    ['10.0.0.0/8', '127.0.0.1', '::1/128'],
  );
});

test('a stored source checked leniently drops only its bad keys, keeping the rest', () => {
  const r = checkPartial(
    { notify: { allowCidrs: ['999.1.1.1'] }, stall: { after: 5000 } },
    { lenient: true },
  );
  assert.equal(r.values.get('stall.after'), 5000);
  assert.equal(r.values.has('notify.allowCidrs'), false);
  assert.deepEqual(
    r.errors.map((e) => e.key),
    ['notify.allowCidrs'],
  );
});

test('render.maxBatchBytes defaults to 64 MiB within 1 MiB to 256 MiB', () => {
  assert.equal(defaultConfig().render.maxBatchBytes, 64 * 1048576);
  assert.throws(() => checkPartial({ render: { maxBatchBytes: 1048575 } }), ConfigError);
  assert.throws(() => checkPartial({ render: { maxBatchBytes: 256 * 1048576 + 1 } }), ConfigError);
});

test('a route name longer than 64 characters is refused (it would not fit the wake budget)', () => {
  const route = (name: string) => ({ render: { routes: [{ name, match: 'prefix', path: '/p/' }] } });
  assert.doesNotThrow(() => checkPartial(route('r'.repeat(64))));
  assert.throws(
    () => checkPartial(route('r'.repeat(65))),
    (e) => e instanceof ConfigError && e.key === 'render.routes[0].name',
  );
});

test('render.callbackOrigin is an origin: a trailing / is dropped, a path, query, credentials or another scheme is refused naming the key', () => {
  const origin = (v: unknown) =>
    checkPartial({ render: { callbackOrigin: v } }).values.get('render.callbackOrigin');
  assert.equal(defaultConfig().render.callbackOrigin, null);
  assert.equal(origin('https://render-1.example.com:9926/'), 'https://render-1.example.com:9926');
  assert.equal(origin('http://127.0.0.1:9926'), 'http://127.0.0.1:9926');
  assert.equal(origin(null), null);
  for (const bad of [
    'https://a.example.com/render_queue',
    'https://a.example.com/?x=1',
    'ftp://a.example.com',
    'https://user:pw@a.example.com',
    'a.example.com:9926',
    5,
  ])
    assert.throws(
      () => origin(bad),
      (e: unknown) => e instanceof ConfigError && e.key === 'render.callbackOrigin',
    );
});

test('render.deviceTypes defaults to desktop and takes 1-8 distinct device names', () => {
  assert.deepEqual(defaultConfig().render.deviceTypes, ['desktop']);
  assert.equal(defaultConfig().render.deviceType, null);
  assert.deepEqual(
    checkPartial({ render: { deviceTypes: ['desktop', 'mobile', 'tv-4k'] } }).values.get(
      'render.deviceTypes',
    ),
    ['desktop', 'mobile', 'tv-4k'],
  );
  for (const bad of [
    [],
    ['Desktop'],
    ['a b'],
    ['desktop', 'desktop'],
    ['1st'],
    ['x'.repeat(33)],
    'desktop',
    [3],
    Array.from({ length: 9 }, (_, i) => `d${i}`),
  ])
    assert.throws(
      () => checkPartial({ render: { deviceTypes: bad } }),
      (e: unknown) => e instanceof ConfigError && e.key === 'render.deviceTypes',
      JSON.stringify(bad),
    );
});

test('the deprecated render.deviceType reads as a one-device list, lower-cased, and is warned about', () => {
  const of = (partial: unknown) => applyValues(defaultConfig(), checkPartial(partial).values);
  const legacy = of({ render: { deviceType: 'Mobile' } });
  assert.deepEqual(legacy.render.deviceTypes, ['mobile']);
  assert.match(configWarnings(legacy)[0]!, /render\.deviceType is deprecated/);
  // Set beside the list, the list wins.
  assert.deepEqual(
    of({ render: { deviceType: 'mobile', deviceTypes: ['desktop', 'tablet'] } }).render.deviceTypes,
    ['desktop', 'tablet'],
  );
  assert.deepEqual(configWarnings(of({ render: { deviceTypes: ['desktop', 'mobile'] } })), []);
  // A name the key took that is no device name even lower-cased is refused, naming the key.
  for (const bad of ['', 'a b', 'x'.repeat(65), 3, 'desktop_hd'])
    assert.throws(
      () => checkPartial({ render: { deviceType: bad } }),
      (e: unknown) => e instanceof ConfigError && e.key === 'render.deviceType',
    );
});

test("a jobLeaseTime under 60 s is valid, with a warning that names the prerender fleet's 30 s rule", () => {
  const at = (ms: number) =>
    applyValues(defaultConfig(), checkPartial({ queue: { jobLeaseTime: ms } }).values);
  assert.deepEqual(configWarnings(at(60_000)), []);
  const [w] = configWarnings(at(30_000));
  assert.match(w!, /queue\.jobLeaseTime 30000 ms is under 60000 ms/);
  assert.match(w!, /30 s of its lease left/);
});
