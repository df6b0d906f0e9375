// The notify dispatcher with a fake clock, store and transport: fan-out, signing, retries with one
// webhook-id, the re-check before every attempt, health writes, auto-disable, fail-closed and kill switch.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Webhook } from 'standardwebhooks';
import { defaultConfig, type QueueKeeperConfig } from '../../util/config/schema.js';
import {
  Dispatcher,
  type DispatcherDeps,
  type SendOutcome,
  type Wake,
} from '../../services/notify/dispatcher.js';
import type { DeliveryHealth, FleetRecord, HookRecord } from '../../services/notify/fleets.js';
import { mintSecret } from '../../util/notify/webhookSignature.js';

interface Sent {
  url: string;
  headers: Record<string, string>;
  body: Record<string, unknown>;
  raw: string;
}

function fleet(id: string, over: Partial<FleetRecord> = {}): FleetRecord {
  return {
    id,
    name: `fleet ${id}`,
    state: 'active',
    queues: [],
    username: null,
    createdAt: 0,
    revokedAt: null,
    ...over,
  };
}

function hook(id: string, fleetId: string, over: Partial<HookRecord> = {}): HookRecord {
  return {
    id,
    fleetId,
    url: `https://hooks.example.com/${id}`,
    queues: [],
    enabled: true,
    disabledReason: null,
    consecutiveFailures: 0,
    lastStatus: null,
    lastError: null,
    lastAttemptAt: null,
    sealedSecret: '',
    sealedPreviousSecret: null,
    previousValidUntil: null,
    createdAt: 0,
    ...over,
  };
}

function world(
  opts: {
    reply?: (attempt: number, s: Sent) => SendOutcome;
    cfg?: (c: QueueKeeperConfig) => void;
    /** Retry waits stay pending until the test releases them. */
    manualSleep?: boolean;
  } = {},
) {
  // Real time: the independent verifier refuses timestamps more than 5 minutes from its own clock.
  let clock = Date.now();
  const cfg = defaultConfig();
  opts.cfg?.(cfg);
  const fleets = new Map<string, FleetRecord>();
  const hooks = new Map<string, HookRecord>();
  const secrets = new Map<string, { current: string; previous?: string; previousValidUntil?: number }>();
  const sent: Sent[] = [];
  const sleeps: number[] = [];
  const sleeping: Array<() => void> = [];
  const healths: Array<{ id: string; health: DeliveryHealth }> = [];
  const counts: Record<string, number> = {};
  const warnings: string[] = [];
  let disableNext = false;
  let key: Buffer | null = Buffer.alloc(32, 1);
  /** Runs between attempts (after the sleep): lets a test change the world mid-delivery. */
  let betweenAttempts: (() => void) | null = null;
  const deps: DispatcherDeps = {
    now: () => clock,
    random: () => 0.5,
    sleep: async (ms) => {
      sleeps.push(ms);
      if (opts.manualSleep) await new Promise<void>((r) => sleeping.push(r));
      clock += ms;
      betweenAttempts?.();
    },
    config: () => cfg,
    key: () => key,
    fleets: async () => [...fleets.values()],
    hooks: async () => [...hooks.values()],
    getFleet: async (id) => fleets.get(id),
    getHook: async (id) => hooks.get(id),
    secrets: (h) => {
      const s = secrets.get(h.id);
      if (!s) throw new Error('does not open');
      return {
        current: s.current,
        previous: s.previous ?? null,
        previousValidUntil: s.previousValidUntil ?? null,
      };
    },
    send: async (url, headers, raw) => {
      const s: Sent = { url: url.href, headers, raw, body: JSON.parse(raw) as Record<string, unknown> };
      sent.push(s);
      return opts.reply ? opts.reply(sent.length, s) : { status: 204 };
    },
    recordDelivery: async (id, health) => {
      healths.push({ id, health });
      const d = disableNext;
      disableNext = false;
      return d;
    },
    count: (name, n = 1) => {
      counts[name] = (counts[name] ?? 0) + n;
    },
    log: {
      info: () => undefined,
      warn: (m: unknown) => void warnings.push(String(m)),
      error: () => undefined,
    },
    userAgent: 'queue-keeper/test',
  };
  const d = new Dispatcher(deps);
  const add = (f: FleetRecord, ...hs: HookRecord[]) => {
    fleets.set(f.id, f);
    for (const h of hs) {
      hooks.set(h.id, h);
      secrets.set(h.id, { current: mintSecret() });
    }
  };
  return {
    d,
    cfg,
    add,
    fleets,
    hooks,
    secrets,
    sent,
    sleeps,
    sleeping,
    healths,
    counts,
    warnings,
    now: () => clock,
    setKey: (k: Buffer | null) => void (key = k),
    disableOnNextHealth: () => void (disableNext = true),
    between: (fn: () => void) => void (betweenAttempts = fn),
  };
}

