// Lease tokens that cannot be guessed, results reported once, and expiries seen once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { H, Report, S, State } from '../../util/leases/slots.js';
import { fromSharedSeconds } from '../../util/time.js';
import { LeaseTable, RELEASE_GRACE_MS, type GrantOptions } from '../../util/leases/table.js';
import { formatToken, nameHash, parseToken } from '../../util/leases/token.js';

const T0 = Date.UTC(2026, 0, 1, 10, 0, 0, 123);
const LEASE = 600_000;
const DUE = Date.UTC(2026, 0, 1, 9, 55);
const NEXT = Date.UTC(2026, 0, 2, 10, 0);
const FLEET = nameHash('fleet-a');
const OTHER = nameHash('fleet-b');
const asFleet = { user: FLEET, superUser: false };

const opts = (over: Partial<GrantOptions> = {}): GrantOptions => ({
  leaseMs: LEASE,
  dueMs: DUE,
  cadenceMs: 86_400_000,
  fastRetries: 2,
  user: FLEET,
  queue: nameHash('product'),
  ...over,
});

function table(random?: () => number): LeaseTable {
  return new LeaseTable(new ArrayBuffer(LeaseTable.byteLength(64)), 64, random ? { random } : {});
}

function grant(t: LeaseTable, key: string, now: number, over: Partial<GrantOptions> = {}) {
  const g = t.grant(key, now, opts(over));
  if (!g.ok) throw new Error(`expected a grant, got ${JSON.stringify(g)}`);
  return g;
}

test('a token is the grant instant plus 64 random bits, and round-trips through its text form', () => {
  const t = table();
  const a = grant(t, 'https://example.com/a', T0);
  const b = grant(t, 'https://example.com/b', T0);
  assert.match(a.token, /^[0-9a-f]{28}$/);
  const pa = parseToken(a.token)!;
  const pb = parseToken(b.token)!;
  assert.equal(pa.grantedAt, T0);
  assert.equal(pb.grantedAt, T0);
  assert.notDeepEqual([pa.randHi, pa.randLo], [pb.randHi, pb.randLo], 'two grants in one ms differ');
  assert.equal(formatToken(pa), a.token);
  for (const bad of [null, 12, '', 'x'.repeat(28), a.token.toUpperCase(), a.token + '0'])
    assert.equal(parseToken(bad), null);
});

test('a token with the right grant instant but other random bits is superseded, never accepted', () => {
  const t = table();
  const key = 'https://example.com/a';
  const g = grant(t, key, T0);
  // What a guesser who knows the grant instant (the old token) would send.
  const guessed = formatToken({ grantedAt: g.grantedAt, randHi: 0, randLo: 1 });
  assert.equal(t.check(key, guessed), 'superseded');
  assert.deepEqual(t.beginReport(key, guessed, asFleet), { kind: 'superseded' });
  assert.equal(t.release(key, guessed, T0 + 1), false);
  assert.equal(t.lookup(key, T0 + 1).state, 'leased', 'the guess changed nothing');
  assert.equal(t.check(key, g.token), 'current');
});

test('a result is admitted only from the lease grantee or a super_user', () => {
  const t = table();
  const key = 'https://example.com/a';
  const g = grant(t, key, T0);
  assert.deepEqual(t.beginReport(key, g.token, { user: OTHER, superUser: false }), { kind: 'superseded' });
  assert.deepEqual(t.beginReport(key, g.token, { user: OTHER, superUser: true }), { kind: 'first' });
});

test('the same result twice gets the first answer again and releases once', () => {
  const t = table();
  const key = 'https://example.com/a';
  const g = grant(t, key, T0);
  assert.deepEqual(t.beginReport(key, g.token, asFleet), { kind: 'first' });
  assert.deepEqual(
    t.beginReport(key, g.token, asFleet),
    { kind: 'pending' },
    'a copy racing the first waits',
  );
  t.finishReport(key, g.token, { accepted: true, nextRenderTime: NEXT }, false, T0 + 1000);
  assert.equal(t.lookup(key, T0 + 1000).state, 'grace');
  assert.equal(t.occupancy(), 0);
  const again = t.beginReport(key, g.token, asFleet);
  assert.deepEqual(again, { kind: 'duplicate', answer: { accepted: true, nextRenderTime: NEXT } });
  assert.equal(t.occupancy(), 0, 'a duplicate releases nothing');
});

test('a result that retired its row answers a duplicate with no next render time, not epoch 0', () => {
  const t = table();
  const key = 'https://example.com/moved';
  const g = grant(t, key, T0);
  assert.deepEqual(t.beginReport(key, g.token, asFleet), { kind: 'first' });
  t.finishReport(key, g.token, { accepted: true, nextRenderTime: null }, false, T0 + 1000);
  assert.deepEqual(t.beginReport(key, g.token, asFleet), {
    kind: 'duplicate',
    answer: { accepted: true, nextRenderTime: null },
  });
});

