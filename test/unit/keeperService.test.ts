// Service tests of the keeper lifecycle over a fake table: an in-memory sorted map walked with
// lmdb getRange semantics, an event stream the test pushes into, and the real shared structures over
// plain ArrayBuffers. The clock is a number the test moves; `yieldLoop` is where a test interleaves
// writes and events with the walk, between chunks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  applyValues,
  changedPaths,
  checkPartial,
  defaultConfig,
  type QueueKeeperConfig,
} from '../../util/config/schema.js';
import { DutyScheduler } from '../../util/duties/scheduler.js';
import { rowHash } from '../../util/schedule/rowKey.js';
import { KeeperSignal } from '../../util/sharedMemory/keeperSignal.js';
import { ReadySet } from '../../util/sharedMemory/readySet.js';
import { toScheduleRow } from '../../util/schedule/rules.js';
import { StateDoc } from '../../util/sharedMemory/stateDoc.js';
import {
  KeeperService,
  RESUBSCRIBE_BACKOFF_MS,
  type ScheduleEvent,
  type ScheduleSource,
} from '../../services/keeper/service.js';
import { STAGE_LEAD_MS } from '../../util/keeper/publishPlan.js';
import { FakeClock } from '../fakeClock.js';
import { FakeStream, FakeTable, stored, type Stored } from '../fakeSchedule.js';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const NOW = Date.UTC(2025, 5, 1, 12, 0, 0); // minute-aligned, so NOW + 9_999 stays in NOW's minute

const keyOf = (i: number): string => `https://example.com/p/${String(i).padStart(6, '0')}|desktop`;

function withConfig(base: QueueKeeperConfig, partial: unknown): QueueKeeperConfig {
  return applyValues(base, checkPartial(partial).values);
}

type Hook = (yieldNo: number) => void | Promise<void>;

function harness(
  opts: {
    capacity?: number;
    streamsHonourEnd?: boolean;
    heldWalk?: boolean;
    /** The node owns every row (no `owns`), with the store's row count from this. */
    estimateRows?: () => number;
    /** With estimateRows: a clustered node (`owns` given) holding this share of the rows. */
    ownedShare?: number;
    /** The leader slot, as leadership.ts holds it: the keeper asks every publish tick. */
    leadership?: { held: boolean };
    /** The lease table's answer by hash, as resources.ts wires it: `leasedUntil` holds key → block end. */
    leasedUntil?: boolean;
  } = {},
) {
  const capacity = opts.capacity ?? 100;
  let cfg = withConfig(defaultConfig(), { queue: { ready: { capacity } } });
  const table = new FakeTable();
  const streams: FakeStream[] = [];
  const keyBytes = Math.max(2048, capacity * 64);
  const ready = new ReadySet(new ArrayBuffer(ReadySet.byteLength(capacity, keyBytes)), capacity, keyBytes);
  const signal = new KeeperSignal(new ArrayBuffer(KeeperSignal.byteLength()));
  const state = new StateDoc<unknown>(new ArrayBuffer(StateDoc.byteLength(1 << 18)), 1 << 18);
  const clock = Object.assign(new FakeClock(NOW), { inFlight: 0 });
  const now = clock.now;
  const leased = new Set<string>();
  /** With opts.leasedUntil: each blocked key's end (a lease, a hold, a release grace), by its rowHash. */
  const leasedUntil = new Map<string, number>();
  const hashed = (key: string) => {
    const h = rowHash(key);
    return `${h.hi}:${h.lo}`;
  };
  /** Lease lookups the keeper made: one per row a publish walk (or a staged selection) passes. */
  const probes = { count: 0, blocked: 0 };
  const errors: unknown[][] = [];
  const closed: unknown[] = [];
  let hook: Hook | null = null;
  let yields = 0;
  /** The verification walk's slice clock (real time in the service): moves only when a test moves it. */
  const slice = { ms: 0 };
  type Listener = (next: QueueKeeperConfig, prev: QueueKeeperConfig, changed: string[]) => void;
  const configListeners = new Set<Listener>();
  let owner: (key: string) => boolean = () => true;
  const failures = { subscribe: 0 };
  const scheduler = new DutyScheduler({
    now,
    timer: clock,
    log: { debug: () => undefined, error: (...a: unknown[]) => void errors.push(a) },
  });
  const source: ScheduleSource = {
    subscribe: async () => {
      if (failures.subscribe > 0) {
        failures.subscribe--;
        throw new Error('subscribe refused');
      }
      const s = new FakeStream(opts.streamsHonourEnd ?? true);
      streams.push(s);
      return s;
    },
    walk: (o) => table.walk(o),
    read: (key) => table.read(key),
    present: (key) => table.present(key),
    ...(opts.estimateRows ? { estimateRows: opts.estimateRows } : {}),
  };
  const warnings: unknown[][] = [];
  // As the real load walk does (walkScheduleHeld): one fields object, overwritten for every key.
  if (opts.heldWalk === true) {
    const fields = { ...toScheduleRow('', stored(0))!, cacheKey: undefined };
    delete fields.cacheKey;
    source.walkHeld = (o, visit) => {
      for (const { key, row } of table.walk(o))
        visit(key, row && Object.assign(fields, row, { cacheKey: undefined }));
    };
  }
  const svc = new KeeperService({
    source,
    ready,
    signal,
    state,
    config: () => cfg,
    publishInterval: () => cfg.queue.keeper.publishInterval,
    stateInterval: () => cfg.queue.keeper.stateInterval,
    isLeased: (key) => {
      probes.count++;
      return leased.has(key);
    },
    ...(opts.leasedUntil
      ? {
          leasedUntilHash: (hi: number, lo: number, at: number) => {
            probes.count++;
            const blocked = [...leasedUntil].find(([k]) => hashed(k) === `${hi}:${lo}`);
            if (blocked === undefined) return 0;
            probes.blocked++;
            return blocked[1] > at ? blocked[1] : 0;
          },
        }
      : {}),
    inFlight: () => clock.inFlight,
    nodeView: () => ({ paused: false, status: 'queued' }),
    log: {
      info: () => undefined,
      warn: (...a: unknown[]) => void warnings.push(a),
      error: (...a: unknown[]) => errors.push(a),
    },
    yieldLoop: async () => {
      yields++;
      await hook?.(yields);
    },
    sliceClock: () => slice.ms,
    ...(opts.estimateRows && opts.ownedShare === undefined ? {} : { owns: (key: string) => owner(key) }),
    ...(opts.ownedShare === undefined ? {} : { ownedShare: () => opts.ownedShare! }),
    ...(opts.leadership ? { holdLeadership: () => opts.leadership!.held } : {}),
    scheduler,
    clock: now,
    onConfigChange: (l) => {
      configListeners.add(l);
      return () => void configListeners.delete(l);
    },
  });
  /** Every publish the keeper makes, by the clock it was made at. */
  const publishes: number[] = [];
  // A publish's cost is real time (performance.now) and spaces early publishes apart; on the fake clock
  // publishes cost what the test says (0 unless it sets `cost.publishMs`), not what the machine's load did.
  // A flipped stage reports its walk's cost as `stageMs`: `cost.stageMs` here.
  const cost = { publishMs: 0, stageMs: 0 };
  const publishOnce = svc.publishOnce.bind(svc);
  svc.publishOnce = (t, force) => {
    publishes.push(t);
    const published = publishOnce(t, force);
    const last = svc.stats.lastPublish;
    if (published && last) {
      last.ms = cost.publishMs;
      if (last.staged) last.stageMs = cost.stageMs;
    }
    return published;
  };
  return {
    svc,
    source,
    slice,
    table,
    streams,
    ready,
    signal,
    state,
    clock,
    now,
    leased,
    leasedUntil,
    probes,
    errors,
    warnings,
    closed,
    failures,
    scheduler,
    configListeners,
    publishes,
    cost,
    setOwner: (fn: (key: string) => boolean) => void (owner = fn),
    onClosed: (err?: unknown) => void closed.push(err ?? 'ended'),
    setHook: (h: Hook | null) => {
      hook = h;
      yields = 0;
    },
    /** Changes the config as RuntimeConfig would: the listeners and the scheduler hear the changed paths. */
    setConfig: (partial: unknown) => {
      const prev = cfg;
      cfg = withConfig(cfg, partial);
      const changed = changedPaths(prev, cfg);
      for (const l of configListeners) l(cfg, prev, changed);
      scheduler.configChanged(changed);
      return cfg;
    },
    /** The whole lifecycle on the fake clock: withdraw, start, and the load duty run; resolves once live. */
    async run(): Promise<void> {
      svc.withdraw(now());
      const live = svc.start();
      await clock.advance(0);
      await live;
    },
    fill(n: number, due: (i: number) => number): void {
      for (let i = 0; i < n; i++) table.put(keyOf(i), stored(due(i)));
    },
    async start(): Promise<void> {
      await svc.subscribe(now, this.onClosed);
      await svc.load(now);
    },
  };
}

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Lets the background consumer run until `done` holds; events resolve in microtasks, so this is quick. */
async function settle(done: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 100 && !done(); i++) await turn();
  assert.ok(done(), `never happened: ${what}`);
}

