// The persistent channel's message envelope (util/channel/envelope.ts): what it admits and how it names
// what it refuses.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkEnvelope as checkEnvelopeOrProblem } from '../../util/channel/envelope.js';
import { HttpError } from '../../services/runtime/httpError.js';
import { orRefuse } from '../../services/http/problems.js';

/** The envelope as the channel route answers it: a problem thrown as its HTTP answer. */
const checkEnvelope = (...a: Parameters<typeof checkEnvelopeOrProblem>) =>
  orRefuse(checkEnvelopeOrProblem(...a));

const limits = { maxResults: 100, maxCredits: 50 };

function refusal(value: unknown, outstanding = 0): string {
  try {
    checkEnvelope(value, outstanding, limits);
  } catch (e) {
    assert.ok(e instanceof HttpError);
    assert.equal(e.status, 400);
    return e.code;
  }
  assert.fail(`admitted ${JSON.stringify(value)}`);
}

test('an empty message adds no credits and carries no results', () => {
  assert.deepEqual(checkEnvelope({}, 0, limits), {
    results: [],
    credits: 0,
    withdraw: false,
    queues: undefined,
    ref: undefined,
  });
});

test('credits, results, queues and ref are passed on as sent', () => {
  const r = checkEnvelope({ credits: 5, results: [{ id: 'a' }], queues: ['product'], ref: 'x1' }, 10, limits);
  assert.equal(r.credits, 5);
  assert.deepEqual(r.results, [{ id: 'a' }]);
  assert.deepEqual(r.queues, ['product']);
  assert.equal(r.ref, 'x1');
  assert.equal(checkEnvelope({ ref: 7 }, 0, limits).ref, 7);
  assert.equal(checkEnvelope({ queues: null }, 0, limits).queues, null);
});

test('credits must be a non-negative integer that keeps the outstanding credits within the cap', () => {
  for (const c of [-1, 1.5, '3', null, true, Number.NaN])
    assert.equal(refusal({ credits: c }), 'invalid_credits');
  assert.equal(checkEnvelope({ credits: 50 }, 0, limits).credits, 50);
  assert.equal(refusal({ credits: 1 }, 50), 'invalid_credits');
  assert.equal(refusal({ credits: 41 }, 10), 'invalid_credits');
});

test('a closed envelope: unknown fields, non-objects, too many results and odd refs are refused', () => {
  assert.equal(refusal({ credits: 1, limit: 5 }), 'unknown_field');
  assert.equal(refusal([]), 'invalid_body');
  assert.equal(refusal('credits'), 'invalid_body');
  assert.equal(refusal(null), 'invalid_body');
  assert.equal(refusal({ results: {} }), 'invalid_body');
  assert.equal(refusal({ results: Array.from({ length: 101 }, () => ({})) }), 'invalid_body');
  assert.equal(refusal({ ref: 'x'.repeat(201) }), 'invalid_body');
  assert.equal(refusal({ ref: 1.5 }), 'invalid_body');
  assert.equal(refusal({ ref: { a: 1 } }), 'invalid_body');
});

test('withdraw is a boolean and never comes with credits', () => {
  assert.equal(checkEnvelope({ withdraw: true }, 20, limits).withdraw, true);
  assert.equal(checkEnvelope({ withdraw: false, credits: 2 }, 0, limits).credits, 2);
  assert.equal(refusal({ withdraw: 'yes' }), 'invalid_body');
  assert.equal(refusal({ withdraw: true, credits: 1 }), 'invalid_credits');
});
