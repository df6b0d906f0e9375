// The harness itself: a start that fails leaves nothing behind. A Harper left booting after a failed
// before() keeps the test process alive and `npm test` never ends; a temp root left behind piles up. A
// Harper it boots listens on 127.0.0.1 only, with every worker up.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HarperStartError, startHarper } from '../harness.js';
import { canListListeners, listenersOf } from '../listeners.js';

let component: string;

before(() => {
  // A tiny component whose /hang never answers: Harper is up and serving, yet never ready.
  component = mkdtempSync(join(tmpdir(), 'qk-hang-component-'));
  writeFileSync(join(component, 'package.json'), JSON.stringify({ name: 'hang', type: 'module' }));
  writeFileSync(join(component, 'config.yaml'), 'rest: true\njsResource:\n  files: hang.js\n');
  writeFileSync(
    join(component, 'hang.js'),
    [
      "import harperdb from 'harperdb';",
      "harperdb.server.http((request, next) => (request.pathname === '/hang' ? new Promise(() => {}) : next(request)));",
    ].join('\n'),
  );
});

after(() => rmSync(component, { recursive: true, force: true }));

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    assert.equal((e as NodeJS.ErrnoException).code, 'ESRCH');
    return false;
  }
}

function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(false)));
    socket.once('error', () => resolve(true));
  });
}

async function failedStart(start: Promise<unknown>): Promise<HarperStartError> {
  try {
    await start;
  } catch (e) {
    assert.ok(e instanceof HarperStartError, String(e));
    return e;
  }
  assert.fail('the start was expected to fail');
}

test(
  'a start that is not ready by its deadline stops the Harper it spawned and removes its temp root',
  { timeout: 60_000 },
  async () => {
    // /hang never answers: whether Harper is still booting or already serving at the deadline, the start
    // must leave nothing behind (that the deadline holds against a hanging request is a unit test:
    // test/unit/harnessReady.test.ts).
    const e = await failedStart(
      startHarper({ componentDir: component, readyPath: '/hang', readyTimeoutMs: 12_000 }),
    );
    assert.match(e.message, /not ready after timeout \(\/hang: (no answer|last answer \d+)\)/);
    assert.ok(e.pid !== undefined && e.ports !== undefined);
    assert.equal(isRunning(e.pid), false, `Harper pid ${e.pid} is still running`);
    assert.equal(existsSync(e.root), false, `the temp root ${e.root} is still there`);
    assert.equal(await refused(e.ports.http!), true, 'something still listens on the HTTP port');
  },
);

test(
  'a start whose Harper exits during boot removes the temp root it made',
  { timeout: 60_000 },
  async () => {
    const e = await failedStart(startHarper({ componentDir: join(component, 'no-such-folder') }));
    assert.match(e.message, /exited during start/);
    assert.ok(e.pid !== undefined);
    assert.equal(isRunning(e.pid), false);
    assert.equal(existsSync(e.root), false, `the temp root ${e.root} is still there`);
  },
);

test(
  'a failed restart on a root the caller owns stops Harper but leaves that root in place',
  { timeout: 60_000 },
  async () => {
    const root = mkdtempSync(join(tmpdir(), 'qk-harper-owned-'));
    try {
      const e = await failedStart(startHarper({ root, componentDir: join(component, 'no-such-folder') }));
      assert.equal(e.root, root);
      assert.equal(isRunning(e.pid!), false);
      assert.equal(existsSync(root), true);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  },
);

test(
  'a harness Harper with two workers listens on 127.0.0.1 only, on the ports it was given',
  { timeout: 120_000, skip: canListListeners ? false : 'needs Linux /proc' },
  async () => {
    const h = await startHarper({ threads: 2 });
    try {
      const listeners = listenersOf(h.pid);
      const given = new Set(Object.values(h.ports));
      const stray = listeners.filter((l) => l.address !== '127.0.0.1' || !given.has(l.port));
      assert.deepEqual(stray, [], `listeners beyond the harness's ports: ${JSON.stringify(listeners)}`);
      for (const port of [h.ports.http, h.ports.ops])
        assert.ok(
          listeners.some((l) => l.port === port),
          `nothing listens on ${port}: ${JSON.stringify(listeners)}`,
        );
      // The authentication listener, pinned to the HTTP port, still checks credentials there.
      assert.equal((await h.fetch('/prerender_admin/health', { auth: null, fresh: true })).status, 401);
      assert.equal((await h.fetch('/prerender_admin/health', { fresh: true })).status, 200);
      assert.ok(Array.isArray(await h.operation({ operation: 'list_users' })));
    } finally {
      await h.destroy();
    }
  },
);