const put = (key: string, value: Stored): ScheduleEvent => ({ id: key, type: 'put', value });

// Race guard: `touched?.has(key)` in applyWalked. Removing it lets the walk's stale value win (checked).
for (const [heldWalk, how] of [
  [false, ''],
  [true, ' (held-fields walk)'],
] as const) {
  test(`a write during the load is not reverted by the walk: events win${how}`, async () => {
    const h = harness({ heldWalk });
    h.fill(2500, () => NOW + 2 * HOUR); // not due, so no head check reads K behind the walk's back
    const k = keyOf(2200); // in the third chunk
    h.table.freezeWalks(); // the walk reads a snapshot taken before the write below
    h.setHook(async (n) => {
      if (n !== 1) return;
      h.table.put(k, stored(NOW + 5 * HOUR));
      h.streams[0]!.push(put(k, stored(NOW + 5 * HOUR)));
      await settle(() => h.svc.eventsApplied === 1, 'the event for K is applied');
    });
    await h.start();
    assert.equal(h.svc.phase, 'live');
    assert.equal(h.svc.core.size, 2500);
    assert.equal(h.svc.core.describe(k, NOW)?.dueMs, NOW + 5 * HOUR);
  });
}

test('250,000 re-sent events for unchanged rows are absorbed without moving the version', async () => {
  const n = 250_000;
  const h = harness();
  const due = (i: number) => NOW - (i % 1440) * MINUTE;
  h.fill(n, due);
  await h.start();
  assert.equal(h.svc.core.size, n);
  const version = h.svc.core.version;
  for (let i = 0; i < n; i++) h.streams[0]!.push(put(keyOf(i), stored(due(i))));
  await settle(() => h.svc.eventsApplied === n, 'every re-sent event is consumed');
  assert.equal(h.svc.core.size, n);
  assert.equal(h.svc.core.version, version);
});

for (const [heldWalk, how] of [
  [false, ''],
  [true, ' (held-fields walk)'],
] as const) {
  test(`a forward walk that breaks at a key is finished from the top down and the load stays exact${how}`, async () => {
    const h = harness({ heldWalk });
    h.fill(2500, () => NOW + HOUR);
    h.table.faults.set(keyOf(1500), 'forwardCursor');
    await h.start();
    assert.equal(h.svc.core.size, 2500);
    assert.equal(h.svc.partial, false);
    assert.equal(h.svc.phase, 'live');
    assert.equal(h.svc.exact(), true);
    assert.equal(h.signal.read().complete, true);
    assert.equal(h.errors.length, 1, 'the broken forward walk is logged once');
  });
}

for (const [heldWalk, how] of [
  [false, ''],
  [true, ' (held-fields walk)'],
] as const) {
  test(`a key that does not decode ends the load partial, live on every other row with exact false${how}`, async () => {
    const h = harness({ heldWalk });
    h.fill(2500, () => NOW + HOUR);
    const bad = keyOf(1500);
    h.table.faults.set(bad, 'key'); // both walks stop at it: the top-down walk stops short too
    await h.start();
    assert.equal(h.svc.partial, true);
    assert.equal(h.svc.exact(), false);
    assert.equal(h.svc.phase, 'live');
    assert.equal(h.svc.serving, true);
    assert.equal(h.signal.read().live, true);
    assert.equal(h.signal.read().complete, false);
    // Rows on either side of the bad key in its chunk were read before the throw and must be kept.
    assert.equal(h.svc.core.size, 2499);
    assert.equal(h.svc.core.has(bad), false);
    assert.equal(h.svc.core.has(keyOf(1499)), true);
    assert.equal(h.svc.core.has(keyOf(1501)), true);
    assert.equal(h.errors.length, 2, 'both stops are logged');
  });
}

test('a load through the held-fields walk, one object reused for every key, holds each row as walked', async () => {
  const rows = (i: number) =>
    stored(NOW - (i % 90) * MINUTE, {
      fromSitemap: i % 2 === 0,
      effectiveInterval: i % 5 === 0 ? 7 * 24 * HOUR : null,
      verified: i % 4 !== 0,
      urgentAt: i % 11 === 0 ? NOW : null,
      changedAt: i % 13 === 0 ? NOW : null,
    });
  const viaWalk = harness();
  const viaHeld = harness({ heldWalk: true });
  for (const h of [viaWalk, viaHeld]) {
    h.fill(2500, () => 0);
    for (let i = 0; i < 2500; i++) h.table.put(keyOf(i), rows(i));
    await h.start();
  }
  assert.equal(viaHeld.svc.core.size, 2500);
  for (let i = 0; i < 2500; i++)
    assert.deepEqual(viaHeld.svc.core.heldValue(keyOf(i)), viaWalk.svc.core.heldValue(keyOf(i)), keyOf(i));
});

test('a node that owns every row sizes its held rows from the row count, and a count that fails only warns', async () => {
  for (const estimateRows of [
    () => 2500,
    (): number => {
      throw new Error('store closed');
    },
  ]) {
    const h = harness({ estimateRows });
    h.fill(2500, (i) => NOW - (i % 30) * MINUTE);
    await h.start();
    assert.equal(h.svc.core.size, 2500);
    assert.equal(h.svc.loadComplete, true);
    assert.deepEqual(h.errors, []);
  }
  const failing = harness({
    estimateRows: () => {
      throw new Error('store closed');
    },
  });
  await failing.start();
  assert.match(String(failing.warnings[0]?.[0]), /no row count to size the held rows by \(store closed\)/);
});

// Guard: the reserve for a node given `ownedShare` in load(). Without it a clustered node's table grows
// as its load goes, rehashing every row held so far each time (checked).
test('a load sizes the held rows once: the whole row count alone, its share of it in a cluster', async () => {
  for (const [ownedShare, want] of [
    [undefined, 3000],
    [1, 3000],
    [1 / 3, 1100],
  ] as const) {
    const h = harness({ estimateRows: () => 3000, ...(ownedShare === undefined ? {} : { ownedShare }) });
    const reserved: number[] = [];
    const reserve = h.svc.core.reserve.bind(h.svc.core);
    h.svc.core.reserve = (rows) => {
      reserved.push(rows);
      reserve(rows);
    };
    h.fill(300, () => NOW + HOUR);
    await h.start();
    assert.deepEqual(reserved, [want], `share ${ownedShare}`);
  }
});

test('claims are served from the first chunk while the load goes on', async () => {
  const h = harness();
  h.fill(2500, (i) => NOW - (10 + (i % 30)) * MINUTE);
  let seen = false;
  h.setHook((n) => {
    if (n !== 1) return;
    seen = true;
    assert.equal(h.svc.phase, 'loading');
    const s = h.signal.read();
    assert.equal(s.live, true);
    assert.equal(s.phase, 'loading');
    assert.equal(s.complete, false);
    assert.equal(s.dueCount, 1000);
    const taken = h.ready.take(10);
    assert.equal(taken.length, 10);
    for (const e of taken) assert.ok(e.key < keyOf(1000), `${e.key} comes from the first chunk`);
  });
  await h.start();
  assert.ok(seen);
  assert.equal(h.signal.read().complete, true);
  assert.equal(h.signal.read().dueCount, 2500);
});