test('a failure kept on its lease (fast retry) is a duplicate when sent again, not a second strike', () => {
  const t = table();
  const key = 'https://example.com/a';
  const g = grant(t, key, T0);
  assert.equal(t.beginReport(key, g.token, asFleet).kind, 'first');
  t.finishReport(key, g.token, { accepted: true, nextRenderTime: DUE }, true, T0 + 1000);
  assert.equal(t.lookup(key, T0 + 1000).state, 'leased', 'the fast-retry lane keeps the lease');
  assert.deepEqual(t.beginReport(key, g.token, asFleet), {
    kind: 'duplicate',
    answer: { accepted: true, nextRenderTime: DUE },
  });
  // Its expiry is not a lost lease: the re-grant is no requeue, and the keeper's scan skips it.
  const seen: number[] = [];
  assert.equal(
    t.upkeep.collectExpired(g.expiresAt, (q) => seen.push(q)),
    0,
  );
  const next = grant(t, key, g.expiresAt);
  assert.equal(next.requeued, false);
});

test('a failure kept by the fast-retry lane clears the misses: only unreported leases lead to a hold', () => {
  // Fails with a reported lease counted as a miss: the key was held after 2 unreported leases, not 4.
  const t = table();
  const key = 'https://example.com/a';
  let now = T0;
  for (let i = 0; i < 2; i++) {
    const g = grant(t, key, now);
    assert.equal(t.beginReport(key, g.token, asFleet).kind, 'first');
    t.finishReport(key, g.token, { accepted: true, nextRenderTime: DUE }, true, now + 1000);
    now = g.expiresAt;
  }
  const missesOfGrants: number[] = [];
  for (let i = 0; i < 4; i++) {
    const g = grant(t, key, now); // the first after the two kept failures, then three after expiries
    missesOfGrants.push(t.lookup(key, now).misses);
    now = g.expiresAt;
  }
  assert.deepEqual(missesOfGrants, [0, 1, 2, 3]);
  const held = t.grant(key, now, opts());
  assert.equal(held.ok, false, 'the fourth unreported lease (fastRetries + 2) holds the key');
  assert.equal(t.lookup(key, now).state, 'held');
});

test('a report given up (its write failed) can be started again by a retry', () => {
  const t = table();
  const key = 'https://example.com/a';
  const g = grant(t, key, T0);
  assert.equal(t.beginReport(key, g.token, asFleet).kind, 'first');
  t.abortReport(key, g.token);
  assert.equal(t.beginReport(key, g.token, asFleet).kind, 'first');
  t.finishReport(key, g.token, { accepted: false, code: 'unknown_job' }, false, T0 + 5);
  assert.deepEqual(t.beginReport(key, g.token, asFleet), {
    kind: 'duplicate',
    answer: { accepted: false, code: 'unknown_job' },
  });
});

test('a result under an older grant of the key is superseded even while its slot still exists', () => {
  const t = table();
  const key = 'https://example.com/a';
  const first = grant(t, key, T0);
  const second = grant(t, key, first.expiresAt);
  assert.deepEqual(t.beginReport(key, first.token, asFleet), { kind: 'superseded' });
  assert.equal(t.beginReport(key, second.token, asFleet).kind, 'first');
});

test('an expired unreported lease is seen once, with its queue, and a late result is still accepted', () => {
  const t = table();
  const key = 'https://example.com/a';
  const g = grant(t, key, T0);
  grant(t, 'https://example.com/live', T0, { leaseMs: 2 * LEASE });
  const seen: number[] = [];
  assert.equal(
    t.upkeep.collectExpired(g.expiresAt - 1, (q) => seen.push(q)),
    0,
    'not before its end',
  );
  assert.equal(
    t.upkeep.collectExpired(g.expiresAt, (q) => seen.push(q)),
    1,
  );
  assert.deepEqual(seen, [nameHash('product')]);
  assert.equal(t.occupancy(), 1, 'the expired lease left the gauge');
  assert.equal(
    t.upkeep.collectExpired(g.expiresAt + 1000, (q) => seen.push(q)),
    0,
    'seen once',
  );
  // Reconcile on another worker first does not hide an expiry from the keeper's scan.
  const t2 = table();
  const h = grant(t2, key, T0);
  t2.upkeep.reconcile(h.expiresAt + 1);
  assert.equal(
    t2.upkeep.collectExpired(h.expiresAt + 2, () => undefined),
    1,
  );
  assert.equal(t.beginReport(key, g.token, asFleet).kind, 'first', 'a late result of it is current');
});

test('a released lease is not an expiry even after its grace ends', () => {
  const t = table();
  const key = 'https://example.com/a';
  const g = grant(t, key, T0);
  assert.equal(t.beginReport(key, g.token, asFleet).kind, 'first');
  t.finishReport(key, g.token, { accepted: true, nextRenderTime: NEXT }, false, T0 + 1);
  assert.equal(
    t.upkeep.collectExpired(T0 + LEASE + RELEASE_GRACE_MS * 2, () => undefined),
    0,
  );
});

