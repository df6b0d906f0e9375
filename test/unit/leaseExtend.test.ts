// Longer leases: an extension by the grantee moves its lease's end, everyone else's is refused and
// changes nothing, and no interleaving of extensions and grants leaves two live leases for one key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { rowHash } from '../../util/schedule/rowKey.js';
import { LeaseTable, type GrantOptions, type GrantStep } from '../../util/leases/table.js';
import { H, S, State } from '../../util/leases/slots.js';
import { nameHash } from '../../util/leases/token.js';
import { fromSharedSeconds } from '../../util/time.js';

const T0 = Date.UTC(2026, 0, 1, 10, 0, 0, 123);
const LEASE = 20_000;
const MAX_LEASE = 3_600_000;
const DUE = Date.UTC(2026, 0, 1, 9, 55);
const FLEET = nameHash('fleet-a');
const OTHER = nameHash('fleet-b');
const asFleet = { user: FLEET, superUser: false };
const asOther = { user: OTHER, superUser: false };
const asSuperUser = { user: OTHER, superUser: true };
const by = (byMs: number, maxLeaseMs = MAX_LEASE) => ({ byMs, maxLeaseMs });

const opts = (over: Partial<GrantOptions> = {}): GrantOptions => ({
  leaseMs: LEASE,
  dueMs: DUE,
  cadenceMs: 86_400_000,
  fastRetries: 2,
  user: FLEET,
  queue: nameHash('product'),
  ...over,
});

function setup(maxLeases = 64, onGrantStep?: (step: GrantStep, slot: number) => void) {
  const buffer = new ArrayBuffer(LeaseTable.byteLength(maxLeases));
  return { buffer, table: new LeaseTable(buffer, maxLeases, onGrantStep ? { onGrantStep } : {}) };
}

function grant(t: LeaseTable, key: string, now: number, over: Partial<GrantOptions> = {}) {
  const g = t.grant(key, now, opts(over));
  if (!g.ok) throw new Error(`expected a grant, got ${JSON.stringify(g)}`);
  return g;
}

/** Counts live LEASED slots of `key` straight from the buffer, independent of the table's own walks. */
function liveSlots(buffer: ArrayBuffer, table: LeaseTable, key: string, now: number): number {
  const words = new Int32Array(buffer);
  const { hi, lo } = rowHash(key);
  let live = 0;
  for (let slot = 0; slot < table.slotCount; slot++) {
    const base = H.WORDS + slot * S.WORDS;
    if (
      (words[base]! & State.MASK) === State.LEASED &&
      words[base + S.HASH_HI] === hi &&
      words[base + S.HASH_LO] === lo &&
      fromSharedSeconds(words[base + S.EXPIRY]!) > now
    )
      live++;
  }
  return live;
}

test("an extension by the grantee moves its lease's end: the key stays refused and no expiry is seen at the old end", () => {
  const { table } = setup();
  const key = 'https://example.com/slow|desktop';
  const g = grant(table, key, T0);
  const at = T0 + 10_000;
  const r = table.extend(key, g.token, asFleet, by(LEASE), at);
  assert.deepEqual(r, { ok: true, expiresAt: Math.ceil((at + LEASE) / 1000) * 1000 });
  const pastOldEnd = g.expiresAt + 1000;
  assert.equal(table.isLeased(key, pastOldEnd), true);
  const refused = table.grant(key, pastOldEnd, opts({ user: OTHER }));
  assert.equal(refused.ok === false && refused.reason, 'leased');
  const queues: number[] = [];
  assert.equal(
    table.upkeep.collectExpired(pastOldEnd, (q) => queues.push(q)),
    0,
  );
  assert.equal(table.lookup(key, pastOldEnd).expiresAt, r.ok ? r.expiresAt : null);
  // The new end is the one that counts: past it the lease is seen expiring, once, and the key is free.
  const pastNewEnd = (r.ok ? r.expiresAt : 0) + 1;
  assert.equal(
    table.upkeep.collectExpired(pastNewEnd, (q) => queues.push(q)),
    1,
  );
  assert.deepEqual(queues, [nameHash('product')]);
  assert.equal(grant(table, key, pastNewEnd, { user: OTHER }).requeued, true);
});