// Race guard: `this.stream !== stream` in the consumer. Without it the old stream's late event applies (checked).
test('after a closed subscription is reopened only the new stream is listened to', async () => {
  const h = harness({ streamsHonourEnd: false });
  await h.svc.subscribe(h.now, h.onClosed);
  const [old] = h.streams;
  h.svc.closeSubscription();
  assert.equal(old!.ended, true);
  await h.svc.subscribe(h.now, h.onClosed);
  assert.equal(h.svc.subscriptions, 2);
  const fresh = h.streams[1]!;
  old!.push(put(keyOf(1), stored(NOW))); // delivered after end(), as a stream may
  fresh.push(put(keyOf(2), stored(NOW)));
  await settle(() => h.svc.eventsApplied >= 1, 'the new stream is consumed');
  await turn(); // the old stream's consumer has had its turn too
  assert.equal(h.svc.eventsApplied, 1);
  assert.equal(h.svc.core.has(keyOf(1)), false);
  assert.equal(h.svc.core.has(keyOf(2)), true);
  old!.finish();
  await turn();
  assert.deepEqual(h.closed, [], 'an abandoned stream ending is not a closed subscription');
  fresh.finish();
  await settle(() => h.closed.length === 1, 'the live stream ending is reported');
});

// Guard: `core.unseen` in the point checks. With `core.has` there, every held row is read back (checked).
test('verification repairs a missing, a mismatched and a deleted row, reading back only the row it did not see, and the next walk repairs none', async () => {
  const h = harness();
  h.fill(1500, () => NOW + HOUR);
  await h.start();
  h.table.put(keyOf(5000), stored(NOW + HOUR)); // added without an event
  h.table.put(keyOf(700), stored(NOW + 3 * HOUR)); // changed without an event
  h.table.delete(keyOf(1200)); // deleted without an event
  const before = h.table.reads;
  const first = await h.svc.verify(h.now);
  assert.equal(h.table.reads - before, 1, 'one point read: the row the walk did not find');
  assert.deepEqual(
    first && [first.missing, first.mismatched, first.phantom, first.unowned, first.repaired],
    [1, 1, 1, 0, 3],
  );
  assert.equal(h.svc.core.describe(keyOf(700), NOW)?.dueMs, NOW + 3 * HOUR);
  assert.equal(h.svc.core.has(keyOf(5000)), true);
  assert.equal(h.svc.core.has(keyOf(1200)), false);
  assert.equal(h.svc.exact(), false, 'a verification that repaired something leaves the numbers unvouched');
  const again = h.table.reads;
  const second = await h.svc.verify(h.now);
  assert.equal(second?.repaired, 0);
  assert.equal(h.table.reads - again, 0, 'a later walk sees every row again, so it reads none back');
  assert.equal(h.svc.exact(), true);
  assert.equal(h.svc.stats.repairedTotal, 3);
});

// Guard: the slice budget (`spent` in verification.ts). Without it a slice runs WALK_CHUNK rows whatever its
// reads cost: no yield at all over these few hundred rows (checked).
test('a verification slice yields once it has run its budget, in the table walk and in the point checks', async () => {
  const h = harness();
  h.fill(600, () => NOW + HOUR);
  await h.start();
  for (let i = 0; i < 600; i += 2) h.table.delete(keyOf(i)); // deleted without an event: 300 point checks
  h.table.put(keyOf(5000), stored(NOW + HOUR)); // added without an event: the walk still reaches it
  const walk = h.source.walk;
  const read = h.source.read;
  let reads = 0;
  // Every row the walk yields and every point read costs 1 ms of the slice clock.
  h.source.walk = function* (o) {
    for (const entry of walk(o)) {
      h.slice.ms += 1;
      yield entry;
    }
  };
  h.source.read = (key) => {
    h.slice.ms += 1;
    reads++;
    return read(key);
  };
  const yielded = { walk: 0, check: 0 };
  h.setHook(() => void (reads === 0 ? yielded.walk++ : yielded.check++));
  const result = await h.svc.verify(h.now);
  assert.equal(result?.rows, 301, 'slices ended by the budget resume where they stopped');
  assert.deepEqual([result?.missing, result?.phantom], [1, 300]);
  assert.equal(reads, 300, 'only the rows the walk did not see are point-checked');
  assert.ok(yielded.walk >= 15, `the table walk yielded ${yielded.walk} times`);
  assert.ok(yielded.check >= 15, `the point checks yielded ${yielded.check} times`);
  // A slice looks at its clock every 16 rows: it ends under 10 ms plus one look's 16 reads.
  const longest = result?.longestSliceMs ?? 0;
  assert.ok(longest >= 10 && longest <= 25, `longest slice ${longest} ms`);
});

// Guard: `more = n > 0` in the verification walk. Ending the walk at a slice shorter than WALK_CHUNK stops it
// after the first chunk whenever the store passes over a key that is not a URL (checked).
test('a verification walk goes on past a slice the store cut short, to the end of the table', async () => {
  const h = harness();
  h.fill(2500, () => NOW + HOUR);
  await h.start();
  for (let i = 2500; i < 2600; i++) h.table.put(keyOf(i), stored(NOW + HOUR)); // added without events
  const walk = h.source.walk;
  // As walkScheduleRaw passes over a non-string key: one entry of each range is not handed out.
  h.source.walk = function* (o) {
    let first = true;
    for (const entry of walk(o)) {
      if (first) {
        first = false;
        continue;
      }
      yield entry;
    }
  };
  const result = await h.svc.verify(h.now);
  assert.equal(result?.missing, 100, 'the rows past the first chunk were reached');
  assert.equal(h.svc.core.size, 2600);
});

// Race guard: the `while (this.verifyQueued)` loop in verify(). Without it the queued walk is dropped (checked).
test('a walk requested during a verification is queued and run, not lost', async () => {
  const h = harness();
  h.fill(2500, () => NOW + HOUR);
  await h.start();
  const walksBefore = h.table.fullWalks;
  let queued: Promise<unknown> | null = null;
  h.setHook((n) => {
    if (n !== 1) return;
    queued = h.svc.verify(h.now);
    h.table.put(keyOf(10), stored(NOW + 4 * HOUR)); // behind the running walk, which passed key 10
  });
  const result = await h.svc.verify(h.now);
  assert.equal(await queued, null, 'the second request is queued, not run alongside');
  assert.equal(h.table.fullWalks - walksBefore, 2);
  assert.equal(result?.mismatched, 1, 'the queued walk found the change the first one had passed');
  assert.equal(h.svc.core.describe(keyOf(10), NOW)?.dueMs, NOW + 4 * HOUR);
});

test("the keeper holds only the configured devices' rows, counts the others as orphaned, and follows a change of the list", async () => {
  // Without the device gate the mobile rows are held and handed out although no fleet renders them.
  const h = harness();
  for (let i = 0; i < 20; i++) {
    h.table.put(keyOf(i), stored(NOW - MINUTE));
    h.table.put(keyOf(i).replace(/\|desktop$/, '|mobile'), stored(NOW - MINUTE));
  }
  await h.start();
  assert.equal(h.svc.core.size, 20, 'only the desktop rows are held');
  assert.deepEqual(h.svc.stats.orphaned, { rows: 20, countedAt: NOW }, 'the mobile rows are orphaned');
  h.setConfig({ render: { deviceTypes: ['desktop', 'mobile'] } });
  await h.svc.devicesChanged(h.now);
  assert.equal(h.svc.core.size, 40, 'a device listed again is taken up by a walk');
  assert.equal(h.svc.stats.orphaned?.rows, 0);
  h.setConfig({ render: { deviceTypes: ['mobile'] } });
  await h.svc.devicesChanged(h.now);
  assert.equal(h.svc.core.size, 20, 'a device out of the list has its rows dropped');
  assert.ok(h.svc.core.has(keyOf(3).replace(/\|desktop$/, '|mobile')));
  assert.ok(!h.svc.core.has(keyOf(3)));
});