/** Slots that hold a lease ended by `now` with no result and no expiry seen: what collectExpired owes. */
function endedUnseen(buffer: ArrayBuffer, now: number): number {
  const words = new Int32Array(buffer);
  let n = 0;
  for (let base = H.WORDS; base + S.WORDS <= words.length; base += S.WORDS) {
    const state = words[base]! & State.MASK;
    if (state !== State.LEASED && state !== State.EXPIRED) continue;
    if (words[base + S.REPORT] !== Report.NONE) continue;
    if (fromSharedSeconds(words[base + S.EXPIRY]!) <= now) n++;
  }
  return n;
}

test('a pass skips the walk while no lease can have ended, and the skip never hides an expiry', () => {
  // collectExpired walks only when H.NEXT_EXPIRY says some lease may have ended. Every way a slot comes
  // to hold a lease still to be seen expiring lowers the word: a grant (on either worker), an aborted
  // report, a grant taking over its own ended lease. With the word left alone by any of them this
  // fails: a pass skips and the oracle finds a lease ended and never seen.
  const keys = Array.from({ length: 6 }, (_, i) => `https://example.com/skip/${i}`);
  const key = fc.nat({ max: keys.length - 1 });
  const command = fc.oneof(
    fc.record({
      kind: fc.constant('grant' as const),
      key,
      worker: fc.nat({ max: 1 }),
      lease: fc.constantFrom(5_000, 60_000),
    }),
    fc.record({ kind: fc.constant('begin' as const), key }),
    fc.record({ kind: fc.constant('abort' as const), key }),
    fc.record({ kind: fc.constant('finish' as const), key, keep: fc.boolean() }),
    fc.record({ kind: fc.constant('release' as const), key }),
    fc.record({ kind: fc.constant('advance' as const), ms: fc.constantFrom(1, 999, 1000, 5_000, 60_000) }),
    fc.record({ kind: fc.constant('reconcile' as const) }),
    fc.record({ kind: fc.constant('collect' as const) }),
  );
  fc.assert(
    fc.property(fc.array(command, { minLength: 1, maxLength: 80, size: 'max' }), (commands) => {
      const buffer = new ArrayBuffer(LeaseTable.byteLength(64));
      const keeper = new LeaseTable(buffer, 64);
      const other = new LeaseTable(buffer, 64);
      const tokens: Array<string | undefined> = keys.map(() => undefined);
      let now = T0;
      for (const c of commands) {
        if (c.kind === 'grant') {
          const g = (c.worker === 0 ? keeper : other).grant(keys[c.key]!, now, opts({ leaseMs: c.lease }));
          if (g.ok) tokens[c.key] = g.token;
        } else if (c.kind === 'advance') now += c.ms;
        else if (c.kind === 'reconcile') other.upkeep.reconcile(now);
        else if (c.kind === 'collect') {
          const owed = endedUnseen(buffer, now);
          assert.equal(
            keeper.upkeep.collectExpired(now, () => undefined),
            owed,
            'every ended lease is seen',
          );
          assert.equal(endedUnseen(buffer, now), 0);
        } else {
          const token = tokens[c.key];
          if (token === undefined) continue;
          const k = keys[c.key]!;
          if (c.kind === 'begin') other.beginReport(k, token, asFleet);
          else if (c.kind === 'abort') other.abortReport(k, token);
          else if (c.kind === 'finish')
            other.finishReport(k, token, { accepted: true, nextRenderTime: NEXT }, c.keep, now);
          else other.release(k, token, now);
        }
      }
    }),
    { numRuns: 400 },
  );
  // And the skip is real: a slot made to look ended behind the word's back is not walked to.
  const buffer = new ArrayBuffer(LeaseTable.byteLength(64));
  const t = new LeaseTable(buffer, 64);
  const g = grant(t, 'https://example.com/a', T0);
  assert.equal(
    t.upkeep.collectExpired(T0 + 1000, () => undefined),
    0,
  );
  const words = new Int32Array(buffer);
  assert.equal(fromSharedSeconds(words[H.NEXT_EXPIRY]!), g.expiresAt, 'the word holds the soonest end');
  for (let base = H.WORDS; base + S.WORDS <= words.length; base += S.WORDS)
    if ((words[base]! & State.MASK) === State.LEASED) words[base + S.EXPIRY] = 0;
  assert.equal(
    t.upkeep.collectExpired(T0 + 2000, () => undefined),
    0,
    'skipped: no lease could have ended',
  );
  words[H.NEXT_EXPIRY] = 0;
  assert.equal(
    t.upkeep.collectExpired(T0 + 2000, () => undefined),
    1,
    'walked once the word allows',
  );
});
