// The operator console in a real browser: headless Chromium (from npm, test/browser.ts) driven by
// playwright-core against a real Harper (2 worker threads) with seeded rows. Every page test fails on any console error or
// uncaught exception in the page, so a drawing bug cannot hide behind a passing assertion.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { launchChromium } from '../browser.js';
import { ADMIN_PASS, ADMIN_USER, repoRoot, startHarper, type HarperInstance } from '../harness.js';
import { startTogether } from '../startTogether.js';
import { until } from '../wait.js';
import { SitemapSite, urlset } from '../sitemapSite.js';
import { key } from '../rowKeys.js';

const CONSOLE = '/prerender_admin/console';
const MIN = 60_000;
const HOUR = 60 * MIN;
const DUE_SITEMAP = 25;
const DUE_DISCOVERED = 15;
const DUE = DUE_SITEMAP + DUE_DISCOVERED;
// Not yet due, placed 10 and 20 minutes inside their hours so no hour boundary passes during the test.
const COMING = [
  { count: 10, at: 2 * HOUR + 10 * MIN, hour: 2 },
  { count: 15, at: 4 * HOUR + 20 * MIN, hour: 4 },
];
const artifacts = join(repoRoot, 'test-artifacts');

let h: HarperInstance;
let browser: Browser;
let context: BrowserContext;

async function seed(): Promise<void> {
  const config = await h.fetch('/prerender_admin/config', {
    body: {
      queue: { keeper: { publishInterval: 200, stateInterval: 1000 } },
      render: { routes: [{ name: 'products', match: 'prefix', path: '/p/' }] },
      // The hook below points at loopback; it is listed, never dialled (its fleet's queue has no rows).
      notify: { allowHttp: true, allowCidrs: ['127.0.0.1'] },
    },
  });
  assert.equal(config.status, 200, config.text);
  const now = Date.now();
  const targets = [
    ...Array.from({ length: DUE_SITEMAP }, (_, i) => ({
      url: `https://console.example.com/p/${i}`,
      fromSitemap: true,
      dueAt: now - 2 * MIN,
    })),
    ...Array.from({ length: DUE_DISCOVERED }, (_, i) => ({
      url: `https://console.example.com/blog/${i}`,
      dueAt: now - 2 * MIN,
    })),
    ...COMING.flatMap((c) =>
      Array.from({ length: c.count }, (_, i) => ({
        url: `https://console.example.com/later/${c.hour}/${i}`,
        fromSitemap: true,
        dueAt: now + c.at,
      })),
    ),
  ];
  const filed = await h.fetch('/render_queue/targets', { body: { targets } });
  assert.equal(filed.status, 200, filed.text);
  assert.equal(filed.json.upserted, targets.length, filed.text);
  const fleet = await h.fetch('/prerender_admin/fleets', {
    body: { name: 'console-fleet', queues: ['console-quiet'] },
  });
  assert.equal(fleet.status, 200, fleet.text);
  const hook = await h.fetch('/prerender_admin/hooks', {
    body: { fleetId: fleet.json.id, url: 'http://127.0.0.1:9/console-hook' },
  });
  assert.equal(hook.status, 200, hook.text);
  await until('queue-state with the seeded rows', async () => {
    const r = await h.fetch('/prerender_admin/queue-state');
    const total = COMING.reduce((a, c) => a + c.count, 0);
    return r.status === 200 && r.json.now.due === DUE && r.json.coming.next24h === total;
  });
}

before(
  async () => {
    // Harper and Chromium boot side by side: each takes seconds, and the test's budget is ~40 s. If either
    // fails, the other is stopped before the hook fails, so the run ends instead of hanging.
    const [harper, chrome] = await startTogether<[HarperInstance, Browser]>(
      { start: startHarper(), stop: (x) => x.destroy() },
      { start: launchChromium(), stop: (x) => x.close() },
    );
    h = harper;
    browser = chrome;
    context = await browser.newContext({
      httpCredentials: { username: ADMIN_USER, password: ADMIN_PASS },
      viewport: { width: 1280, height: 900 },
    });
    mkdirSync(artifacts, { recursive: true });
    await seed();
  },
  { timeout: 180_000 },
);

after(async () => {
  await browser?.close();
  await h?.destroy();
});

interface OpenPage {
  page: Page;
  /** Console errors and uncaught page errors, as readable lines. */
  problems: string[];
}