test('a stored row whose value does not decode stays held through an event, the head check and the walk, and is counted', async () => {
  // Harper answers null for a value it cannot decode, in an event's value and in a point read alike.
  // Without the look at the stored bytes the keeper dropped such a live row, and no walk could take it back.
  const h = harness();
  h.fill(10, () => NOW - MINUTE);
  await h.start();
  assert.equal(h.svc.core.size, 10);
  h.table.undecodable.add(keyOf(3));
  h.streams.at(-1)!.push({ id: keyOf(3), type: 'put' });
  await settle(() => h.svc.eventsApplied >= 1, 'the event applied');
  assert.ok(h.svc.core.has(keyOf(3)), 'an event whose value and read do not decode keeps the row');
  // The head check reads a key at most once a minute: two minutes on, it reads it.
  h.clock.t = NOW + 2 * MINUTE;
  assert.equal(h.svc.headCheck(h.clock.t, [keyOf(3)]), 0, 'the head check keeps it');
  assert.equal(h.svc.stats.headCheck?.checked, 1);
  const walk = await h.svc.verify(h.now);
  assert.equal(walk?.phantom, 0, 'the walk keeps it');
  assert.ok(h.svc.core.has(keyOf(3)));
  assert.equal(h.svc.stats.unreadableTotal, 3);
  const said = h.warnings.filter((w) => String(w[0]).includes('did not decode')).map((w) => String(w[0]));
  assert.equal(said.length, 2, 'at most one warning a minute: the event, then the head check');
  assert.match(said[0]!, /1 read\(s\).*p\/000003\|desktop/);
  // A row deleted for real still goes, by its event and by the walk.
  h.table.delete(keyOf(4));
  h.streams.at(-1)!.push({ id: keyOf(4), type: 'put' });
  await settle(() => h.svc.eventsApplied >= 2, 'the second event applied');
  assert.ok(!h.svc.core.has(keyOf(4)), 'a key with nothing stored is dropped');
  h.table.delete(keyOf(5));
  assert.equal((await h.svc.verify(h.now))?.phantom, 1);
  assert.ok(!h.svc.core.has(keyOf(5)));
  assert.ok(h.svc.core.has(keyOf(3)), 'while the undecodable row stays (the second walk read it once more)');
  assert.equal(h.svc.stats.unreadableTotal, 4);
});

test('a row the load met stored but unreadable is read again each minute and taken up once it reads', async () => {
  // No keeper holds such a row (its owner could not read it): without the retry it waited for the next
  // verification walk, an hour by default.
  const h = harness();
  h.fill(10, () => NOW - MINUTE);
  h.table.undecodable.add(keyOf(2));
  h.table.put('https://example.com/gone|desktop', stored(NOW));
  h.table.delete('https://example.com/gone|desktop');
  await h.run();
  assert.equal(h.svc.core.size, 9);
  assert.equal(h.svc.unreadableWaiting, 1, 'the unreadable row waits; a deleted one does not');
  await h.clock.advance(MINUTE);
  assert.ok(!h.svc.core.has(keyOf(2)), 'still unreadable a minute on');
  h.table.undecodable.delete(keyOf(2));
  await h.clock.advance(MINUTE);
  assert.ok(h.svc.core.has(keyOf(2)), 'taken up once it reads');
  assert.equal(h.svc.unreadableWaiting, 0);
  assert.equal(h.svc.core.size, 10);
});

test('a route change reclassifies held rows in memory without a reload', async () => {
  const h = harness();
  for (let i = 0; i < 50; i++) {
    h.table.put(`https://example.com/blog/${i}|desktop`, stored(NOW - MINUTE));
    h.table.put(keyOf(i), stored(NOW - MINUTE));
  }
  await h.start();
  const blog = 'https://example.com/blog/7|desktop';
  assert.equal(h.svc.core.describe(blog, NOW)?.route, 'unrouted');
  const walks = h.table.walkCalls;
  const version = h.svc.core.version;
  h.setConfig({
    render: { routes: [{ name: 'blog', match: 'prefix', path: '/blog/', renderInterval: HOUR }] },
  });
  h.svc.reclassify();
  assert.deepEqual(
    [h.svc.core.describe(blog, NOW)?.route, h.svc.core.describe(blog, NOW)?.cadenceMs],
    ['blog', HOUR],
  );
  assert.equal(h.svc.core.describe(keyOf(7), NOW)?.route, 'unrouted');
  assert.equal(h.svc.core.size, 100);
  assert.equal(h.table.walkCalls, walks, 'no walk');
  assert.notEqual(h.svc.core.version, version, 'the next publish sees the change');
});

test('publishOnce skips leased rows, publishes only on change and forces a publish after 10 s', async () => {
  const h = harness();
  h.fill(5, (i) => NOW - (10 + i) * MINUTE);
  h.leased.add(keyOf(4)); // the most overdue row
  await h.start();
  assert.equal(h.svc.stats.lastPublish?.skippedLeased, 1);
  assert.equal(h.svc.publishOnce(NOW, false), false, 'nothing changed since the load published');
  h.clock.t = NOW + 9_999;
  assert.equal(h.svc.publishOnce(h.clock.t, false), false);
  h.clock.t = NOW + 10_000;
  assert.equal(h.svc.publishOnce(h.clock.t, false), true, 'forced after 10 s');
  assert.equal(h.svc.publishOnce(h.clock.t, false), false);
  const taken = h.ready.take(10).map((e) => e.key);
  assert.deepEqual(taken.sort(), [keyOf(0), keyOf(1), keyOf(2), keyOf(3)]);
  assert.equal(h.svc.publishOnce(h.clock.t, false), true, 'consumption is a change');
  assert.equal(h.svc.publishOnce(h.clock.t, false), false);
  h.clock.inFlight = 1;
  assert.equal(h.svc.publishOnce(h.clock.t, false), true, 'lease occupancy is a change');
  h.streams[0]!.push(put(keyOf(9), stored(NOW - HOUR)));
  await settle(() => h.svc.eventsApplied === 1, 'the event is applied');
  assert.equal(h.svc.publishOnce(h.clock.t, false), true, 'a held-row change is a change');
  assert.equal(h.ready.take(1)[0]?.key, keyOf(9));
  h.clock.t = NOW + MINUTE;
  assert.equal(h.svc.publishOnce(h.clock.t, false), true, 'a minute boundary is a change');
});

test('a row skipped as held is republished once its hold ends, not at the next forced publish', async () => {
  const h = harness({ leasedUntil: true });
  h.fill(5, (i) => NOW - (10 + i) * MINUTE);
  const holdEnd = NOW + 2_500; // a hold (or a release grace) that nothing else will announce
  h.leasedUntil.set(keyOf(4), holdEnd);
  await h.start();
  assert.equal(h.svc.stats.lastPublish?.skippedLeased, 1);
  h.clock.t = NOW + 1_000;
  assert.equal(h.svc.publishOnce(h.clock.t, false), false, 'nothing changed, the hold still runs');
  h.clock.t = NOW + 3_000;
  // Without the skipped row's end as a trigger this waited for the forced publish at NOW + 10 s.
  assert.equal(h.svc.publishOnce(h.clock.t, false), true, 'the hold ended: the set is stale');
  assert.equal(h.svc.stats.lastPublish?.skippedLeased, 0);
  assert.equal(h.ready.take(1)[0]?.key, keyOf(4), 'the most overdue row leads again');
  h.clock.t = NOW + 4_000;
  assert.equal(h.svc.publishOnce(h.clock.t, false), true, 'the take was consumption');
  assert.equal(h.svc.publishOnce(h.clock.t, false), false, 'and then nothing is left to wait for');
});

test('long leases parked at different seconds do not make the keeper publish every tick', async () => {
  // A park cut at PARK_MAX_MS (30 s) only asks the lease table again: it is no instant the set goes
  // stale. (Counted as one, five rows parked one second apart made every tick from 31 s on a publish.)
  const h = harness({ leasedUntil: true });
  h.fill(5, (i) => NOW - (10 + i) * MINUTE);
  await h.start();
  for (let i = 0; i < 5; i++) {
    h.clock.t = NOW + (i + 1) * 1000;
    h.leasedUntil.set(keyOf(i), h.clock.t + 20 * MINUTE); // granted this second, for 20 minutes
    h.svc.publishOnce(h.clock.t, true); // the grant's occupancy change publishes and parks the row
  }
  assert.equal(h.svc.stats.lastPublish?.skippedLeased, 5);
  let published = 0;
  for (let t = 31; t <= 40; t++) {
    h.clock.t = NOW + t * 1000;
    if (h.svc.publishOnce(h.clock.t, false)) published++;
  }
  assert.equal(published, 1, 'only the forced refresh (the first tick 10 s after the last publish)');
  assert.equal(h.svc.stats.lastPublish?.skippedLeased, 5, 'the parks that ran out were asked again');
});

