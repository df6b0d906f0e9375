// The Chromium renderer's browser lifecycle with a stand-in browser (the real one runs in
// test/integration/fleetBrowser.test.ts): recycling every N pages, a replaced browser closing only
// after its last page, a crashed browser replaced, an abort ending a hung navigation, a browser that
// cannot start failing the renderer's creation, the answers per status and content type, and each
// job's page opened as its device.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  chromiumRenderer,
  type RenderBrowser,
  type RenderContext,
  type RenderContextOptions,
  type RenderPage,
  type RenderRequest,
  type RenderResponse,
} from '../src/renderers/chromium.js';
import { DEVICE_PROFILES } from '../src/deviceProfiles.js';
import type { Job } from '../src/types.js';
import { deferred } from './fakeClock.js';

interface Served {
  status: number;
  contentType?: string;
  html?: string;
  /** The statuses of the redirects that led here, first one first. */
  redirects?: number[];
  /** goto waits for this before answering. */
  hold?: Promise<unknown>;
}

/** A context as the fake browser opened it: its options, and the URLs its pages went to. */
interface FakeContext {
  closed: boolean;
  options: RenderContextOptions;
  visited: string[];
}

class FakeBrowser implements RenderBrowser {
  closed = false;
  contexts: FakeContext[] = [];
  private onDisconnect: Array<() => void> = [];
  constructor(
    readonly n: number,
    private readonly site: (url: string) => Served,
  ) {}
  on(_e: 'disconnected', fn: () => void) {
    this.onDisconnect.push(fn);
  }
  crash() {
    for (const fn of this.onDisconnect) fn();
  }
  async close() {
    this.closed = true;
  }
  async newContext(options: RenderContextOptions): Promise<RenderContext> {
    const state: FakeContext = { closed: false, options: structuredClone(options), visited: [] };
    this.contexts.push(state);
    const site = this.site;
    let abortGoto: ((e: Error) => void) | null = null;
    let at = '';
    const page: RenderPage = {
      on: () => undefined,
      async goto(url) {
        at = url;
        state.visited.push(url);
        const s = site(url);
        if (s.hold)
          await new Promise<void>((resolve, reject) => {
            abortGoto = reject;
            void s.hold!.then(() => resolve());
          });
        return responseOf(s);
      },
      content: async () => site(at).html ?? '',
    };
    return {
      newPage: async () => page,
      close: async () => {
        state.closed = true;
        abortGoto?.(new Error('Target page, context or browser has been closed'));
      },
    };
  }
}

/** The final response, its request linked back through the redirects that led to it. */
function responseOf(s: Served): RenderResponse {
  const headers = (): Record<string, string> => (s.contentType ? { 'content-type': s.contentType } : {});
  const requests: RenderRequest[] = [];
  const responses = [...(s.redirects ?? []), s.status].map((status, i): RenderResponse => {
    requests.push({ redirectedFrom: () => requests[i - 1] ?? null, response: async () => responses[i]! });
    return { status: () => status, headers, request: () => requests[i]! };
  });
  return responses.at(-1)!;
}

function fakeLauncher(
  site: (url: string) => Served = () => ({ status: 200, contentType: 'text/html', html: '<p>x</p>' }),
) {
  const browsers: FakeBrowser[] = [];
  return {
    browsers,
    launch: async () => {
      const b = new FakeBrowser(browsers.length, site);
      browsers.push(b);
      return b;
    },
  };
}

const job = (url: string, deviceType = 'desktop'): Job => ({
  id: `${url}|${deviceType}`,
  url,
  queue: 'q',
  isFromSitemap: true,
  expiresAt: 0,
  leaseToken: 't',
  callbackOrigin: 'http://127.0.0.1:9926',
  deviceType,
});
const live = () => new AbortController().signal;

test('the browser is replaced every recycleEvery pages, and each replaced one is closed', async () => {
  const f = fakeLauncher();
  const c = await chromiumRenderer({ launch: f.launch, recycleEvery: 2, quietMs: 0 });
  assert.equal(f.browsers.length, 1, 'the first browser starts with the renderer');
  for (let i = 0; i < 5; i++) assert.equal((await c.render(job(`u${i}`), live())).outcome, 'rendered');
  assert.equal(f.browsers.length, 3);
  assert.deepEqual(
    f.browsers.map((b) => b.closed),
    [true, true, false],
  );
  assert.ok(
    f.browsers.every((b) => b.contexts.every((x) => x.closed)),
    'every page context closed',
  );
  assert.deepEqual(c.stats(), { launches: 3, openBrowsers: 1, pages: 5, takenBusy: 0 });
  await c.close();
  assert.equal(f.browsers[2]!.closed, true);
  assert.equal(c.stats().openBrowsers, 0);
});