/** Opens the console in a fresh tab and records every console error and page error from the start. */
async function openConsole(allow: (text: string, url: string) => boolean = () => false): Promise<OpenPage> {
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const url = m.location().url;
    if (!allow(m.text(), url)) problems.push(`console error: ${m.text()} (${url})`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  const res = await page.goto(h.url + CONSOLE);
  assert.ok(res, 'the console page answered');
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'] ?? '', /^text\/html/);
  return { page, problems };
}

function byTestId(page: Page, id: string, extra = '') {
  return page.locator(`[data-testid="${id}"]${extra}`);
}

async function dataCounts(page: Page, id: string, extra = ''): Promise<number[]> {
  const out: number[] = [];
  for (const bar of await byTestId(page, id, extra).all())
    out.push(Number(await bar.getAttribute('data-count')));
  return out;
}

test('with the operator credentials the console shows the seeded due count and the charts match queue-state', async () => {
  const { page, problems } = await openConsole();
  try {
    await byTestId(page, 'due', `[data-value="${DUE}"]`).waitFor({ timeout: 10_000 });
    assert.equal(await byTestId(page, 'due').textContent(), String(DUE));
    assert.equal(await byTestId(page, 'due-sitemap').textContent(), String(DUE_SITEMAP));
    assert.equal(await byTestId(page, 'due-discovered').textContent(), String(DUE_DISCOVERED));
    assert.equal(await byTestId(page, 'state-banner').isVisible(), false);

    const bars = await dataCounts(page, 'coming-bar');
    const state = await h.fetch('/prerender_admin/queue-state');
    assert.equal(state.status, 200, state.text);
    assert.deepEqual(bars, state.json.coming.byHour);
    const seeded = new Array<number>(24).fill(0);
    for (const c of COMING) seeded[c.hour] = c.count;
    assert.deepEqual(bars, seeded);

    // Lateness bars, split by source, add up to the seeded due rows of each source.
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const lateSitemap = await dataCounts(page, 'lateness-bar', '[data-series="sitemap"]');
    const lateDiscovered = await dataCounts(page, 'lateness-bar', '[data-series="discovered"]');
    assert.deepEqual(lateSitemap, state.json.lateness.sitemap);
    assert.deepEqual(lateDiscovered, state.json.lateness.discovered);
    assert.equal(sum(lateSitemap), DUE_SITEMAP);
    assert.equal(sum(lateDiscovered), DUE_DISCOVERED);

    assert.equal(await byTestId(page, 'flow-bar').count(), 5 * 60);
    assert.ok((await byTestId(page, 'class-row').count()) >= 2, 'a row per seeded class');
    assert.equal(await byTestId(page, 'trust-exact').textContent(), 'yes');
    assert.equal(await byTestId(page, 'trust-phase').textContent(), 'live');
    assert.equal(await byTestId(page, 'fleet-row').count(), 1);
    assert.match((await byTestId(page, 'fleet-row').textContent()) ?? '', /console-fleet/);
    assert.equal(await byTestId(page, 'hook-health').textContent(), 'enabled');
    assert.match((await byTestId(page, 'stall-table').textContent()) ?? '', /no stalled queues/);
    assert.notEqual(await byTestId(page, 'lease-max').getAttribute('data-value'), null);

    await page.screenshot({ path: join(artifacts, 'console.png'), fullPage: true });
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});

test('the pause button flips the shown status to paused and resume flips it back, as overview says', async () => {
  const { page, problems } = await openConsole();
  try {
    await byTestId(page, 'node-status', ':text-matches("^(queued|empty)$")').waitFor({ timeout: 10_000 });
    await byTestId(page, 'pause-button').click();
    await byTestId(page, 'node-status', ':text-is("paused")').waitFor({ timeout: 10_000 });
    await until('overview to report the pause', async () => {
      const r = await h.fetch('/prerender_admin/overview', { fresh: true });
      return r.json.paused === true && r.json.status === 'paused';
    });

    await byTestId(page, 'resume-button').click();
    await byTestId(page, 'node-status', ':text-is("queued")').waitFor({ timeout: 10_000 });
    await until('overview to report the resume', async () => {
      const r = await h.fetch('/prerender_admin/overview', { fresh: true });
      return r.json.paused === false && r.json.status === 'queued';
    });
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
    // Never leave the node paused for a later test, whatever failed above.
    await h.fetch('/prerender_admin/resume', { body: { scope: 'all' } });
  }
});

test('when queue-state answers 503 the console blanks every count and shows the phase and the error', async () => {
  // The browser logs each non-2xx fetch as a console error; the mocked 503 is the one expected here.
  const expected503 = (text: string, url: string) =>
    url.endsWith('/prerender_admin/queue-state') && /status of 503/.test(text);
  const { page, problems } = await openConsole(expected503);
  try {
    // Live numbers first, so the test proves they are taken down — not merely never drawn. Checked: a
    // console.js that skips blanking when queue-state fails (keeps the last counts) fails at 'due is blank'.
    await byTestId(page, 'due', `[data-value="${DUE}"]`).waitFor({ timeout: 10_000 });
    await page.route('**/prerender_admin/queue-state', (route) =>
      route.fulfill({
        status: 503,
        contentType: 'application/json',
        headers: { 'retry-after': '5' },
        // The shape the server sends while the keeper loads (services/http/routes/queue.ts).
        body: JSON.stringify({
          error: 'the keeper cannot vouch for its numbers (loading)',
          code: 'unavailable',
          now: { inFlight: 3, paused: false, status: 'unready' },
          trust: { live: false, exact: false, phase: 'loading' },
        }),
      }),
    );
    await byTestId(page, 'state-banner').waitFor({ state: 'visible', timeout: 10_000 });
    assert.equal(await byTestId(page, 'state-phase').textContent(), 'loading');
    assert.match((await byTestId(page, 'state-error').textContent()) ?? '', /cannot vouch/);
    assert.equal(await byTestId(page, 'trust-phase').textContent(), 'loading');
    assert.equal(await byTestId(page, 'trust-exact').textContent(), 'no');
    for (const id of [
      'due',
      'in-flight',
      'unclaimed',
      'due-sitemap',
      'due-discovered',
      'due-urgent',
      'next15m',
      'next60m',
      'next24h',
      'trust-repaired',
    ]) {
      assert.equal(await byTestId(page, id).textContent(), '—', `${id} is blank`);
      assert.equal(await byTestId(page, id).getAttribute('data-value'), null, `${id} carries no value`);
    }
    for (const id of ['trust-publish', 'trust-verify', 'trust-rows', 'trust-state-age'])
      assert.equal(await byTestId(page, id).textContent(), '—', `${id} is blank`);
    assert.equal(await byTestId(page, 'coming-bar').count(), 0);
    assert.equal(await byTestId(page, 'lateness-bar').count(), 0);
    assert.equal(await byTestId(page, 'flow-bar').count(), 0);
    assert.equal(await byTestId(page, 'class-row').count(), 0);
    assert.equal(await page.locator('#panel-now.unavailable').count(), 1);
    await page.screenshot({ path: join(artifacts, 'console-503.png'), fullPage: true });

    // And the numbers come back with the keeper.
    await page.unroute('**/prerender_admin/queue-state');
    await byTestId(page, 'due', `[data-value="${DUE}"]`).waitFor({ timeout: 10_000 });
    assert.equal(await byTestId(page, 'state-banner').isVisible(), false);
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});

test('the console serves only its allow-listed assets, with their content types, and only to an operator', async () => {
  const page = await h.fetch(CONSOLE);
  assert.equal(page.status, 200);
  assert.match(page.headers['content-type'] ?? '', /^text\/html/);
  assert.match(page.text, /src="\/prerender_admin\/console\/console\.js"/);
  assert.match(page.text, /href="\/prerender_admin\/console\/console\.css"/);
  assert.match(String(page.headers['content-security-policy']), /frame-ancestors 'none'/);

  const js = await h.fetch(`${CONSOLE}/console.js`);
  assert.equal(js.status, 200);
  assert.match(js.headers['content-type'] ?? '', /^text\/javascript/);
  const css = await h.fetch(`${CONSOLE}/console.css`);
  assert.equal(css.status, 200);
  assert.match(css.headers['content-type'] ?? '', /^text\/css/);

  for (const path of [
    `${CONSOLE}/console.html`,
    `${CONSOLE}/..%2F..%2Fconfig.yaml`,
    `${CONSOLE}/%2E%2E%2Fpackage.json`,
    `${CONSOLE}/web/console.js`,
    `${CONSOLE}/console.js/x`,
  ]) {
    const r = await h.fetch(path);
    assert.equal(r.status, 404, `${path} answered ${r.status}`);
    assert.equal(r.json?.code, 'not_found', path);
  }

  const anonymous = await h.fetch(CONSOLE, { auth: null });
  assert.equal(anonymous.status, 401);
  // Harper's challenge is what makes a browser ask the operator for credentials in the first place.
  assert.match(String(anonymous.headers['www-authenticate']), /^Basic/);
  assert.equal((await h.fetch(`${CONSOLE}/console.js`, { auth: null })).status, 401);
});

test('the console lists the failing rows, worst first, with their last error', async () => {
  const url = 'https://console.example.com/failing/1';
  const filed = await h.fetch('/render_queue/targets', {
    body: { targets: [{ url, dueAt: Date.now() - MIN }] },
  });
  assert.equal(filed.status, 200, filed.text);
  const job = await until('the failing row claimed', async () => {
    const c = await h.fetch('/render_queue/claim', { body: { limit: 25, queues: ['unrouted'] } });
    return (c.json as Array<{ id: string; url: string; leaseToken: string }>).find((j) => j.url === url);
  });
  assert.equal(job.id, key(url), 'the job is the desktop row of its URL');
  const r = await h.fetch('/render_queue/job_result', {
    body: {
      id: key(url),
      leaseToken: job.leaseToken,
      outcome: 'failed',
      statusCode: 502,
      error: { name: 'NavError', message: 'origin said 502' },
    },
  });
  assert.equal(r.status, 200, r.text);
  const { page, problems } = await openConsole();
  try {
    const row = byTestId(page, 'failing-row', `:has-text("${url}")`);
    await row.waitFor({ timeout: 10_000 });
    const text = (await row.textContent()) ?? '';
    assert.match(text, /NavError: origin said 502/);
    assert.match(text, /502/);
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});

test('the console lists the sitemaps with their state, and a failed last walk with its reason', async () => {
  const site = new SitemapSite();
  await site.start();
  try {
    const cfg = await h.fetch('/prerender_admin/config', {
      body: { sitemaps: { allowHttp: true, allowCidrs: ['127.0.0.1'] } },
    });
    assert.equal(cfg.status, 200, cfg.text);
    site.set('/good.xml', urlset([{ loc: site.url('/page') }]));
    site.set('/broken.xml', '<urlset><url><loc>oops<</urlset>');
    for (const path of ['/good.xml', '/broken.xml']) {
      const r = await h.fetch('/render_queue/sitemaps', { body: { url: site.url(path) } });
      assert.equal(r.status, 202, r.text);
    }
    await until('both walks to end', async () => {
      const l = (await h.fetch('/render_queue/sitemaps')).json as { sitemaps: Array<{ state: string }> };
      return l.sitemaps.length === 2 && l.sitemaps.every((s) => s.state !== 'walking');
    });
    const { page, problems } = await openConsole();
    try {
      const broken = byTestId(page, 'sitemap-row', `:has-text("${site.url('/broken.xml')}")`);
      await broken.waitFor({ timeout: 10_000 });
      assert.match((await broken.textContent()) ?? '', /failed.*malformed/);
      const good = byTestId(page, 'sitemap-row', `:has-text("${site.url('/good.xml')}")`);
      assert.match((await good.textContent()) ?? '', /idle/);
      assert.match((await byTestId(page, 'sitemaps-note').textContent()) ?? '', /1 of 2 failed/);
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  } finally {
    await site.stop();
  }
});

test('the rows view finds a URL by prefix and shows its lease; release and render now both take effect', async () => {
  const base = 'https://console.example.com/rows/';
  const cfg = await h.fetch('/prerender_admin/config', {
    body: {
      render: {
        routes: [
          { name: 'products', match: 'prefix', path: '/p/' },
          { name: 'console-rows', match: 'prefix', path: '/rows/' },
        ],
      },
    },
  });
  assert.equal(cfg.status, 200, cfg.text);
  const filed = await h.fetch('/render_queue/targets', {
    body: {
      targets: [
        { url: `${base}1`, dueAt: Date.now() - MIN },
        { url: `${base}2`, dueAt: Date.now() + 24 * HOUR },
      ],
    },
  });
  assert.equal(filed.status, 200, filed.text);
  const claimRows = async () => {
    const c = await h.fetch('/render_queue/claim', { body: { limit: 25, queues: ['console-rows'] } });
    assert.equal(c.status, 200, c.text);
    return c.json as Array<{ id: string; leaseToken: string }>;
  };
  const leasedKey = `${base}1|desktop`;
  const job = await until('rows/1 claimed', async () => (await claimRows()).find((j) => j.id === leasedKey));
  const { page, problems } = await openConsole();
  try {
    await byTestId(page, 'rows-prefix').fill(base);
    await byTestId(page, 'rows-search').click();
    const leasedRow = byTestId(page, 'rows-row', `[data-key="${leasedKey}"]`);
    await leasedRow.waitFor({ timeout: 10_000 });
    assert.match((await leasedRow.locator('[data-testid="rows-lease"]').textContent()) ?? '', /^leased/);
    assert.equal(await byTestId(page, 'rows-row').count(), 2);

    await leasedRow.locator('[data-testid="rows-pick"]').check();
    await byTestId(page, 'rows-release').click();
    await byTestId(page, 'rows-message', ':text-matches("^release: 1 of 1")').waitFor({ timeout: 10_000 });
    const late = await h.fetch('/render_queue/job_result', {
      body: {
        id: job.id,
        leaseToken: job.leaseToken,
        outcome: 'rendered',
        statusCode: 200,
        body: '<p>x</p>',
      },
    });
    assert.equal(late.status, 409, late.text);
    assert.equal((late.json as { code: string }).code, 'superseded');

    const laterKey = `${base}2|desktop`;
    const laterRow = byTestId(page, 'rows-row', `[data-key="${laterKey}"]`);
    const stateOf = async (row: typeof laterRow) => (await row.locator('td').nth(4).textContent()) ?? '';
    assert.equal(await stateOf(laterRow), 'scheduled');
    await laterRow.locator('[data-testid="rows-pick"]').check();
    await byTestId(page, 'rows-render-now').click();
    await byTestId(page, 'rows-message', ':text-matches("^render now: 1 of 1")').waitFor({ timeout: 10_000 });
    await until('rows/2 shown due', async () => (await stateOf(laterRow)) === 'due');
    // Both take effect: the released row and the row rendered now are granted.
    const granted = new Set<string>();
    await until(
      'both rows granted',
      async () => {
        for (const j of await claimRows()) granted.add(j.id);
        return granted.has(leasedKey) && granted.has(laterKey);
      },
      20_000,
    );
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});

test('the rows view filters by state, pages with next and first, and deletes the rows ticked', async () => {
  const base = 'https://console.example.com/pages/';
  // 55 URLs due tomorrow: more than one page of 50.
  const targets = Array.from({ length: 55 }, (_, i) => ({
    url: `${base}${String(i).padStart(2, '0')}`,
    dueAt: Date.now() + 24 * HOUR,
  }));
  const filed = await h.fetch('/render_queue/targets', { body: { targets } });
  assert.equal(filed.status, 200, filed.text);
  const { page, problems } = await openConsole();
  page.on('dialog', (d) => void d.accept());
  try {
    await byTestId(page, 'rows-prefix').fill(base);
    await byTestId(page, 'rows-search').click();
    await byTestId(page, 'rows-row', `[data-key="${base}00|desktop"]`).waitFor({ timeout: 10_000 });
    assert.equal(await byTestId(page, 'rows-row').count(), 50);
    await byTestId(page, 'rows-next').click();
    await byTestId(page, 'rows-row', `[data-key="${base}50|desktop"]`).waitFor({ timeout: 10_000 });
    assert.equal(await byTestId(page, 'rows-row').count(), 5);
    assert.equal(await byTestId(page, 'rows-next').isDisabled(), true);
    await byTestId(page, 'rows-first').click();
    await byTestId(page, 'rows-row', `[data-key="${base}00|desktop"]`).waitFor({ timeout: 10_000 });

    // None of them is due: the due filter under this prefix lists none.
    await byTestId(page, 'rows-state').selectOption('due');
    await byTestId(page, 'rows-search').click();
    await byTestId(page, 'rows-note', ':text-matches("^0 row")').waitFor({ timeout: 10_000 });
    await byTestId(page, 'rows-state').selectOption('all');
    await byTestId(page, 'rows-search').click();

    const gone = byTestId(page, 'rows-row', `[data-key="${base}01|desktop"]`);
    await gone.waitFor({ timeout: 10_000 });
    await gone.locator('[data-testid="rows-pick"]').check();
    await byTestId(page, 'rows-delete').click();
    await byTestId(page, 'rows-message', ':text-matches("^delete: 1 of 1")').waitFor({ timeout: 10_000 });
    await gone.waitFor({ state: 'detached', timeout: 10_000 });
    const r = await h.fetch(`/prerender_admin/rows?prefix=${encodeURIComponent(`${base}01`)}`);
    assert.deepEqual((r.json as { rows: unknown[] }).rows, []);
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});