test('the head check repairs a row held wrongly and reads each key at most once a minute', async () => {
  const h = harness();
  h.fill(10, (i) => NOW - (30 + i) * MINUTE);
  await h.start(); // the load's publish checks the whole head
  assert.deepEqual(h.svc.stats.headCheck, { at: NOW, checked: 10, repaired: 0 });
  const readsAfterLoad = h.table.reads;
  h.table.put(keyOf(3), stored(NOW - 90 * MINUTE)); // changed without an event
  h.clock.t = NOW + 59_999;
  h.svc.publishOnce(h.clock.t, true);
  assert.equal(h.table.reads, readsAfterLoad, 'no key is read twice within a minute');
  assert.equal(h.svc.core.describe(keyOf(3), NOW)?.dueMs, NOW - 33 * MINUTE);
  h.clock.t = NOW + MINUTE;
  h.svc.publishOnce(h.clock.t, true);
  assert.equal(h.table.reads, readsAfterLoad + 10);
  assert.deepEqual(h.svc.stats.headCheck, { at: NOW + MINUTE, checked: 10, repaired: 1 });
  assert.equal(h.svc.core.describe(keyOf(3), NOW)?.dueMs, NOW - 90 * MINUTE);
  assert.equal(h.svc.stats.repairedTotal, 1);
});

interface StateShape {
  now: { due: number; inFlight: number; unclaimed: number; paused: boolean; status: string };
  trust: { phase: string; live: boolean; exact: boolean; keeper: { rows: number } };
}

test('writeState writes a live document whose unclaimed count is due minus in-flight, never negative', async () => {
  const h = harness();
  h.fill(10, (i) => (i < 7 ? NOW - (i + 1) * MINUTE : NOW + (i + 1) * MINUTE));
  await h.start();
  h.clock.inFlight = 2;
  assert.equal(h.svc.writeState(NOW), true);
  const doc = h.state.read()?.doc as StateShape;
  assert.equal(doc.trust.phase, 'live');
  assert.equal(doc.trust.live, true);
  assert.equal(doc.trust.exact, true);
  assert.equal(doc.trust.keeper.rows, 10);
  assert.deepEqual(
    [doc.now.due, doc.now.inFlight, doc.now.unclaimed, doc.now.paused, doc.now.status],
    [7, 2, 5, false, 'queued'],
  );
  h.clock.inFlight = 9;
  h.svc.writeState(NOW);
  const later = h.state.read()?.doc as StateShape;
  assert.deepEqual([later.now.due, later.now.inFlight, later.now.unclaimed], [7, 9, 0]);
});

test('a closed subscription is retried only after the backoff, and a failed retry waits the backoff again', async () => {
  const h = harness();
  h.fill(10, () => NOW - MINUTE);
  const reopen = (err?: unknown) => h.svc.subscriptionClosed(err);
  await h.svc.subscribe(h.now, reopen);
  await h.svc.load(h.now);
  assert.equal(h.svc.subscriptions, 1);
  assert.equal(h.clock.armed.length, 0, 'no timer before the close (the load here ran by hand)');

  h.streams[0]!.finish();
  await settle(() => h.svc.resyncing, 'the close is noticed');
  // Nothing is retried at once: one timer, armed with the backoff, and no new subscription yet.
  assert.deepEqual(
    h.clock.armed.map((t) => t.ms),
    [RESUBSCRIBE_BACKOFF_MS],
  );
  assert.equal(h.svc.subscriptions, 1);

  h.failures.subscribe = 1;
  await h.clock.advance(RESUBSCRIBE_BACKOFF_MS);
  assert.deepEqual(
    h.clock.armed.map((t) => t.ms),
    [RESUBSCRIBE_BACKOFF_MS],
    'a failed retry waits the backoff again',
  );
  assert.equal(h.svc.subscriptions, 1);
  assert.equal(h.svc.resyncing, true);
  assert.match(String(h.svc.stats.lastError), /resubscribe failed/);

  await h.clock.advance(RESUBSCRIBE_BACKOFF_MS - 1);
  assert.equal(h.svc.subscriptions, 1, 'not a moment before the backoff');
  await h.clock.advance(1);
  await settle(() => !h.svc.resyncing, 'the retry subscribes and verifies');
  assert.equal(h.svc.subscriptions, 2);
  assert.equal(h.clock.armed.length, 0);
  assert.notEqual(h.svc.stats.lastVerify, null, 'a verification walk followed the new subscription');
});

test('a membership change drops rows no longer owned in slices, publishes without them, says so, and picks up gained rows without calling them repairs', async () => {
  const h = harness();
  h.fill(100, () => NOW - MINUTE);
  await h.start();
  assert.equal(h.svc.core.size, 100);
  const even = (key: string) => Number(key.replace(/\D/g, '')) % 2 === 0;
  // Every ownership check costs 1 ms of the slice clock: the drop yields once a slice ran its budget.
  h.setOwner((key) => {
    h.slice.ms += 1;
    return even(key);
  });
  let applied: { at: number; publishes: number } | null = null;
  let yieldsInDrop = 0;
  h.setHook(() => void (applied === null && yieldsInDrop++));
  const publishesBefore = h.publishes.length;
  const shrink = await h.svc.membershipChanged(
    h.now,
    (at) => (applied = { at, publishes: h.publishes.length }),
  );
  assert.ok(yieldsInDrop >= 3, `the drop yielded ${yieldsInDrop} times`);
  assert.equal(applied!.at, NOW);
  assert.equal(
    applied!.publishes,
    publishesBefore + 1,
    'published without the dropped rows before saying so',
  );
  h.setOwner(even);
  assert.equal(shrink.dropped, 50);
  assert.equal(h.svc.core.size, 50);
  const walk = h.svc.core.keyWalk();
  for (let keys = walk.next(500); keys !== null; keys = walk.next(500)) assert.ok(keys.every(even));
  // The walk counts every row of the table, held or not: the figure an operator compares across nodes.
  assert.equal(h.svc.stats.lastVerify?.rows, 100);
  // The set is published again without them at once: no claim here grants a row given away.
  const listed = h.ready.take(100).map((e) => e.key);
  assert.equal(listed.length, 50);
  assert.ok(listed.every(even), 'the published set lists only rows still held');

  h.setOwner(() => true);
  const grow = await h.svc.membershipChanged(h.now);
  assert.deepEqual(grow, { dropped: 0, gained: 50 });
  assert.equal(h.svc.core.size, 100);
  assert.equal(h.svc.stats.lastVerify?.repaired, 0, 'gains are not repairs');
  assert.equal(h.svc.exact(), true);
});

test('the walk once the membership settled takes up owned rows no keeper held, counted as recovered, not repairs', async () => {
  const h = harness();
  h.fill(100, () => NOW - MINUTE);
  const even = (key: string) => Number(key.replace(/\D/g, '')) % 2 === 0;
  h.setOwner(even);
  await h.start();
  assert.equal(h.svc.core.size, 50);
  // The odd rows become this node's without a membership walk under the new view: they fell between
  // two views, held by nobody.
  h.setOwner(() => true);
  const walk = await h.svc.settledWalk(h.now);
  assert.equal(walk?.purpose, 'settled');
  assert.equal(walk?.recovered, 50);
  assert.equal(walk?.repaired, 0, 'recovered rows are no repairs');
  assert.equal(h.svc.core.size, 100);
  assert.deepEqual(h.svc.stats.lastSettledWalk, { at: NOW, ms: walk!.ms, rows: 100, recovered: 50 });
  assert.equal(h.svc.stats.recoveredTotal, 50);
  assert.match(String(h.warnings.at(-1)?.[0]), /took up 50 rows this node owns that no keeper held/);
  const again = await h.svc.settledWalk(h.now);
  assert.equal(again?.recovered, 0);
  assert.equal(h.svc.stats.recoveredTotal, 50);
});