test('the token stays the same through extensions, and its result is accepted and releases the lease', () => {
  const { table } = setup();
  const key = 'https://example.com/a|desktop';
  const g = grant(table, key, T0);
  for (let at = T0 + 10_000; at < T0 + 60_000; at += 10_000) {
    const r = table.extend(key, g.token, asFleet, by(LEASE), at);
    assert.equal(r.ok, true);
    assert.equal(table.check(key, g.token), 'current');
  }
  assert.deepEqual(table.beginReport(key, g.token, asFleet), { kind: 'first' });
  table.finishReport(key, g.token, { accepted: true, nextRenderTime: null }, false, T0 + 65_000);
  assert.equal(table.lookup(key, T0 + 65_000).state, 'grace');
  // Reported: nothing to extend any more.
  assert.deepEqual(table.extend(key, g.token, asFleet, by(LEASE), T0 + 65_000), {
    ok: false,
    reason: 'ended',
  });
});

test("a stale token, another user's extension and a non-token are refused superseded and change nothing", () => {
  const { table } = setup();
  const key = 'https://example.com/b|desktop';
  const first = grant(table, key, T0);
  // The first lease ran out unextended; the key went to another fleet.
  const second = grant(table, key, first.expiresAt + 1, { user: OTHER });
  const before = table.lookup(key, first.expiresAt + 2);
  assert.deepEqual(table.extend(key, first.token, asFleet, by(LEASE), first.expiresAt + 2), {
    ok: false,
    reason: 'superseded',
  });
  assert.deepEqual(table.extend(key, second.token, asFleet, by(LEASE), first.expiresAt + 2), {
    ok: false,
    reason: 'superseded',
  });
  assert.deepEqual(table.extend(key, 'not-a-token', asOther, by(LEASE), first.expiresAt + 2), {
    ok: false,
    reason: 'superseded',
  });
  assert.deepEqual(table.lookup(key, first.expiresAt + 2), before);
  // The grantee and a super_user may extend it.
  assert.equal(table.extend(key, second.token, asOther, by(LEASE), second.grantedAt + 5_000).ok, true);
  assert.equal(
    table.extend(key, second.token, asSuperUser, by(2 * LEASE), second.grantedAt + 6_000).ok,
    true,
  );
});

test('a lease past its end is not revived', () => {
  const { table } = setup();
  const key = 'https://example.com/late|desktop';
  const g = grant(table, key, T0);
  assert.deepEqual(table.extend(key, g.token, asFleet, by(LEASE), g.expiresAt), {
    ok: false,
    reason: 'ended',
  });
  assert.equal(table.isLeased(key, g.expiresAt), false);
});

test('an extension never passes the grant plus maxLeaseMs and never shortens a lease', () => {
  const { table } = setup();
  const key = 'https://example.com/cap|desktop';
  const g = grant(table, key, T0);
  const cap = 45_000;
  const r1 = table.extend(key, g.token, asFleet, by(3 * LEASE, cap), T0 + 19_000);
  assert.deepEqual(r1, { ok: true, expiresAt: Math.floor((T0 + cap) / 1000) * 1000 });
  assert.deepEqual(table.extend(key, g.token, asFleet, by(3 * LEASE, cap), T0 + 30_000), r1);
  // A shorter byMs than the time left keeps the end where it is.
  assert.deepEqual(table.extend(key, g.token, asFleet, by(1_000, cap), T0 + 31_000), r1);
  assert.equal(table.isLeased(key, T0 + cap - 1000), true);
  assert.equal(table.isLeased(key, T0 + cap + 1000), false);
});

test('a grant that scanned before an extension wrote its new end does not grant the key', () => {
  // The grant's clock is past the old end; the extension runs between its scan and its claim CAS. The
  // extension's write moves the slot's generation, so the claim fails, the grant scans again and sees
  // the longer lease.
  const key = 'https://example.com/race|desktop';
  let extendAt: (() => void) | undefined;
  const { buffer, table } = setup(64, (step) => {
    if (step !== 'scanned' || !extendAt) return;
    const run = extendAt;
    extendAt = undefined;
    run();
  });
  const g = grant(table, key, T0);
  let extended = false;
  extendAt = () => {
    extended = table.extend(key, g.token, asFleet, by(LEASE), g.expiresAt - 1000).ok;
  };
  const late = g.expiresAt + 500;
  const r = table.grant(key, late, opts({ user: OTHER }));
  assert.equal(extended, true);
  assert.equal(r.ok === false && r.reason, 'leased');
  assert.equal(liveSlots(buffer, table, key, late), 1);
  assert.equal(table.check(key, g.token), 'current');
});

