// The queue-keeper calls integration tests make over and over, against one harness instance. Each fails
// the test with the answer's text when the call is not accepted.
import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { Credentials, HarperInstance } from './harness.js';

/** Posts a runtime config change (POST /prerender_admin/config) and returns the effective config. */
export async function postConfig(h: HarperInstance, partial: unknown): Promise<Record<string, unknown>> {
  const r = await h.fetch('/prerender_admin/config', { body: partial });
  assert.equal(r.status, 200, r.text);
  return r.json as Record<string, unknown>;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** The values of `current` at the paths `partial` names (arrays and leaves taken whole). */
function valuesAt(current: unknown, partial: unknown): unknown {
  if (!isPlainObject(partial) || !isPlainObject(current)) return current;
  return Object.fromEntries(Object.keys(partial).map((k) => [k, valuesAt(current[k], partial[k])]));
}

/**
 * Applies a config change for one test and, after it, pass or fail, posts back the values it replaced —
 * so a failing assertion cannot leak its settings into the next test of the file.
 */
export async function configForTest(t: TestContext, h: HarperInstance, partial: unknown): Promise<void> {
  const before = (await h.fetch('/prerender_admin/config')).json as unknown;
  t.after(() => postConfig(h, valuesAt(before, partial)));
  await postConfig(h, partial);
}

/**
 * Files targets through POST /render_queue/targets (as the admin unless `auth` is given); every one must
 * be accepted (a test of rejections calls the endpoint itself).
 */
export async function fileTargets(
  h: HarperInstance,
  targets: unknown[],
  auth?: Credentials,
): Promise<{ upserted: number; rejected: unknown[] }> {
  const r = await h.fetch('/render_queue/targets', { body: { targets }, ...(auth ? { auth } : {}) });
  assert.equal(r.status, 200, r.text);
  const answer = r.json as { upserted: number; rejected: unknown[] };
  assert.deepEqual(answer.rejected, [], 'every target filed is accepted');
  return answer;
}

/** A job as `claim`, `/next` and the channel grant it (docs/fleets.md): the fleet client's wire type. */
export type { Job } from '../client/src/types.js';