test('a settled walk asked for while a membership walk runs is queued behind it, not counted in its gains', async () => {
  const h = harness();
  h.fill(2500, () => NOW + HOUR);
  const even = (key: string) => Number(key.replace(/\D/g, '')) % 2 === 0;
  h.setOwner(even);
  await h.start();
  const walksBefore = h.table.fullWalks;
  let settled: Promise<unknown> | null = null;
  h.setHook((n) => {
    if (n === 1) settled = h.svc.settledWalk(h.now);
  });
  h.setOwner(() => true);
  await h.svc.membershipChanged(h.now);
  assert.equal(await settled, null, 'queued, not run alongside');
  assert.equal(h.table.fullWalks - walksBefore, 2, 'the membership walk, then the settled one');
  assert.equal(h.svc.stats.lastVerify?.purpose, 'settled');
  assert.equal(h.svc.stats.lastSettledWalk?.recovered, 0, "the gains were the membership walk's");
  assert.equal(h.svc.core.size, 2500);
});

test('a put event that carries no schedule record is read from the table, never taken for a deletion', async () => {
  const h = harness();
  h.fill(3, () => NOW + HOUR);
  await h.start();
  h.table.put(keyOf(1), stored(NOW + 2 * HOUR));
  h.streams[0]!.push({ type: 'put', id: keyOf(1) });
  h.streams[0]!.push({ type: 'put', id: keyOf(2), value: { fromSitemap: true } });
  await settle(() => h.svc.eventsApplied === 2, 'both events applied');
  assert.equal(h.svc.core.size, 3, 'no row dropped');
  assert.equal(h.svc.core.describe(keyOf(1), NOW)?.dueMs, NOW + 2 * HOUR, 'the row as the table has it');
  h.streams[0]!.push({ type: 'delete', id: keyOf(0) });
  await settle(() => h.svc.eventsApplied === 3, 'the delete applied');
  assert.equal(h.svc.core.size, 2, 'a delete event still deletes');
});

test('a republish after a drop that meets the set held by another writer stops claims until a publish goes through', async () => {
  const h = harness();
  h.fill(100, () => NOW - MINUTE);
  await h.start();
  assert.equal(h.signal.read().live, true);
  // Another writer (a stalled earlier worker 0) holds the slot the republish needs.
  const stalled = h.ready.stageWith(NOW, () => []);
  assert.ok(stalled);
  h.setOwner((key) => Number(key.replace(/\D/g, '')) % 2 === 0);
  const shrink = await h.svc.membershipChanged(h.now);
  assert.equal(shrink.dropped, 50);
  assert.equal(h.signal.read().live, false, 'the active set still lists given-away rows: no claims');
  h.svc.publishOnce(h.now(), false);
  assert.equal(h.signal.read().live, false, 'still held: still stopped, even with nothing changed');
  stalled.abandon();
  h.svc.publishOnce(h.now(), false);
  assert.equal(h.signal.read().live, true, 'the publish went through: claims again');
  const listed = h.ready.take(100).map((e) => e.key);
  assert.equal(listed.length, 50);
});

test('a live write that makes a row due now is published at once, and early publishes keep 50 ms apart', async () => {
  const k = harness();
  k.fill(3, () => NOW + HOUR);
  await k.start();
  k.publishes.length = 0;
  const stream = k.streams[0]!;
  // The table has each row too: the head check of an early publish reads it back.
  const write = (i: number, due: number) => {
    k.table.put(keyOf(i), stored(due));
    stream.push({ type: 'put', id: keyOf(i), value: stored(due) });
  };
  write(10, NOW + HOUR);
  await settle(() => k.svc.core.has(keyOf(10)), 'the later row held');
  await k.clock.advance(1000);
  assert.deepEqual(k.publishes, [], 'a row due later waits for its minute');
  write(11, NOW - MINUTE);
  await settle(() => k.svc.core.has(keyOf(11)), 'the due row held');
  await k.clock.advance(0);
  assert.deepEqual(k.publishes, [NOW + 1000], 'filed due now: published in the same instant');
  await k.clock.advance(10);
  write(12, NOW - MINUTE);
  await settle(() => k.svc.core.has(keyOf(12)), 'the second due row held');
  await k.clock.advance(100);
  assert.deepEqual(k.publishes, [NOW + 1000, NOW + 1050], 'the next early publish 50 ms after the last');
  write(12, NOW - MINUTE);
  await settle(() => k.svc.eventsApplied >= 4, 'the repeat applied');
  await k.clock.advance(100);
  assert.equal(k.publishes.length, 2, 'an unchanged row asks for nothing');
});

test('a live write due later in the minute that has begun is held due, so it is published at once', async () => {
  const k = harness();
  k.fill(3, () => NOW + HOUR);
  await k.start();
  k.clock.t = NOW + 10_000;
  k.publishes.length = 0;
  // A row stored with a time inside this minute (not minute-aligned, e.g. written by hand): the core
  // holds it by its minute, so it is due now and claimable; waiting for the tick would be up to 1 s.
  const due = NOW + 30_000;
  k.table.put(keyOf(20), stored(due));
  k.streams[0]!.push({ type: 'put', id: keyOf(20), value: stored(due) });
  await settle(() => k.svc.core.has(keyOf(20)), 'the row held');
  await k.clock.advance(0);
  assert.deepEqual(k.publishes, [NOW + 10_000], 'published in the same instant');
  assert.equal(k.ready.take(1)[0]?.key, keyOf(20));
});

test('a burst larger than the set says so in the signal, and a poke refills the set before it is used up', async () => {
  const k = harness({ capacity: 100 });
  k.fill(350, (i) => NOW - MINUTE - i * 1000);
  await k.start();
  k.publishes.length = 0;
  assert.equal(k.svc.stats.lastPublish?.complete, false, '350 due rows, 100 published');
  assert.equal(k.signal.read().leftOut, true, 'claims are told rows were left out');
  assert.equal(k.ready.take(50).length, 50);
  // What a claim does once half the set is taken (services/leases/claims.ts): poke the keeper.
  k.svc.publishSoon();
  await k.clock.advance(0);
  assert.equal(k.publishes.length, 1, 'the poke published');
  assert.equal(k.ready.snapshot().remaining, 100, 'a full set again, though no take came back empty');
  // Only the 3 rows still due and unleased remain: a set holding them all says nothing was left out.
  for (let i = 0; i < 347; i++) k.leased.add(keyOf(i));
  assert.equal(k.svc.publishOnce(k.clock.t, true), true);
  assert.equal(k.svc.stats.lastPublish?.complete, true);
  assert.equal(k.signal.read().leftOut, false);
});

test('early publishes keep further apart than 50 ms when the last publish was slow', async () => {
  const k = harness();
  k.fill(3, () => NOW + HOUR);
  await k.start();
  k.publishes.length = 0;
  const stream = k.streams[0]!;
  const write = (i: number) => {
    k.table.put(keyOf(i), stored(NOW - MINUTE));
    stream.push({ type: 'put', id: keyOf(i), value: stored(NOW - MINUTE) });
  };
  write(30);
  await settle(() => k.svc.core.has(keyOf(30)), 'the first due row held');
  await k.clock.advance(0);
  assert.deepEqual(k.publishes, [NOW]);
  // As if that publish had skipped 100,000 leased rows: 4 × 60 ms before the next early one.
  k.cost.publishMs = 60;
  assert.equal(k.svc.publishOnce(NOW, true), true);
  k.publishes.length = 0;
  write(31);
  await settle(() => k.svc.core.has(keyOf(31)), 'the second due row held');
  await k.clock.advance(239);
  assert.deepEqual(k.publishes, [], 'not before 240 ms');
  await k.clock.advance(1);
  assert.deepEqual(k.publishes, [NOW + 240]);
});

test('live, the keeper publishes every publish interval and just after each minute boundary', async () => {
  const h = harness();
  h.setConfig({ queue: { keeper: { publishInterval: 25_000 } } });
  h.fill(3, () => NOW + HOUR);
  await h.run();
  assert.equal(h.svc.phase, 'live');
  h.publishes.length = 0;
  await h.clock.advance(MINUTE + 5);
  assert.deepEqual(h.publishes, [NOW + 25_000, NOW + 50_000, NOW + MINUTE + 5]);
});

