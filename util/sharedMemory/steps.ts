// The shared-memory flows (ready set publish/take, state doc write/read) are written as step generators
// so a test can stop one part way and interleave another at every step. Outside tests they run through.

/** Runs a step generator to its end and returns what it returns. */
export function runToEnd<R>(steps: Generator<unknown, R, void>): R {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}
