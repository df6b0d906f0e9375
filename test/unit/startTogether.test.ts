import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startTogether } from '../startTogether.js';

/** A start that settles when the test says so, recording whether it was stopped. */
function controlled<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: Error) => void;
  const start = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  const stopped: T[] = [];
  return { start, stop: async (v: T) => void stopped.push(v), resolve, reject, stopped };
}

test('when one start fails while another is still booting, the slow one is stopped once it comes up, then the failure is reported', async () => {
  const harper = controlled<string>();
  const browser = controlled<string>();
  const together = startTogether<[string, string]>(harper, browser);
  let settled = false;
  void together.then(
    () => (settled = true),
    () => (settled = true),
  );
  browser.reject(new Error('no browser'));
  await new Promise((r) => setImmediate(r));
  assert.equal(settled, false, 'the failure waits for the start still booting');
  harper.resolve('harper-1');
  await assert.rejects(together, /no browser/);
  assert.deepEqual(harper.stopped, ['harper-1']);
  assert.deepEqual(browser.stopped, []);
});

test('when every start succeeds, their results come back in order and nothing is stopped', async () => {
  const a = controlled<number>();
  const b = controlled<string>();
  const together = startTogether<[number, string]>(a, b);
  b.resolve('b');
  a.resolve(1);
  assert.deepEqual(await together, [1, 'b']);
  assert.deepEqual(a.stopped, []);
  assert.deepEqual(b.stopped, []);
});

test('when several starts fail, the first failure in argument order is reported and the one that came up is stopped', async () => {
  const a = controlled<string>();
  const b = controlled<string>();
  const c = controlled<string>();
  const together = startTogether<[string, string, string]>(a, b, c);
  c.reject(new Error('c failed'));
  a.reject(new Error('a failed'));
  b.resolve('b-up');
  await assert.rejects(together, /a failed/);
  assert.deepEqual(b.stopped, ['b-up']);
});
