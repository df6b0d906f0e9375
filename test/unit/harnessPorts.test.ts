// The harness's ports and requests without Harper: each test slot (scripts/run-tests.mjs runs files
// side by side, one slot each) picks ports from a range of its own below the system's ephemeral range,
// a process never gets the same port twice, and a request the caller gave no timeout still gives up.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

// Read when the harness is imported: a short default, so the hanging request below fails fast.
process.env.QK_TEST_REQUEST_TIMEOUT_MS = '800';
const { freePort, request, slotPortRange } = await import('../harness.js');

const servers: http.Server[] = [];
after(() => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
});

test('the five test slots have disjoint port ranges below the ephemeral range, and no slot means the system picks', () => {
  assert.equal(slotPortRange(undefined), undefined);
  assert.equal(slotPortRange(''), undefined);
  const ranges = [0, 1, 2, 3, 4].map((n) => slotPortRange(String(n))!);
  for (const [i, r] of ranges.entries()) {
    assert.ok(r.from >= 1024 && r.to <= 32768 && r.from < r.to, JSON.stringify(r));
    for (const other of ranges.slice(i + 1)) assert.ok(r.to <= other.from || other.to <= r.from);
  }
  assert.throws(() => slotPortRange('5'), /QK_TEST_SLOT must be 0 to 4/);
  assert.throws(() => slotPortRange('x'), /QK_TEST_SLOT must be 0 to 4/);
});

test('in a slot, free ports come from its range and are never handed out twice', async () => {
  const before = process.env.QK_TEST_SLOT;
  process.env.QK_TEST_SLOT = '3';
  try {
    const range = slotPortRange('3')!;
    const ports: number[] = [];
    for (let i = 0; i < 60; i++) ports.push(await freePort());
    for (const p of ports) assert.ok(p >= range.from && p < range.to, `${p} is outside slot 3`);
    assert.equal(new Set(ports).size, ports.length, 'a port was handed out twice');
  } finally {
    if (before === undefined) delete process.env.QK_TEST_SLOT;
    else process.env.QK_TEST_SLOT = before;
  }
});

test(
  'a request with no timeout of its own gives up on a server that never answers',
  { timeout: 10_000 },
  async () => {
    const s = http.createServer(() => undefined);
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
    const started = Date.now();
    await assert.rejects(request(url, '/never'), /no answer within 800 ms/);
    assert.ok(Date.now() - started < 5000);
  },
);