test('a replaced browser stays open until its last page is done', async () => {
  const hold = deferred<undefined>();
  const f = fakeLauncher((url) =>
    url === 'slow'
      ? { status: 200, contentType: 'text/html', hold: hold.promise }
      : { status: 200, contentType: 'text/html' },
  );
  const c = await chromiumRenderer({ launch: f.launch, recycleEvery: 1, quietMs: 0 });
  const slow = c.render(job('slow'), live());
  await c.render(job('fast'), live());
  assert.equal(f.browsers.length, 2);
  assert.equal(f.browsers[0]!.closed, false, 'still rendering the slow page');
  hold.resolve(undefined);
  assert.equal((await slow).outcome, 'rendered');
  assert.equal(f.browsers[0]!.closed, true);
  await c.close();
});

test('a browser that disconnects is never handed another page', async () => {
  const f = fakeLauncher();
  const c = await chromiumRenderer({ launch: f.launch, recycleEvery: 100, quietMs: 0 });
  await c.render(job('a'), live());
  f.browsers[0]!.crash();
  await c.render(job('b'), live());
  assert.equal(f.browsers.length, 2);
  assert.equal(f.browsers[1]!.contexts.length, 1, 'the page after the crash ran in the new browser');
  await c.close();
});

test(
  'an abort ends a hung navigation at once with the signal reason and closes its context',
  { timeout: 5_000 },
  async () => {
    const f = fakeLauncher(() => ({ status: 200, contentType: 'text/html', hold: new Promise(() => {}) }));
    const c = await chromiumRenderer({ launch: f.launch, quietMs: 0 });
    const ac = new AbortController();
    const rendering = c.render(job('hung'), ac.signal);
    await new Promise((r) => setImmediate(r));
    ac.abort(Object.assign(new Error('the render would have outlived its lease'), { name: 'LeaseExpired' }));
    await assert.rejects(rendering, { name: 'LeaseExpired' });
    assert.equal(f.browsers[0]!.contexts[0]!.closed, true);
    await c.close();
  },
);

test('a browser that cannot start fails the creation of the renderer', async () => {
  await assert.rejects(
    chromiumRenderer({ launch: () => Promise.reject(new Error('no such binary')) }),
    /could not start a browser: no such binary/,
  );
});

test('statuses and content types map to outcomes: 5xx failed, redirects reported, non-HTML non-indexable, HTML re-declared UTF-8', async () => {
  const served: Record<string, Served> = {
    ok: { status: 200, contentType: 'text/html; charset=iso-8859-1', html: '<p>é</p>' },
    gone: { status: 404, contentType: 'text/html' },
    down: { status: 503, contentType: 'text/html' },
    moved: { status: 200, contentType: 'text/html', redirects: [301, 302] },
    json: { status: 200, contentType: 'application/json' },
  };
  const f = fakeLauncher((url) => served[url] ?? served.ok!);
  const c = await chromiumRenderer({ launch: f.launch, quietMs: 0 });
  assert.deepEqual(await c.render(job('ok'), live()), {
    outcome: 'rendered',
    statusCode: 200,
    contentType: 'text/html; charset=utf-8',
    body: '<p>é</p>',
  });
  assert.equal((await c.render(job('gone'), live())).statusCode, 404);
  assert.equal((await c.render(job('down'), live())).outcome, 'failed');
  assert.deepEqual(await c.render(job('moved'), live()), { outcome: 'redirected', statusCode: 301 });
  assert.equal((await c.render(job('json'), live())).outcome, 'non-indexable');
  await c.close();
});

/** The newContext options a profile means, as playwright-core takes them. */
const contextFor = (p: (typeof DEVICE_PROFILES)['desktop']): RenderContextOptions => ({
  userAgent: p.userAgent,
  viewport: { ...p.viewport },
  deviceScaleFactor: p.deviceScaleFactor,
  isMobile: p.isMobile,
  hasTouch: p.hasTouch,
});