const job = {
  id: 'https://example.com/a',
  url: 'https://example.com/a',
  dueAt: 1_767_225_540_000,
  fromSitemap: true,
};
const wake = (over: Partial<Wake> = {}): Wake => ({
  reason: 'created',
  queue: 'product',
  job,
  createdAt: 1_767_225_600_000,
  ...over,
});

test('a wake reaches every enabled hook of an active fleet covering the queue, signed and shaped as docs/wakes.md says', async () => {
  const w = world();
  w.add(fleet('a'), hook('h1', 'a'), hook('h2', 'a', { queues: ['product'] }));
  w.add(fleet('b', { queues: ['blog'] }), hook('h3', 'b')); // fleet does not serve the queue
  w.add(fleet('c', { state: 'revoked' }), hook('h4', 'c'));
  w.add(fleet('d'), hook('h5', 'd', { enabled: false }), hook('h6', 'd', { queues: ['blog'] }));
  assert.equal(await w.d.fire(wake()), 2);
  await w.d.idle();
  assert.deepEqual(w.sent.map((s) => s.url).sort(), [
    'https://hooks.example.com/h1',
    'https://hooks.example.com/h2',
  ]);
  const s = w.sent.find((x) => x.url.endsWith('/h1'))!;
  assert.deepEqual(s.body, {
    type: 'render.ready',
    reason: 'created',
    queue: 'product',
    fleet: 'fleet a',
    job,
    attempt: 1,
    createdAt: 1_767_225_600_000,
  });
  assert.equal(s.headers['user-agent'], 'queue-keeper/test');
  assert.equal(s.headers['content-type'], 'application/json');
  // Verified by an independent Standard Webhooks implementation, with the timestamp of the attempt.
  const verifier = new Webhook(w.secrets.get('h1')!.current);
  assert.doesNotThrow(() => verifier.verify(s.raw, s.headers));
  assert.equal(Number(s.headers['webhook-timestamp']), Math.floor(w.now() / 1000));
  assert.equal(w.counts.notify_delivered, 2);
  assert.deepEqual(
    w.healths.map((h) => h.health.success),
    [true, true],
  );
});

test('a 500 receiver gets maxAttempts attempts with one webhook-id, ~1 s then ~5 s apart, and one failure write', async () => {
  const w = world({ reply: () => ({ status: 500 }) });
  w.add(fleet('a'), hook('h1', 'a'));
  await w.d.fire(wake());
  await w.d.idle();
  assert.equal(w.sent.length, 3);
  assert.equal(new Set(w.sent.map((s) => s.headers['webhook-id'])).size, 1);
  assert.deepEqual(
    w.sent.map((s) => s.body.attempt),
    [1, 2, 3],
  );
  assert.deepEqual(w.sleeps, [1000, 5000]); // random 0.5 = no jitter
  assert.equal(w.healths.length, 1);
  assert.deepEqual(w.healths[0]!.health, { success: false, status: 500, error: 'HTTP 500' });
  assert.equal(w.counts.notify_failed, 1);
  assert.equal(w.counts.notify_delivered, undefined);
});

test('a retry that then succeeds is one delivery with one success write', async () => {
  const w = world({ reply: (n) => (n === 1 ? { error: 'timeout', phrase: 'timed out' } : { status: 200 }) });
  w.add(fleet('a'), hook('h1', 'a'));
  await w.d.fire(wake());
  await w.d.idle();
  assert.equal(w.sent.length, 2);
  assert.deepEqual(
    w.healths.map((h) => h.health),
    [{ success: true, status: 200, error: null }],
  );
});

test('a redirect, another 4xx or a refused address is final: no retry', async () => {
  for (const outcome of [
    { status: 302 },
    { status: 404 },
    { error: 'refused', phrase: 'resolves to a private address' },
  ] as SendOutcome[]) {
    const w = world({ reply: () => outcome });
    w.add(fleet('a'), hook('h1', 'a'));
    await w.d.fire(wake());
    await w.d.idle();
    assert.equal(w.sent.length, 1, JSON.stringify(outcome));
    assert.equal(w.healths.length, 1);
  }
});

