import { test } from 'node:test';
import assert from 'node:assert/strict';
import { StateDoc } from '../../util/sharedMemory/stateDoc.js';

const NOW = Date.UTC(2025, 5, 1, 12, 0, 0);

interface Doc {
  version: number;
  now: { due: number; inFlight: number; status: string };
  lateness: { classes: { route: string; cadenceMs: number; due: number }[] };
  flow: { minute: number; cameDue: number }[];
}

function doc(version: number, classes = 20): Doc {
  return {
    version,
    now: { due: 1000 + version, inFlight: 3, status: 'queued' },
    lateness: {
      classes: Array.from({ length: classes }, (_, i) => ({
        route: `route-${i}`,
        cadenceMs: 3_600_000,
        due: i * version,
      })),
    },
    flow: Array.from({ length: 60 }, (_, i) => ({ minute: NOW - (59 - i) * 60_000, cameDue: i })),
  };
}

function twoViews(maxDocBytes = 16 * 1024): [StateDoc<Doc>, StateDoc<Doc>] {
  const buf = new ArrayBuffer(StateDoc.byteLength(maxDocBytes));
  return [new StateDoc<Doc>(buf, maxDocBytes), new StateDoc<Doc>(buf, maxDocBytes)];
}

function finish<R>(steps: Generator<unknown, R, void>): R {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

test('nothing is read before the first write', () => {
  const [, reader] = twoViews();
  assert.equal(reader.read(), null);
});

test('a document written through one view is read through another with its time and generation', () => {
  const [writer, reader] = twoViews();
  assert.equal(writer.write(doc(1), NOW + 1_500), true);
  assert.deepEqual(reader.read(), { doc: doc(1), writtenAt: NOW + 1_000, generation: 1 });
  assert.equal(writer.write(doc(2), NOW + 5_000), true);
  assert.deepEqual(reader.read(), { doc: doc(2), writtenAt: NOW + 5_000, generation: 2 });
});

test('an oversized document is refused and the previous one stays readable', () => {
  const [writer, reader] = twoViews(4 * 1024);
  assert.equal(writer.write(doc(1, 5), NOW), true);
  assert.equal(writer.write(doc(2, 2000), NOW + 5_000), false);
  assert.deepEqual(reader.read(), { doc: doc(1, 5), writtenAt: NOW, generation: 1 });
});

test('a reader whose slot is rewritten while it reads retries and returns the newest document whole', () => {
  // Fails with the seq re-check in readSteps removed: the reader then decodes the third document's
  // bytes with the first one's length and generation.
  const [writer, reader] = twoViews();
  writer.write(doc(1, 5), NOW);
  const read = reader.readSteps();
  assert.equal(read.next().value, 'headerRead');
  writer.write(doc(2, 40), NOW + 5_000);
  writer.write(doc(3, 40), NOW + 10_000); // back onto the slot being read
  const got = finish(read);
  assert.deepEqual(got, { doc: doc(3, 40), writtenAt: NOW + 10_000, generation: 3 });
});

test('while the writer holds the new slot, readers get the previous document', () => {
  const [writer, reader] = twoViews();
  writer.write(doc(1), NOW);
  const write = writer.writeSteps(doc(2), NOW + 5_000);
  assert.equal(write.next().value, 'acquired');
  assert.equal(reader.read()?.doc.version, 1);
  assert.equal(write.next().value, 'flipped');
  assert.equal(reader.read()?.doc.version, 1);
  assert.equal(finish(write), true);
  assert.equal(reader.read()?.doc.version, 2);
});

test('a writer that died mid-write is replaced after 10 s, not before', () => {
  const [dead, successor] = twoViews();
  dead.write(doc(1), NOW);
  const write = dead.writeSteps(doc(2), NOW + 5_000);
  write.next(); // acquired, then never resumed
  assert.equal(successor.write(doc(3), NOW + 10_000), false);
  assert.equal(successor.read()?.doc.version, 1);
  assert.equal(successor.write(doc(3), NOW + 15_000), true);
  assert.equal(successor.read()?.doc.version, 3);
});

test('a buffer laid out for one document size refuses another', () => {
  const buf = new ArrayBuffer(StateDoc.byteLength(8192));
  new StateDoc(buf, 8192);
  assert.throws(() => new StateDoc(buf, 4096), /laid out for 8192 bytes/);
  assert.throws(() => new StateDoc(new ArrayBuffer(100), 8192), /needs \d+ bytes/);
});

test('a document written in 2040 keeps its time (Int32 seconds from 2024)', () => {
  const [writer, reader] = twoViews();
  const in2040 = Date.UTC(2040, 2, 3, 4, 5, 6);
  writer.write(doc(1), in2040);
  assert.equal(reader.read()?.writtenAt, in2040);
});