test('each job opens its context as its device: mobile, tablet, and desktop for a name the table does not know', async () => {
  const f = fakeLauncher();
  const c = await chromiumRenderer({ launch: f.launch, quietMs: 0 });
  for (const [url, device] of [
    ['m', 'mobile'],
    ['t', 'tablet'],
    ['d', 'desktop'],
    ['w', 'watch'],
  ] as const)
    assert.equal((await c.render(job(url, device), live())).outcome, 'rendered');
  const opened = f.browsers[0]!.contexts.map((x) => [x.visited, x.options]);
  assert.deepEqual(opened, [
    [['m'], contextFor(DEVICE_PROFILES.mobile)],
    [['t'], contextFor(DEVICE_PROFILES.tablet)],
    [['d'], contextFor(DEVICE_PROFILES.desktop)],
    [['w'], contextFor(DEVICE_PROFILES.desktop)],
  ]);
  const mobile = opened[0]![1] as RenderContextOptions;
  assert.equal(mobile.isMobile && mobile.hasTouch, true);
  assert.ok(mobile.viewport.width < 500 && mobile.deviceScaleFactor > 2, 'a phone-sized, dense screen');
  await c.close();
});

test('jobs of two devices rendering at once, across a browser recycle, each render only in a context of their own device', async () => {
  const holds = new Map<string, ReturnType<typeof deferred<undefined>>>();
  const f = fakeLauncher((url) => {
    if (!holds.has(url)) holds.set(url, deferred<undefined>());
    return { status: 200, contentType: 'text/html', html: url, hold: holds.get(url)!.promise };
  });
  const c = await chromiumRenderer({ launch: f.launch, quietMs: 0, recycleEvery: 3 });
  const jobs = Array.from({ length: 8 }, (_, i) => job(`u${i >> 1}`, i % 2 ? 'mobile' : 'desktop'));
  const rendering = jobs.map((j) => c.render(j, live()));
  await new Promise((r) => setImmediate(r));
  // Released in an order unlike the start order, so no context is closed in step with the next open.
  for (const url of ['u2', 'u0', 'u3', 'u1']) holds.get(url)?.resolve(undefined);
  for (const r of await Promise.all(rendering)) assert.equal(r.outcome, 'rendered');
  const contexts = f.browsers.flatMap((b) => b.contexts);
  assert.equal(contexts.length, 8, 'one context per job');
  assert.ok(f.browsers.length >= 2, 'the jobs straddled a recycle');
  const byAgent = new Map([
    [DEVICE_PROFILES.desktop.userAgent, 'desktop'],
    [DEVICE_PROFILES.mobile.userAgent, 'mobile'],
  ]);
  const rendered = contexts.flatMap((x) =>
    x.visited.map((url) => `${url}|${byAgent.get(x.options.userAgent)}`),
  );
  assert.deepEqual(rendered.sort(), jobs.map((j) => j.id).sort(), 'every job once, in its own device');
  for (const x of contexts) {
    assert.equal(x.visited.length, 1, 'a context serves one job');
    const device = byAgent.get(x.options.userAgent) as 'desktop' | 'mobile';
    assert.deepEqual(x.options, contextFor(DEVICE_PROFILES[device]));
    assert.equal(x.closed, true);
  }
  await c.close();
});

test('the userAgent option replaces the user agent of every device, and a device override replaces fields of that device only', async () => {
  const f = fakeLauncher();
  const c = await chromiumRenderer({
    launch: f.launch,
    quietMs: 0,
    userAgent: 'ExampleBot/1',
    devices: { mobile: { viewport: { width: 390, height: 844 }, userAgent: 'PhoneBot/2' } },
  });
  await c.render(job('d', 'desktop'), live());
  await c.render(job('m', 'mobile'), live());
  const [desktop, mobile] = f.browsers[0]!.contexts.map((x) => x.options);
  assert.deepEqual(desktop, { ...contextFor(DEVICE_PROFILES.desktop), userAgent: 'ExampleBot/1' });
  assert.deepEqual(mobile, {
    ...contextFor(DEVICE_PROFILES.mobile),
    viewport: { width: 390, height: 844 },
    userAgent: 'PhoneBot/2',
  });
  await c.close();
});

test('a malformed device profile fails the creation of the renderer before any browser starts', async () => {
  const f = fakeLauncher();
  await assert.rejects(
    chromiumRenderer({ launch: f.launch, devices: { mobile: { deviceScaleFactor: 0 } } }),
    /devices\.mobile\.deviceScaleFactor/,
  );
  assert.equal(f.browsers.length, 0);
});