/**
 * Starts `h` live with 3 rows an hour out and rows 10..19 due at the next minute boundary (what a stage
 * is made of), with the publish interval set when one is given.
 */
async function runWithMinuteRows(h: ReturnType<typeof harness>, publishInterval?: number): Promise<void> {
  if (publishInterval !== undefined) h.setConfig({ queue: { keeper: { publishInterval } } });
  h.fill(3, () => NOW + HOUR);
  for (let i = 10; i < 20; i++) h.table.put(keyOf(i), stored(NOW + MINUTE));
  await h.run();
}

test('rows coming due at a minute boundary are written before it, and the minute publish only flips them active', async () => {
  const h = harness();
  h.setConfig({ queue: { keeper: { publishInterval: 25_000 } } });
  h.fill(3, () => NOW + HOUR);
  for (let i = 10; i < 60; i++) h.table.put(keyOf(i), stored(NOW + MINUTE));
  await h.run();
  const dueNow = h.svc.core.dueSummary(NOW).due;
  await h.clock.advance(MINUTE - STAGE_LEAD_MS);
  const staged = h.probes.count;
  assert.ok(staged >= 50, `the stage asked the lease table about the 50 rows (${staged} lookups)`);
  assert.equal(h.svc.core.dueSummary(h.clock.t).due, dueNow, 'due counts are those of now');
  assert.equal(h.ready.snapshot().count, 0, 'nothing of it is claimable before the boundary');
  h.publishes.length = 0;
  await h.clock.advance(STAGE_LEAD_MS + 5);
  assert.deepEqual(h.publishes, [NOW + MINUTE + 5], 'the minute publish');
  assert.equal(h.svc.stats.lastPublish?.staged, true, 'it flipped the staged set: no walk');
  assert.deepEqual(
    h.ready
      .take(100)
      .map((e) => e.key)
      .sort(),
    Array.from({ length: 50 }, (_, i) => keyOf(10 + i)),
  );
  await h.clock.advance(1000);
  assert.deepEqual(h.publishes, [NOW + MINUTE + 5], 'nothing else until the next tick');
  const flow = h.svc.core.state(h.clock.t).flow.at(-1)!;
  assert.deepEqual(
    [flow.minute, flow.cameDue],
    [(NOW + MINUTE) / MINUTE, 50],
    'came due once, in its minute',
  );
});

test('a row filed due at the boundary after the stage drops it; one rescheduled away leaves it in use', async () => {
  const h = harness();
  await runWithMinuteRows(h, 25_000);
  const write = (i: number, due: number) => {
    h.table.put(keyOf(i), stored(due));
    h.streams[0]!.push(put(keyOf(i), stored(due)));
  };
  // Minute 1: a row rescheduled an hour on after the stage (a result, the feeder). The stage stays in
  // use and still names it; a claim skips it as it skips any row that moved since its publish.
  await h.clock.advance(MINUTE - STAGE_LEAD_MS);
  write(10, NOW + HOUR);
  await settle(() => h.svc.core.describe(keyOf(10), NOW)?.dueMs === NOW + HOUR, 'the move applied');

  await h.clock.advance(STAGE_LEAD_MS + 5);
  assert.equal(h.svc.stats.lastPublish?.staged, true, 'the minute publish flipped the stage');
  assert.equal(h.ready.snapshot().count, 10);
  // Minute 2: rows 20..29 due at its boundary, and row 30 filed due at it after the stage.
  for (let i = 20; i < 30; i++) write(i, NOW + 2 * MINUTE);
  await settle(() => h.svc.core.has(keyOf(29)), 'the second batch held');
  await h.clock.advance(MINUTE - STAGE_LEAD_MS - 5);
  write(30, NOW + 2 * MINUTE);
  await settle(() => h.svc.core.has(keyOf(30)), 'the late row held');

  h.publishes.length = 0;
  await h.clock.advance(STAGE_LEAD_MS + 5);
  assert.deepEqual(h.publishes, [NOW + 2 * MINUTE + 5]);
  assert.equal(h.svc.stats.lastPublish?.staged, false, 'the minute publish walked afresh');
  const keys = h.ready.take(100).map((e) => e.key);
  assert.ok(keys.includes(keyOf(30)), 'so the late row is in the set at its due instant');
  assert.equal(keys.length, 20, 'rows 11..30: the unclaimed ones of minute 1 and all of minute 2');
  const flow = h.svc.core.state(h.clock.t).flow.at(-1)!;
  assert.deepEqual(
    [flow.minute, flow.cameDue],
    [(NOW + 2 * MINUTE) / MINUTE, 11],
    'the late row came due too',
  );
});

test('after a flipped stage, an early publish is spaced by what the stage walk cost, not by the flip', async () => {
  // Fails with the spacing read from the flip's own ms alone (~0: the early publish at once).
  const h = harness();
  await runWithMinuteRows(h, 25_000);
  const dueNow = (i: number) => {
    h.table.put(keyOf(i), stored(NOW));
    h.streams[0]!.push(put(keyOf(i), stored(NOW)));
  };
  // An early publish 500 ms before the boundary, then the stage (as if its walk took 150 ms: 4 × 150 =
  // 600 ms before the next early publish), then its flip at the boundary.
  await h.clock.advance(MINUTE - 500);
  dueNow(30);
  await settle(() => h.svc.core.has(keyOf(30)), 'the first due-now row held');
  await h.clock.advance(0);
  h.cost.stageMs = 150;
  await h.clock.advance(500 + 5);
  assert.equal(h.svc.stats.lastPublish?.staged, true, 'the boundary flipped the stage');
  assert.equal(h.svc.stats.lastPublish?.stageMs, 150);
  h.publishes.length = 0;
  dueNow(31);
  await settle(() => h.svc.core.has(keyOf(31)), 'the second due-now row held');
  await h.clock.advance(94);
  assert.deepEqual(h.publishes, [], 'not before 600 ms after the last early publish');
  await h.clock.advance(1);
  assert.deepEqual(h.publishes, [NOW + MINUTE + 100]);
});

test('a row a repair brings in after the stage (verify, head check) drops it, so the boundary set holds the row', async () => {
  // Fails with the repairs applying to the core directly: the stage flips without the repaired rows.
  const h = harness();
  await runWithMinuteRows(h, 25_000);
  // Minute 1: a row due at the boundary whose event never came; the verify walk finds it missing.
  h.table.put(keyOf(40), stored(NOW + MINUTE));
  await h.clock.advance(MINUTE - STAGE_LEAD_MS);
  const walk = await h.svc.verify(h.now);
  assert.equal(walk?.missing, 1, 'the verify walk repaired the missing row');
  await h.clock.advance(STAGE_LEAD_MS + 5);
  assert.equal(h.svc.stats.lastPublish?.staged, false, 'the minute publish walked afresh');
  assert.ok(
    h.ready.take(100).some((e) => e.key === keyOf(40)),
    'with the repaired row',
  );
  // Minute 2: the same through the head check's repair of a row it holds wrongly.
  h.table.put(keyOf(41), stored(NOW + 2 * MINUTE));
  await h.clock.advance(MINUTE - STAGE_LEAD_MS - 5);
  assert.equal(h.svc.headCheck(h.clock.t, [keyOf(41)]), 1, 'the head check repaired it');
  await h.clock.advance(STAGE_LEAD_MS + 5);
  assert.equal(h.svc.stats.lastPublish?.staged, false);
  assert.ok(h.ready.take(100).some((e) => e.key === keyOf(41)));
});