test('property: random grants, extensions (some inside a grant, on an earlier clock), results and time never leave two live leases for one key', () => {
  const keysOf = (t: LeaseTable): string[] => {
    // Keys sharing one home, so grants land on other slots of the same window.
    const byHome = new Map<number, string[]>();
    for (let i = 0; ; i++) {
      const k = `https://example.com/p/${i}|desktop`;
      const list = byHome.get(t.windowStart(k)) ?? [];
      list.push(k);
      byHome.set(t.windowStart(k), list);
      if (list.length === 6) return list;
    }
  };
  const keys = keysOf(setup(16).table);
  const key = fc.nat({ max: keys.length - 1 });
  const user = fc.constantFrom(FLEET, OTHER);
  const command = fc.oneof(
    fc.record({
      kind: fc.constant('grant' as const),
      key,
      user,
      nested: fc.option(
        fc.record({
          step: fc.constantFrom<GrantStep>('scanned', 'claimed', 'published'),
          key,
          pick: fc.nat(),
          earlier: fc.constantFrom(0, 500, 2_000),
        }),
      ),
    }),
    fc.record({
      kind: fc.constant('extend' as const),
      key,
      pick: fc.nat(),
      user,
      byMs: fc.constantFrom(1_000, LEASE, 3 * LEASE),
    }),
    fc.record({ kind: fc.constant('report' as const), key, pick: fc.nat() }),
    fc.record({
      kind: fc.constant('advance' as const),
      ms: fc.constantFrom(1, 500, 5_000, LEASE, 3 * LEASE),
    }),
  );
  fc.assert(
    fc.property(fc.array(command, { minLength: 1, maxLength: 50 }), (commands) => {
      let nestedRun: ((step: GrantStep) => void) | undefined;
      const { buffer, table } = setup(16, (step) => nestedRun?.(step));
      const worker2 = new LeaseTable(buffer, 16);
      const issued: Array<Array<{ token: string; user: number }>> = keys.map(() => []);
      let now = T0;
      const pickOf = (k: number, pick: number) => {
        const h = issued[k]!;
        return h.length === 0 ? undefined : h[pick % h.length];
      };
      const extendAndCheck = (
        t: LeaseTable,
        k: number,
        pick: number,
        asUser: number,
        byMs: number,
        at: number,
      ) => {
        const lease = pickOf(k, pick);
        if (!lease) return;
        const r = t.extend(
          keys[k]!,
          lease.token,
          { user: asUser, superUser: false },
          by(byMs, 4 * LEASE),
          at,
        );
        if (r.ok) {
          assert.equal(asUser, lease.user, 'only the grantee extends');
          assert.equal(lease, issued[k]!.at(-1), 'only the latest grant extends');
        }
      };
      for (const c of commands) {
        if (c.kind === 'grant') {
          const nested = c.nested;
          nestedRun = (step) => {
            if (nested === null || step !== nested.step) return;
            nestedRun = undefined;
            const lease = pickOf(nested.key, nested.pick);
            if (lease)
              extendAndCheck(worker2, nested.key, nested.pick, lease.user, LEASE, now - nested.earlier);
          };
          const g = table.grant(keys[c.key]!, now, opts({ user: c.user, leaseMs: LEASE }));
          nestedRun = undefined;
          if (g.ok) issued[c.key]!.push({ token: g.token, user: c.user });
        } else if (c.kind === 'extend') extendAndCheck(table, c.key, c.pick, c.user, c.byMs, now);
        else if (c.kind === 'report') {
          const lease = pickOf(c.key, c.pick);
          if (
            lease &&
            table.beginReport(keys[c.key]!, lease.token, { user: lease.user, superUser: false }).kind ===
              'first'
          )
            table.finishReport(
              keys[c.key]!,
              lease.token,
              { accepted: true, nextRenderTime: null },
              false,
              now,
            );
        } else now += c.ms;
        for (const k of keys) assert.ok(liveSlots(buffer, table, k, now) <= 1, `two live leases for ${k}`);
      }
    }),
    { numRuns: 300 },
  );
});
