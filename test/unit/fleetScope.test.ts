// Fleet-bound claim scopes (services/leases/fleetScope.ts) with a fake fleet list, clock and version word.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FleetScope } from '../../services/leases/fleetScope.js';
import type { FleetRecord } from '../../services/notify/fleets.js';

const T0 = Date.UTC(2026, 2, 1, 12, 0, 0);

function fleet(id: string, over: Partial<FleetRecord>): FleetRecord {
  return {
    id,
    name: id,
    state: 'active',
    queues: [],
    username: null,
    createdAt: 0,
    revokedAt: null,
    ...over,
  };
}

function world(fleets: FleetRecord[]) {
  const clock = { now: T0 };
  const version = new Int32Array(new ArrayBuffer(8), 0, 1);
  let loads = 0;
  const scope = new FleetScope({
    listFleets: async () => {
      loads++;
      return fleets.map((f) => ({ ...f }));
    },
    versionWord: () => version,
    now: () => clock.now,
  });
  return { scope, clock, version, fleets, loads: () => loads };
}

test('a user bound to an active fleet claims only its queues; an unbound user claims every queue', async () => {
  const w = world([fleet('f1', { username: 'render-a', queues: ['product', 'blog'] })]);
  assert.deepEqual(await w.scope.claimScope('render-a', undefined), new Set(['product', 'blog']));
  assert.equal(await w.scope.claimScope('someone-else', undefined), null);
  assert.equal(await w.scope.claimScope(undefined, undefined), null);
});

test("a body's queues narrow the scope; a queue outside the fleet's is a 400", async () => {
  const w = world([fleet('f1', { username: 'render-a', queues: ['product', 'blog'] })]);
  assert.deepEqual(await w.scope.claimScope('render-a', ['blog']), new Set(['blog']));
  await assert.rejects(w.scope.claimScope('render-a', ['docs']), { status: 400, code: 'invalid_queues' });
});

test('the user of a revoked fleet claims and reports nothing (403 fleet_revoked)', async () => {
  const w = world([fleet('f1', { username: 'render-a', state: 'revoked' })]);
  await assert.rejects(w.scope.claimScope('render-a', undefined), { status: 403, code: 'fleet_revoked' });
  await assert.rejects(w.scope.checkReporter('render-a'), { status: 403, code: 'fleet_revoked' });
});

test('bindings are kept for a second; a fleet change on this node (the shared version word) reloads at once', async () => {
  const w = world([fleet('f1', { username: 'render-a', queues: ['product'] })]);
  await w.scope.claimScope('render-a', undefined);
  w.fleets[0] = { ...w.fleets[0]!, state: 'revoked' };
  w.clock.now += 999;
  assert.deepEqual(await w.scope.claimScope('render-a', undefined), new Set(['product']), 'the cached copy');
  assert.equal(w.loads(), 1);
  // Another worker revoked it: only the shared word changed, not this instance's cache.
  Atomics.add(w.version, 0, 1);
  await assert.rejects(w.scope.claimScope('render-a', undefined), { status: 403 });
  assert.equal(w.loads(), 2);
  w.fleets[0] = { ...w.fleets[0]!, state: 'active' };
  w.clock.now += 1000;
  assert.deepEqual(
    await w.scope.claimScope('render-a', undefined),
    new Set(['product']),
    'reloaded after the TTL',
  );
  assert.equal(w.loads(), 3);
});
