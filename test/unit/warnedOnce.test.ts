// util/config/warnedOnce.ts: an unknown config key logs once per node, whichever worker meets it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { WarnedOnce } from '../../util/config/warnedOnce.js';

test('the first asker of a text is told to log it, every later one, on any view of the buffer, is not', () => {
  const buffer = new SharedArrayBuffer(WarnedOnce.byteLength());
  const worker0 = new WarnedOnce(buffer);
  const worker1 = new WarnedOnce(buffer);
  assert.equal(worker1.first('nonsense'), true);
  assert.equal(worker0.first('nonsense'), false);
  assert.equal(worker1.first('nonsense'), false);
  assert.equal(worker0.first('stall.nonsense'), true, 'another text is its own');
  assert.equal(worker1.size, 2);
});

test('a full set logs nothing new rather than growing', () => {
  const once = new WarnedOnce(new ArrayBuffer(WarnedOnce.byteLength()));
  let logged = 0;
  for (let i = 0; i < 10_000; i++) if (once.first(`key-${i}`)) logged++;
  assert.ok(logged > 1900 && logged <= 2048, `${logged} logged`);
  assert.equal(once.first('key-0'), false);
  assert.equal(once.first('one more'), false);
});

test('race: two threads asking about the same 2,000 texts at once log each exactly once between them', async () => {
  const buffer = new SharedArrayBuffer(WarnedOnce.byteLength());
  const moduleUrl = new URL('../../util/config/warnedOnce.js', import.meta.url).href;
  const code = `
    const { workerData, parentPort } = require('node:worker_threads');
    import(workerData.moduleUrl).then(({ WarnedOnce }) => {
      const once = new WarnedOnce(workerData.buffer);
      const mine = [];
      for (let i = 0; i < 2000; i++) if (once.first('k' + i)) mine.push(i);
      parentPort.postMessage(mine);
    });`;
  const run = () =>
    new Promise<number[]>((resolve, reject) => {
      const w = new Worker(code, { eval: true, workerData: { buffer, moduleUrl } });
      w.once('message', resolve);
      w.once('error', reject);
    });
  const [a, b] = await Promise.all([run(), run()]);
  const all = [...a, ...b].sort((x, y) => x - y);
  assert.equal(all.length, 2000, 'no text logged twice, none lost');
  assert.deepEqual(
    all,
    Array.from({ length: 2000 }, (_, i) => i),
  );
});