test('every attempt re-checks the fleet and hook: a revoke, disable, delete or narrowed filter between attempts stops the delivery', async () => {
  const changes: Array<[string, (w: ReturnType<typeof world>) => void]> = [
    ['fleet revoked', (w) => w.fleets.set('a', fleet('a', { state: 'revoked' }))],
    ['fleet narrowed', (w) => w.fleets.set('a', fleet('a', { queues: ['blog'] }))],
    ['hook disabled', (w) => w.hooks.set('h1', hook('h1', 'a', { enabled: false }))],
    ['hook filter moved', (w) => w.hooks.set('h1', hook('h1', 'a', { queues: ['blog'] }))],
    ['hook deleted', (w) => w.hooks.delete('h1')],
    ['kill switch', (w) => void (w.cfg.notify.maxHooksPerFleet = 0)],
    ['sealing key gone', (w) => w.setKey(null)],
  ];
  for (const [what, change] of changes) {
    const w = world({ reply: () => ({ status: 503 }) });
    w.add(fleet('a'), hook('h1', 'a'));
    w.between(() => change(w));
    await w.d.fire(wake());
    await w.d.idle();
    assert.equal(w.sent.length, 1, what);
    assert.equal(w.healths.length, 0, `${what}: nothing attempted, so no health write`);
  }
});

test('a delivery already queued when its fleet is revoked sends nothing', async () => {
  const w = world();
  w.add(fleet('a'), hook('h1', 'a'));
  const fired = w.d.fire(wake());
  w.fleets.set('a', fleet('a', { state: 'revoked' })); // lands before the first attempt's re-check
  await fired;
  await w.d.idle();
  assert.equal(w.sent.length, 0);
});

test('the failure that crosses the threshold is counted as an auto-disable and logged', async () => {
  const w = world({ reply: () => ({ status: 410 }) });
  w.add(fleet('a'), hook('h1', 'a'));
  w.disableOnNextHealth();
  await w.d.fire(wake());
  await w.d.idle();
  assert.equal(w.counts.notify_disabled, 1);
  assert.ok(w.warnings.some((m) => m.includes('hook h1 disabled')));
});

test('without a sealing key or with the kill switch nothing is queued', async () => {
  const w = world();
  w.add(fleet('a'), hook('h1', 'a'));
  w.setKey(null);
  assert.equal(await w.d.fire(wake()), 0);
  w.setKey(Buffer.alloc(32, 1));
  w.cfg.notify.maxHooksPerFleet = 0;
  assert.equal(await w.d.fire(wake()), 0);
  await w.d.idle();
  assert.equal(w.sent.length, 0);
});

test('a stalled wake goes only to the charged fleet', async () => {
  const w = world();
  w.add(fleet('a'), hook('h1', 'a'));
  w.add(fleet('b'), hook('h2', 'b'));
  assert.equal(await w.d.fire(wake({ reason: 'stalled', fleetId: 'b' })), 1);
  await w.d.idle();
  assert.deepEqual(
    w.sent.map((s) => [s.url, s.body.reason, s.body.fleet]),
    [['https://hooks.example.com/h2', 'stalled', 'fleet b']],
  );
});

test('a hook over notify.ratePerMinute has the extra wake dropped and counted, with one warning', async () => {
  const w = world({ cfg: (c) => void (c.notify.ratePerMinute = 2) });
  w.add(fleet('a'), hook('h1', 'a'));
  for (let i = 0; i < 4; i++) await w.d.fire(wake());
  await w.d.idle();
  assert.equal(w.sent.length, 2);
  assert.equal(w.counts.notify_dropped, 2);
  assert.equal(w.warnings.filter((m) => m.includes('dropped')).length, 1);
});

test('during a rotation grace both secrets sign, so a receiver holding either verifies', async () => {
  const w = world();
  w.add(fleet('a'), hook('h1', 'a'));
  const previous = mintSecret();
  w.secrets.set('h1', { current: mintSecret(), previous, previousValidUntil: w.now() + 3_600_000 });
  await w.d.fire(wake());
  await w.d.idle();
  const s = w.sent[0]!;
  assert.equal(s.headers['webhook-signature']!.split(' ').length, 2);
  assert.doesNotThrow(() => new Webhook(previous).verify(s.raw, s.headers));
  assert.doesNotThrow(() => new Webhook(w.secrets.get('h1')!.current).verify(s.raw, s.headers));
});

const turns = async (n = 20) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

test('hooks waiting out a retry hold no slot: a fifth hook is served while four receivers fail', async () => {
  const w = world({
    manualSleep: true,
    reply: (_n, s) => (s.url.includes('/slow') ? { status: 503 } : { status: 204 }),
  });
  w.add(
    fleet('a'),
    ...[1, 2, 3, 4].map((i) => hook(`slow${i}`, 'a', { url: `https://hooks.example.com/slow${i}` })),
  );
  await w.d.fire(wake());
  await turns();
  assert.equal(w.sent.length, 4, 'four first attempts, now waiting to retry');
  w.add(fleet('b'), hook('fast', 'b'));
  await w.d.fire(wake({ reason: 'stalled', fleetId: 'b' }));
  await turns();
  assert.ok(
    w.sent.some((s) => s.url.endsWith('/fast')),
    'the other hook did not wait for the slow ones',
  );
  while (w.sleeping.length) {
    for (const r of w.sleeping.splice(0)) r();
    await turns();
  }
  await w.d.idle();
  assert.equal(w.sent.filter((s) => s.url.includes('/slow')).length, 12);
});

