// A renderer for pages that build their content with JavaScript: headless Chromium driven by
// playwright-core, the browser binary from @sparticuz/chromium (or any Chromium via executablePath /
// CHROMIUM_PATH). Both packages are optional peer dependencies: they are imported only when this
// renderer is created, so a fleet on the fetch renderer installs and runs without them.
import { deviceProfiles, type DeviceProfileOverride } from '../deviceProfiles.js';
import type { Job, RenderFn, RenderResult } from '../types.js';

/**
 * The flags every browser starts with (unless `args` replaces them). No sandbox, because the bundled
 * binary usually runs as root in a container, where Chromium refuses its own sandbox; no background
 * traffic of its own (updates, sync, pings), so the only requests are the page's. Web security stays
 * on: a rendered page gets no more cross-origin reach than in a visitor's browser.
 */
export const CHROMIUM_ARGS: readonly string[] = [
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-quic',
  '--disable-domain-reliability',
  '--no-pings',
];

export interface ChromiumRendererOptions {
  /** A Chromium binary; default $CHROMIUM_PATH, else the one @sparticuz/chromium unpacks. */
  executablePath?: string;
  /** Browser flags; default CHROMIUM_ARGS. */
  args?: readonly string[];
  /** Starts a browser instead of playwright-core's `chromium.launch` (a remote browser, tests). */
  launch?: () => Promise<RenderBrowser>;
  /** Pages per browser before it is replaced (bounds its memory); default 50. */
  recycleEvery?: number;
  /** Until the page's `load` event; past it the page is `failed`. Default 30 s. */
  navigationTimeoutMs?: number;
  /** The network counts as quiet once no request has been in flight for this long; default 500 ms. */
  quietMs?: number;
  /**
   * After `load`, wait at most this long for the network to go quiet, then take the page as it is
   * (a page that polls or streams never goes quiet). Default 10 s. The job's lease bounds it too.
   */
  maxQuietWaitMs?: number;
  /** Every device's user agent, sent as given (see deviceProfiles.ts for the order of precedence). */
  userAgent?: string;
  /** Changes to the device profiles, or new devices, by device name (see deviceProfiles.ts). */
  devices?: Readonly<Record<string, DeviceProfileOverride>>;
}

// The few playwright-core shapes used here, so the client compiles (and its tests run) without it.
export interface RenderResponse {
  status(): number;
  headers(): Record<string, string>;
  request(): RenderRequest;
}
export interface RenderRequest {
  redirectedFrom(): RenderRequest | null;
  response(): Promise<RenderResponse | null>;
}
export interface RenderPage {
  on(event: 'request' | 'requestfinished' | 'requestfailed', fn: (r: unknown) => void): unknown;
  goto(url: string, o: { waitUntil: 'load'; timeout: number }): Promise<RenderResponse | null>;
  content(): Promise<string>;
}
export interface RenderContext {
  newPage(): Promise<RenderPage>;
  close(): Promise<void>;
}
/** playwright-core's `newContext` options that make a context the job's device. */
export interface RenderContextOptions {
  userAgent: string;
  viewport: { width: number; height: number };
  deviceScaleFactor: number;
  isMobile: boolean;
  hasTouch: boolean;
}
export interface RenderBrowser {
  newContext(o: RenderContextOptions): Promise<RenderContext>;
  close(): Promise<void>;
  on(event: 'disconnected', fn: () => void): unknown;
}

export interface ChromiumRendererStats {
  /** Browsers started (the first one, each recycle, each replacement of one that crashed). */
  launches: number;
  /** Browsers started and not yet closed (the current one plus any finishing their last pages). */
  openBrowsers: number;
  /** Pages begun. */
  pages: number;
  /** Pages taken while the network was still busy (`maxQuietWaitMs` ran out). */
  takenBusy: number;
}

export interface ChromiumRenderer {
  render: RenderFn;
  /** Closes every browser; renders still running fail. */
  close: () => Promise<void>;
  stats: () => ChromiumRendererStats;
}

/** Imports a module by a name the compiler does not resolve (an optional dependency). */
const optional = (name: string): Promise<Record<string, unknown>> =>
  import(name) as Promise<Record<string, unknown>>;

interface PwChromium {
  launch(o: { executablePath: string; headless: boolean; args: string[] }): Promise<RenderBrowser>;
}

