import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SETTLED_WALK_CAP_MS, SettledWalkPlan } from '../../util/cluster/settledWalk.js';

const TICK = 1000;

test('no walk is owed until the membership changes', () => {
  const p = new SettledWalkPlan();
  assert.equal(p.pending, false);
  assert.equal(p.due(1e6, TICK, false), false);
});

test('the walk is owed a tick after the change, once no peer still publishes another view', () => {
  const p = new SettledWalkPlan();
  p.changed(10_000);
  assert.equal(p.due(10_500, TICK, false), false, 'not within the tick');
  assert.equal(p.due(11_000, TICK, true), false, 'not while a peer is settling');
  assert.equal(p.due(11_000, TICK, false), true);
});

test('a peer that never settles does not hold the walk back past the cap', () => {
  const p = new SettledWalkPlan();
  p.changed(0);
  assert.equal(p.due(SETTLED_WALK_CAP_MS - 1, TICK, true), false);
  assert.equal(p.due(SETTLED_WALK_CAP_MS, TICK, true), true);
});

test('a completed walk settles the changes before it, not one that came while it ran', () => {
  const p = new SettledWalkPlan();
  p.changed(1000);
  p.walked(5000);
  assert.equal(p.pending, false);
  p.changed(6000);
  p.changed(7000); // while the walk that began at 6,500 ran
  p.walked(6500);
  assert.equal(p.pending, true, 'the later change still owes its walk');
  assert.equal(p.due(8000, TICK, false), true);
});
