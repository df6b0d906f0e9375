// A renderer for pages that build their content with JavaScript: headless Chromium driven by
// playwright-core, the browser binary from @sparticuz/chromium (or any Chromium via executablePath /
// CHROMIUM_PATH). Both packages are optional: they are imported only when this renderer starts, so the
// client installs and runs without them.
import type { Job, RenderFn, RenderResult } from '../types.js';

export interface ChromiumRendererOptions {
  /** A Chromium binary; default $CHROMIUM_PATH, else the one @sparticuz/chromium unpacks. */
  executablePath?: string;
  /** Pages per browser before it is replaced (bounds its memory); default 50. */
  recycleEvery?: number;
  /** The whole navigation, network-quiet included; default 30 s. */
  navigationTimeoutMs?: number;
  userAgent?: string;
}

// Minimal shapes of the playwright-core objects used here, so the client compiles without it.
interface PwResponse {
  status(): number;
  headers(): Record<string, string>;
  request(): { redirectedFrom(): { response(): Promise<PwResponse | null> } | null };
}
interface PwPage {
  goto(url: string, o: { waitUntil: 'networkidle'; timeout: number }): Promise<PwResponse | null>;
  content(): Promise<string>;
}
interface PwContext {
  newPage(): Promise<PwPage>;
  close(): Promise<void>;
}
interface PwBrowser {
  newContext(o: { userAgent?: string }): Promise<PwContext>;
  close(): Promise<void>;
}
interface PwChromium {
  launch(o: { executablePath: string; headless: boolean; args?: string[] }): Promise<PwBrowser>;
}

/** Imports a module by a name the compiler does not resolve (an optional dependency). */
const optional = (name: string): Promise<Record<string, unknown>> =>
  import(name) as Promise<Record<string, unknown>>;

async function browserLauncher(opts: ChromiumRendererOptions): Promise<() => Promise<PwBrowser>> {
  const pw = await optional('playwright-core').catch(() => {
    throw new Error('the chromium renderer needs playwright-core: npm install playwright-core');
  });
  const chromium = (pw.chromium ??
    (pw.default as { chromium?: unknown } | undefined)?.chromium) as PwChromium;
  let executablePath = opts.executablePath ?? process.env.CHROMIUM_PATH;
  let args: string[] | undefined;
  if (!executablePath) {
    const mod = await optional('@sparticuz/chromium').catch(() => {
      throw new Error(
        'the chromium renderer needs a browser: npm install @sparticuz/chromium, or set CHROMIUM_PATH',
      );
    });
    const sparticuz = (mod.default ?? mod) as { executablePath(): Promise<string>; args: string[] };
    executablePath = await sparticuz.executablePath();
    args = sparticuz.args;
  }
  const path = executablePath;
  return () => chromium.launch({ executablePath: path, headless: true, args });
}

/**
 * Loads each page in a fresh browser context, waits until the network has been quiet for 500 ms
 * (playwright's `networkidle`), and returns the DOM as HTML. The browser is replaced every
 * `recycleEvery` pages; the old one closes once its last page is done.
 */
export async function chromiumRenderer(
  opts: ChromiumRendererOptions = {},
): Promise<{ render: RenderFn; close: () => Promise<void> }> {
  const launch = await browserLauncher(opts);
  const recycleEvery = opts.recycleEvery ?? 50;
  const timeout = opts.navigationTimeoutMs ?? 30_000;
  interface Slot {
    browser: Promise<PwBrowser>;
    pages: number;
    open: number;
  }
  let current: Slot | null = null;
  const retire = (s: Slot) => {
    if (s !== current && s.open === 0) void s.browser.then((b) => b.close()).catch(() => {});
  };
  const acquire = (): Slot => {
    if (!current || current.pages >= recycleEvery) {
      const old = current;
      const fresh: Slot = { browser: launch(), pages: 0, open: 0 };
      // A browser that fails to start is not reused: the next page launches another.
      fresh.browser.catch(() => {
        if (current === fresh) current = null;
      });
      current = fresh;
      if (old) retire(old);
    }
    current.pages++;
    current.open++;
    return current;
  };

  const render = async (job: Job, signal: AbortSignal): Promise<RenderResult> => {
    const slot = acquire();
    let context: PwContext | null = null;
    const onAbort = () => void context?.close().catch(() => {});
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const browser = await slot.browser;
      context = await browser.newContext({ userAgent: opts.userAgent });
      if (signal.aborted) throw signal.reason;
      const page = await context.newPage();
      const response = await page.goto(job.url, { waitUntil: 'networkidle', timeout });
      if (!response) return { outcome: 'failed', error: { name: 'NoResponse', message: 'no response' } };
      const first = response.request().redirectedFrom();
      if (first) {
        const r = await first.response();
        return { outcome: 'redirected', statusCode: r?.status() ?? 302 };
      }
      const status = response.status();
      if (status >= 500)
        return {
          outcome: 'failed',
          statusCode: status,
          error: { name: 'OriginError', message: `the origin answered ${status}` },
        };
      const contentType = response.headers()['content-type'] ?? 'text/html';
      if (!/^\s*(text\/html|application\/xhtml\+xml)\b/i.test(contentType))
        return { outcome: 'non-indexable', statusCode: status, contentType };
      return { outcome: 'rendered', statusCode: status, contentType, body: await page.content() };
    } finally {
      signal.removeEventListener('abort', onAbort);
      await context?.close().catch(() => {});
      slot.open--;
      retire(slot);
    }
  };

  const close = async () => {
    const s = current;
    current = null;
    if (s) await (await s.browser).close().catch(() => {});
  };
  return { render, close };
}