test('a staged walk that reads the due counts for its sections counts the minute of flow once, at the boundary', async () => {
  // Two queues and a set of 10, so the stage's walk adds section extras and reads the due counts at the
  // boundary. Fails with that walk counting flow (the 60 rows counted at the stage, the late row never)
  // and without the cursor moved back after it (the boundary then counts nothing).
  const h = harness({ capacity: 10 });
  h.setConfig({
    queue: { keeper: { publishInterval: 25_000 } },
    render: { routes: [{ name: 'blog', match: 'prefix', path: '/blog/', renderInterval: HOUR }] },
  });
  h.fill(30, () => NOW + MINUTE);
  for (let i = 0; i < 30; i++) h.table.put(`https://example.com/blog/${i}|desktop`, stored(NOW + MINUTE));
  await h.run();
  await h.clock.advance(MINUTE - STAGE_LEAD_MS);
  h.table.put(keyOf(99), stored(NOW + MINUTE));
  h.streams[0]!.push(put(keyOf(99), stored(NOW + MINUTE)));
  await settle(() => h.svc.core.has(keyOf(99)), 'the late row held');
  await h.clock.advance(STAGE_LEAD_MS + 5);
  const flow = h.svc.core.state(h.clock.t).flow.at(-1)!;
  assert.deepEqual([flow.minute, flow.cameDue], [(NOW + MINUTE) / MINUTE, 61]);
});

test('a stage whose head claims leased in the lead gives way to a fresh walk at the boundary', async () => {
  const h = harness();
  await runWithMinuteRows(h, 25_000);
  await h.clock.advance(MINUTE - STAGE_LEAD_MS);
  h.leased.add(keyOf(10)); // granted from the old set meanwhile

  await h.clock.advance(STAGE_LEAD_MS + 5);
  assert.equal(h.svc.stats.lastPublish?.staged, false, 'the boundary publish walked afresh');
  const keys = h.ready.take(100).map((e) => e.key);
  assert.equal(keys.length, 9);
  assert.ok(!keys.includes(keyOf(10)), 'without the leased row');
});

test("a stage holds the ready set's inactive slot until its boundary: periodic publishes wait, early ones drop it", async () => {
  const h = harness();
  h.fill(3, () => NOW - HOUR); // due now: a publish walks them unless it flips a stage
  for (let m = 1; m <= 4; m++)
    for (let i = 0; i < 10; i++) h.table.put(keyOf(10 * m + i), stored(NOW + m * MINUTE));
  await h.start();
  h.svc.serving = true;
  const at = (m: number) => NOW + m * MINUTE + 5;
  const lead = (m: number) => NOW + m * MINUTE - STAGE_LEAD_MS;
  assert.equal(h.svc.stageMinutePublish(lead(1), at(2)), false, 'not the next minute');
  // Minute 1: a periodic publish ahead of the boundary waits; the boundary flips the stage.
  assert.equal(h.svc.stageMinutePublish(lead(1), at(1)), true);
  const generation = h.ready.snapshot().generation;
  assert.equal(
    h.svc.publishOnce(NOW + MINUTE - 100, false),
    false,
    'the periodic publish waits for the flip',
  );
  assert.equal(h.ready.snapshot().generation, generation, 'and the active set is untouched');

  assert.equal(h.svc.publishOnce(at(1), true), true);
  assert.equal(h.svc.stats.lastPublish?.staged, true, 'the boundary publish only flipped the stage');
  assert.equal(h.ready.snapshot().count, 13);
  // Minute 2: an early publish ahead of the boundary takes the slot; the boundary walks afresh.
  assert.equal(h.svc.stageMinutePublish(lead(2), at(2)), true);

  assert.equal(h.svc.publishOnce(NOW + 2 * MINUTE - 100, true), true);
  assert.equal(h.svc.stats.lastPublish?.staged, false, 'the early publish walked');

  assert.equal(h.svc.publishOnce(at(2), true), true);
  assert.equal(h.svc.stats.lastPublish?.staged, false, 'and so did the boundary publish');
  assert.equal(h.ready.snapshot().count, 23);
  // Minute 3: a publish a second late lets the stage go and walks.
  assert.equal(h.svc.stageMinutePublish(lead(3), at(3)), true);

  assert.equal(h.svc.publishOnce(at(3) + 1000, true), true);
  assert.equal(h.svc.stats.lastPublish?.staged, false, 'a second late: a fresh walk');
  assert.equal(h.ready.snapshot().count, 33);
  // Minute 4: withdraw lets the staged slot go, so its empty set is published, not refused as busy.
  assert.equal(h.svc.stageMinutePublish(lead(4), at(4)), true);
  h.svc.withdraw(lead(4) + 10);
  assert.equal(h.ready.snapshot().count, 0);
  h.svc.serving = true;
  // Every row is due by minute 5's boundary already: nothing comes due at it, nothing is staged.
  assert.equal(h.svc.stageMinutePublish(lead(5), at(5)), false);
});

test('a keeper that loses its leader slot lets its staged slot go, so the next keeper can publish', async () => {
  // Fails without the dropStage of the leadership check: the slot stays held until the writer stall
  // limit (10 s), and the next keeper's publishes meet it busy.
  const leadership = { held: true };
  const h = harness({ leadership });
  await runWithMinuteRows(h);
  await h.clock.advance(MINUTE - STAGE_LEAD_MS);
  assert.equal(h.ready.publish([], h.clock.t).busy, true, 'staged: the inactive slot is held');
  leadership.held = false;
  await h.clock.advance(STAGE_LEAD_MS); // the publish tick at the boundary finds the slot lost
  assert.equal(h.svc.serving, false);
  assert.equal(h.ready.publish([], h.clock.t).busy, false, 'the slot was let go at once');
});

test('a change to the restart-only queue.ready.capacity does not reclassify; a route or score change does', async () => {
  const h = harness();
  h.fill(3, () => NOW + HOUR);
  await h.run();
  let reclassified = 0;
  const reclassify = h.svc.core.reclassify.bind(h.svc.core);
  h.svc.core.reclassify = (...a) => {
    reclassified++;
    return reclassify(...a);
  };
  h.setConfig({ queue: { ready: { capacity: 50 } } });
  assert.equal(reclassified, 0, 'capacity applies only after a restart');
  h.setConfig({ queue: { ready: { sitemapBoost: 7 } } });
  assert.equal(reclassified, 1);
  h.setConfig({ render: { routes: [{ name: 'blog', match: 'prefix', path: '/blog/' }] } });
  assert.equal(reclassified, 2);
});

test('a lowered verifyInterval re-arms the waiting verification: it runs after the new interval, not the old', async () => {
  const h = harness();
  h.setConfig({ queue: { keeper: { verifyInterval: 3_600_000 } } });
  h.fill(3, () => NOW + HOUR);
  await h.run();
  await h.clock.advance(10_000);
  assert.equal(h.svc.stats.lastVerify === null, true, 'no verification yet');
  h.setConfig({ queue: { keeper: { verifyInterval: 60_000 } } });
  await h.clock.advance(60_000);
  assert.equal(h.svc.stats.lastVerify?.at, NOW + 70_000);
});

test('after stop() nothing fires: no publish, no state, no heartbeat, no resubscribe, no config reaction', async () => {
  const h = harness();
  h.fill(10, () => NOW - MINUTE);
  await h.run();
  await h.clock.advance(5000);
  assert.ok(h.publishes.length > 1, 'the publish duty ran while live');
  assert.equal(h.configListeners.size, 1);
  await h.svc.stop();
  assert.equal(h.clock.armed.length, 0, 'every timer cleared');
  assert.equal(h.configListeners.size, 0, 'unsubscribed from config');
  assert.equal(h.streams[0]!.ended, true, 'the schedule subscription is closed');
  const publishes = h.publishes.length;
  const heartbeat = h.signal.read().heartbeatAt;
  const state = JSON.stringify(h.state.read());
  h.streams[0]!.push(put(keyOf(50), stored(NOW - MINUTE)));
  h.streams[0]!.finish();
  h.svc.publishSoon();
  h.svc.subscriptionClosed(new Error('late close'));
  h.setConfig({ queue: { keeper: { publishInterval: 100, verifyInterval: 10_000 } } });
  await h.clock.advance(HOUR);
  assert.equal(h.publishes.length, publishes);
  assert.equal(h.signal.read().heartbeatAt, heartbeat);
  assert.equal(JSON.stringify(h.state.read()), state);
  assert.equal(h.svc.subscriptions, 1);
  assert.equal(h.svc.core.has(keyOf(50)), false, 'no event applied after stop');
  assert.equal(h.clock.armed.length, 0);
});
