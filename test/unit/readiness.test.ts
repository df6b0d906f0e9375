// Readiness (util/keeper/readiness.ts): what the balancer's probe answers for each keeper state.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readiness, type ReadinessInput } from '../../util/keeper/readiness.js';

const serving: ReadinessInput = { phase: 'live', serving: true, pauseKnown: true, leasesAttached: true };

test('a keeper serving claims is ready, while it loads as well as once it is live', () => {
  assert.equal(readiness(serving), 'ready');
  assert.equal(readiness({ ...serving, phase: 'loading' }), 'ready');
});

test('a keeper that has not published, waits for peers, stopped or failed is unready', () => {
  assert.equal(readiness({ ...serving, serving: false, phase: 'loading' }), 'unready');
  for (const phase of ['waiting-for-peers', 'stopped', 'failed'] as const)
    assert.equal(readiness({ ...serving, phase }), 'unready', phase);
});

test('a worker without its lease table, or that has not read the pause intent, is unready', () => {
  assert.equal(readiness({ ...serving, leasesAttached: false }), 'unready');
  assert.equal(readiness({ ...serving, pauseKnown: false }), 'unready');
});
