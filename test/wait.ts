// Waiting in integration tests: poll a condition until it holds or a deadline passes (never a bare sleep
// standing in for a condition).
import assert from 'node:assert/strict';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` every `everyMs` until it answers something truthy; fails the test after `ms`. */
export async function until<T>(
  what: string,
  fn: () => T | undefined | false | Promise<T | undefined | false>,
  ms = 15_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}