test('one hook gets one delivery at a time, in order', async () => {
  const w = world({ manualSleep: true, reply: (n) => (n === 1 ? { status: 500 } : { status: 204 }) });
  w.add(fleet('a'), hook('h1', 'a'));
  await w.d.fire(wake({ queue: 'product' }));
  await w.d.fire(wake({ queue: 'product', createdAt: 2 }));
  await turns();
  assert.equal(w.sent.length, 1, 'the second delivery waits while the first waits to retry');
  for (const r of w.sleeping.splice(0)) r();
  await w.d.idle();
  assert.deepEqual(
    w.sent.map((s) => [s.body.createdAt, s.body.attempt]),
    [
      [1_767_225_600_000, 1],
      [1_767_225_600_000, 2],
      [2, 1],
    ],
  );
});

test('a fault of ours is not the receiver fault: a secret that will not open or an oversized body sends nothing and writes no health', async () => {
  const w = world();
  w.add(fleet('a'), hook('h1', 'a'));
  w.secrets.delete('h1');
  await w.d.fire(wake());
  await w.d.idle();
  const big = world();
  big.add(fleet('a', { name: 'n'.repeat(3000) }), hook('h1', 'a'));
  await big.d.fire(wake({ job: { ...job, url: 'https://example.com/' + '"'.repeat(1000) } }));
  await big.d.idle();
  for (const x of [w, big]) {
    assert.equal(x.sent.length, 0);
    assert.equal(x.healths.length, 0);
    assert.deepEqual(
      x.d.recent.map((r) => r.end),
      ['abandoned'],
    );
  }
});

test('a temporary DNS failure (EAI_AGAIN) is retried like the network, and a delivery that saw only that does not count toward auto-disable', async () => {
  const w = world({
    reply: () => ({ error: 'dns', phrase: 'could not be resolved just now (temporary DNS failure)' }),
  });
  w.add(fleet('a'), hook('h1', 'a'));
  await w.d.fire(wake());
  await w.d.idle();
  assert.equal(w.sent.length, 3, 'every attempt is made');
  assert.deepEqual(w.sleeps, [1000, 5000]);
  assert.deepEqual(w.healths, [
    {
      id: 'h1',
      health: {
        success: false,
        status: null,
        error: 'could not be resolved just now (temporary DNS failure)',
        counts: false,
      },
    },
  ]);
  // A network error that is the receiver's (connection refused) still counts.
  const net = world({ reply: () => ({ error: 'network', phrase: 'connection refused' }) });
  net.add(fleet('a'), hook('h1', 'a'));
  await net.d.fire(wake());
  await net.d.idle();
  assert.equal(net.sent.length, 3);
  assert.equal(net.healths[0]!.health.counts, true);
});

test('a wake naming the longest acceptable URL, queue and fleet name is delivered within 4 KiB', async () => {
  const { MAX_FLEET_NAME_BYTES, MAX_QUEUE_NAME_CHARS } = await import('../../util/notify/wakeBody.js');
  const { urlProblem, MAX_URL_BYTES } = await import('../../util/schedule/targetChecks.js');
  const head = 'https://a.example/';
  const url = head + 'é'.repeat((MAX_URL_BYTES - head.length) / 2);
  assert.equal(Buffer.byteLength(url), MAX_URL_BYTES);
  assert.equal(urlProblem(url), null);
  const w = world({ cfg: (c) => void (c.notify.maxAttempts = 10) });
  const longJob = { id: url, url, dueAt: 9_999_999_999_999, fromSitemap: false };
  // Nine failures, then the tenth (two-digit) attempt is the largest body; it must still go out.
  let n = 0;
  const w10 = world({
    cfg: (c) => void (c.notify.maxAttempts = 10),
    reply: () => (++n < 10 ? { status: 503 } : { status: 204 }),
  });
  for (const x of [w, w10]) {
    x.add(fleet('a', { name: 'ü'.repeat(MAX_FLEET_NAME_BYTES / 2) }), hook('h1', 'a'));
    await x.d.fire(
      wake({
        reason: 'requeued',
        queue: 'q'.repeat(MAX_QUEUE_NAME_CHARS),
        job: longJob,
        createdAt: 9_999_999_999_999,
      }),
    );
    await x.d.idle();
  }
  assert.equal(w.sent.length, 1);
  assert.equal(w10.sent.length, 10);
  const last = w10.sent[9]!;
  assert.equal(last.body.attempt, 10);
  assert.ok(Buffer.byteLength(last.raw) <= 4096, `${Buffer.byteLength(last.raw)} bytes`);
  assert.deepEqual(
    w10.d.recent.map((r) => r.end),
    ['delivered'],
  );
});