/** playwright-core's launcher for the configured (or bundled) binary; throws naming what is missing. */
async function defaultLauncher(opts: ChromiumRendererOptions): Promise<() => Promise<RenderBrowser>> {
  const pw = await optional('playwright-core').catch(() => {
    throw new Error('the chromium renderer needs playwright-core: npm install playwright-core');
  });
  const chromium = (pw.chromium ??
    (pw.default as { chromium?: unknown } | undefined)?.chromium) as PwChromium;
  let executablePath = opts.executablePath ?? (process.env.CHROMIUM_PATH || undefined);
  if (!executablePath) {
    const mod = await optional('@sparticuz/chromium').catch(() => {
      throw new Error(
        'the chromium renderer needs a browser: npm install @sparticuz/chromium, or set CHROMIUM_PATH',
      );
    });
    const bundled = (mod.default ?? mod) as { executablePath(): Promise<string> };
    executablePath = await bundled.executablePath();
  }
  const path = executablePath;
  const args = [...(opts.args ?? CHROMIUM_ARGS)];
  return () => chromium.launch({ executablePath: path, headless: true, args });
}

interface Slot {
  browser: Promise<RenderBrowser>;
  /** Pages begun in this browser. */
  pages: number;
  /** Pages still open in it. */
  open: number;
  closed: boolean;
}

/**
 * Loads each page in a fresh browser context opened as the job's device profile, waits for `load`
 * and then for the network to go quiet, and returns the DOM serialized as HTML. A context per job
 * shares no cookies or storage between jobs, and since a context's device is fixed when it opens, a
 * job never renders with another job's viewport or user agent. The browser is replaced every
 * `recycleEvery` pages; the old one closes once its last page is done. The first browser starts
 * here, so a browser that cannot start fails this call, not the first job.
 */
export async function chromiumRenderer(opts: ChromiumRendererOptions = {}): Promise<ChromiumRenderer> {
  // Resolved first: a malformed profile table fails here, before a browser is started for nothing.
  const profileOf = deviceProfiles({ devices: opts.devices, userAgent: opts.userAgent });
  const launch = opts.launch ?? (await defaultLauncher(opts));
  const recycleEvery = whole(opts.recycleEvery ?? 50, 'recycleEvery', 1);
  const navigationTimeout = whole(opts.navigationTimeoutMs ?? 30_000, 'navigationTimeoutMs', 1);
  const quietMs = whole(opts.quietMs ?? 500, 'quietMs', 0);
  const maxQuietWait = whole(opts.maxQuietWaitMs ?? 10_000, 'maxQuietWaitMs', 0);
  const stats: ChromiumRendererStats = { launches: 0, openBrowsers: 0, pages: 0, takenBusy: 0 };
  let current: Slot | null = null;
  let closing = false;

  const closeSlot = (s: Slot) => {
    if (s.closed) return;
    s.closed = true;
    stats.openBrowsers--;
    void s.browser.then((b) => b.close()).catch(() => {});
  };
  const retireIfDone = (s: Slot) => {
    if (s !== current && s.open === 0) closeSlot(s);
  };
  const start = (): Slot => {
    stats.launches++;
    stats.openBrowsers++;
    const slot: Slot = { browser: launch(), pages: 0, open: 0, closed: false };
    slot.browser.then(
      // A crashed browser is never handed another page: the next one starts a fresh browser.
      (b) => b.on('disconnected', () => forget(slot)),
      () => forget(slot),
    );
    return slot;
  };
  // Its pages still open fail on their own; the slot closes with the last of them (retireIfDone).
  const forget = (s: Slot) => {
    if (current === s) current = null;
    retireIfDone(s);
  };
  const acquire = (): Slot => {
    if (!current || current.pages >= recycleEvery) {
      const old = current;
      current = start();
      if (old) retireIfDone(old);
    }
    current.pages++;
    current.open++;
    return current;
  };

  current = start();
  try {
    await current.browser;
  } catch (e) {
    throw new Error(`the chromium renderer could not start a browser: ${(e as Error)?.message ?? e}`, {
      cause: e,
    });
  }

  const renderPage = async (
    job: Job,
    slot: Slot,
    ctx: { context: RenderContext | null },
  ): Promise<RenderResult> => {
    const browser = await slot.browser;
    const p = profileOf(job.deviceType);
    ctx.context = await browser.newContext({
      userAgent: p.userAgent,
      viewport: { ...p.viewport },
      deviceScaleFactor: p.deviceScaleFactor,
      isMobile: p.isMobile,
      hasTouch: p.hasTouch,
    });
    const page = await ctx.context.newPage();
    const network = trackNetwork(page);
    const response = await page.goto(job.url, { waitUntil: 'load', timeout: navigationTimeout });
    if (!response)
      return failed(null, 'NoResponse', 'the navigation produced no response (same-document URL?)');
    const first = firstOf(response.request());
    if (first !== response.request()) {
      // The target is the URL as filed: a redirect is reported, the page it leads to is its own row.
      const r = await first.response();
      return { outcome: 'redirected', statusCode: r?.status() ?? null };
    }
    const status = response.status();
    if (status >= 500) return failed(status, 'OriginError', `the origin answered ${status}`);
    const served = response.headers()['content-type'] ?? 'text/html';
    const mime = served.split(';')[0]!.trim().toLowerCase();
    if (mime !== 'text/html' && mime !== 'application/xhtml+xml')
      return { outcome: 'non-indexable', statusCode: status, contentType: served };
    if (!(await network.quiet(quietMs, maxQuietWait))) stats.takenBusy++;
    // The DOM is serialized to a JS string and reported as UTF-8, whatever charset the origin used.
    const body = await page.content();
    return { outcome: 'rendered', statusCode: status, contentType: `${mime}; charset=utf-8`, body };
  };

  const render = async (job: Job, signal: AbortSignal): Promise<RenderResult> => {
    if (closing) throw new Error('the chromium renderer is closed');
    signal.throwIfAborted();
    const slot = acquire();
    stats.pages++;
    const ctx: { context: RenderContext | null } = { context: null };
    let onAbort = () => {};
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => {
        reject(signal.reason);
        // Closing the context ends the navigation or the wait at once, and frees the page's memory.
        void ctx.context?.close().catch(() => {});
      };
      signal.addEventListener('abort', onAbort, { once: true });
    });
    const work = renderPage(job, slot, ctx);
    work.catch(() => {});
    aborted.catch(() => {});
    try {
      return await Promise.race([work, aborted]);
    } finally {
      signal.removeEventListener('abort', onAbort);
      await ctx.context?.close().catch(() => {});
      slot.open--;
      retireIfDone(slot);
    }
  };

  const close = async () => {
    closing = true;
    const s = current;
    current = null;
    if (!s) return;
    await s.browser.then((b) => b.close()).catch(() => {});
    if (!s.closed) {
      s.closed = true;
      stats.openBrowsers--;
    }
  };
  return { render, close, stats: () => ({ ...stats }) };
}

function failed(statusCode: number | null, name: string, message: string): RenderResult {
  return { outcome: 'failed', statusCode, error: { name, message } };
}

/** The first request of a redirect chain (the URL as filed). */
function firstOf(r: RenderRequest): RenderRequest {
  let x = r;
  for (let prev = x.redirectedFrom(); prev; prev = x.redirectedFrom()) x = prev;
  return x;
}

function whole(v: number, name: string, min: number): number {
  if (!Number.isInteger(v) || v < min) throw new TypeError(`${name} must be an integer of at least ${min}`);
  return v;
}

/**
 * Counts the page's requests in flight from before the navigation. `quiet` resolves true once none
 * has been in flight for `quietMs`, or false when `maxMs` passes first.
 */
function trackNetwork(page: RenderPage): { quiet: (quietMs: number, maxMs: number) => Promise<boolean> } {
  const inFlight = new Set<unknown>();
  let changed = () => {};
  page.on('request', (r) => {
    inFlight.add(r);
    changed();
  });
  const done = (r: unknown) => {
    if (inFlight.delete(r)) changed();
  };
  page.on('requestfinished', done);
  page.on('requestfailed', done);
  return {
    quiet: (quietMs, maxMs) =>
      new Promise<boolean>((resolve) => {
        let quietTimer: NodeJS.Timeout | undefined;
        const finish = (ok: boolean) => {
          clearTimeout(quietTimer);
          clearTimeout(limit);
          changed = () => {};
          resolve(ok);
        };
        const limit = setTimeout(() => finish(false), maxMs);
        changed = () => {
          clearTimeout(quietTimer);
          if (inFlight.size === 0) quietTimer = setTimeout(() => finish(true), quietMs);
        };
        changed();
      }),
  };
}
