// A device added to and removed from a node that holds URLS rows of one device (2 worker threads), on
// scale-mix.ts's URLs (20 queues, cadences 1 h–30 d, 10 % due, URLs of 60–200 bytes), filed in-process
// through the seed route (scale-probe.ts), then, each phase between two load-average readings:
//   add       POST /prerender_admin/config with render.deviceTypes [desktop, mobile]: until queue-state
//             shows the add duty done and the keeper holds every mobile row: wall time, rows filed and
//             rows/s, the rows in the record store after it;
//   pages     DRAIN / 2 more URLs (a queue of their own, so DRAIN more rows) filed due, claimed by a fleet
//             bound to that queue and reported rendered with a 2 KB body, so the removal has DRAIN / 2
//             mobile pages to delete (not a figure of its own);
//   drop      render.deviceTypes back to [desktop]: until the keeper holds the desktop rows only and
//             queue-state counts the mobile rows as orphaned (the keeper's sliced drop, then the
//             verification walk a device change starts);
//   remove    DELETE /prerender_admin/devices/mobile: until queue-state shows the removal done: wall
//             time, rows and pages deleted (URLS + DRAIN / 2 rows), rows/s.
// For each of add, drop and remove: every hold of worker 0's event loop ≥ 50 ms inside the phase (the
// probe's 5 ms tick firing late), by the duties whose run overlapped it (the keeper's drop is no duty:
// its holds show under whatever duty ran beside it, or `none`), and the device duty's longest run and
// longest first synchronous slice so far. A hold over 100 ms is what the device duties must never do.
// PROFILE=1 also profiles every worker through each phase (scratch-component.ts profiledRun), prints each
// worker's summary and keeps the profiles in the folder it names.
// Run: npm run build && flock /work/bench.lock node dist/bench/devices.js
//   env: URLS (1000000), DRAIN (4000), PROFILE (0)
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import type { Granted } from './claim-drain.js';
import { fleetClient, loadavg, machine, overview, sleep, until } from './lib.js';
import { dutyFigures, fileSeed, keeperLive, readStalls, stallSummary, storage } from './probe-files.js';
import { scaleRoutes } from './scale-mix.js';
import { profiledRun, removeScratch, scratchComponent } from './scratch-component.js';

const URLS = Number(process.env.URLS ?? 1_000_000);
const DRAIN = Number(process.env.DRAIN ?? 4000);
const PAGE_BYTES = 2000;
const PROFILE = process.env.PROFILE === '1';
const ADDED = 'mobile';
const pagesFleet: Credentials = { username: 'bench-pages', password: 'bench-pages-pass' };
const ms = (x: number) => Math.round(x);

function emit(phase: string, data: Record<string, unknown>): void {
  console.log(JSON.stringify({ phase, urls: URLS, ...data }));
}

async function configure(h: HarperInstance, body: unknown) {
  const r = await h.fetch('/prerender_admin/config', { body });
  if (r.status !== 200) throw new Error(`config: ${r.status} ${r.text}`);
}

interface DutyView {
  kind: string;
  device: string | null;
  phase: string;
  rows: number;
  pages: number;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function devicesBlock(h: HarperInstance): Promise<any> {
  const r = await h.fetch('/prerender_admin/queue-state').catch(() => null);
  return r?.status === 200 ? r.json.devices : undefined;
}

async function dutyDone(h: HarperInstance, kind: string, timeoutMs = 1_800_000): Promise<DutyView> {
  return until(
    `the ${kind} duty of ${ADDED} done`,
    async () => {
      const d = await devicesBlock(h);
      return (d?.duties as DutyView[] | undefined)?.find(
        (x) => x.kind === kind && x.device === ADDED && x.phase === 'done',
      );
    },
    timeoutMs,
    250,
  );
}

async function keeperRowsAtMost(h: HarperInstance, rows: number) {
  return until(
    `the keeper holding at most ${rows} rows`,
    async () => {
      const n = Number((await overview(h).catch(() => undefined))?.keeper?.stats?.rows ?? Infinity);
      return n <= rows ? n : undefined;
    },
    600_000,
    100,
  );
}

/** Runs one phase between two load-average readings, with worker 0's holds inside it. */
async function phase(
  name: string,
  probeDir: string,
  profileDir: string | undefined,
  run: () => Promise<Record<string, unknown>>,
) {
  await sleep(2500); // the probe writes a hold 200 ms after it; let the last phase's land first
  readStalls(probeDir);
  const loadBefore = loadavg();
  const t0 = performance.now();
  const out = await (profileDir ? profiledRun(profileDir, name, run, 15) : run());
  const wallMs = ms(performance.now() - t0);
  await sleep(2500);
  const stalls = stallSummary(readStalls(probeDir));
  const duty = (dutyFigures(probeDir).worker0 as Record<string, unknown> | undefined)?.devices ?? null;
  emit(name, { wallMs, ...out, stalls, devicesDuty: duty, loadBefore, loadAfter: loadavg() });
}

/**
 * Pages for the removal to delete: DRAIN / 2 URLs of their own queue filed due (a row per device each),
 * claimed by a fleet bound to that queue and reported rendered with a small body each.
 */
async function renderPages(h: HarperInstance) {
  const urls = Array.from({ length: Math.ceil(DRAIN / 2) }, (_, i) => ({
    url: `https://www.shop-0.example.com/pages/p-${i}`,
    dueAt: Date.now() - 60_000,
  }));
  for (let i = 0; i < urls.length; i += 1000) {
    const r = await h.fetch('/render_queue/targets', { body: { targets: urls.slice(i, i + 1000) } });
    if (r.status !== 200) throw new Error(`filing the page URLs: ${r.status} ${r.text.slice(0, 300)}`);
  }
  const c = fleetClient(h, pagesFleet);
  let jobs = 0;
  let mobile = 0;
  const body = `<html><body>${'x'.repeat(PAGE_BYTES)}</body></html>`;
  try {
    while (jobs < DRAIN) {
      const r = await c.post('/render_queue/claim', { limit: 25 });
      const granted = (r.status === 200 ? r.json : []) as Granted[];
      if (granted.length === 0) {
        await sleep(50);
        continue;
      }
      const results = granted.map((j) => ({
        id: j.id,
        leaseToken: j.leaseToken,
        outcome: 'rendered',
        statusCode: 200,
        contentType: 'text/html',
        body,
      }));
      const res = await c.post('/render_queue/job_results', { results });
      if (res.status !== 200) throw new Error(`job_results: ${res.status} ${JSON.stringify(res.json)}`);
      jobs += granted.length;
      mobile += granted.filter((j) => j.id.endsWith(`|${ADDED}`)).length;
    }
  } finally {
    await c.close();
  }
  return { urls: urls.length, jobs, mobilePages: mobile, pageBytes: PAGE_BYTES };
}

const probeDir = mkdtempSync(join(tmpdir(), 'qk-devices-probe-'));
const profileDir = PROFILE ? mkdtempSync(join(tmpdir(), 'qk-devices-profile-')) : undefined;
if (profileDir) console.log(JSON.stringify({ profiles: profileDir }));
const component = scratchComponent({ keeper: true, scaleProbe: true, profileDir });
console.log(
  JSON.stringify({
    bench: 'devices',
    ...machine(),
    uptime: execFileSync('uptime', { encoding: 'utf8' }).trim(),
    urls: URLS,
    drain: DRAIN,
  }),
);
let h: HarperInstance | undefined;
try {
  h = await startHarper({
    componentDir: component,
    logLevel: 'warn',
    env: { QK_SCALE_PROBE_DIR: probeDir },
    readyTimeoutMs: 600_000,
  });
  await h.addUser(pagesFleet.username, pagesFleet.password, 'render_fleet');
  await configure(h, {
    render: {
      routes: [...scaleRoutes(), { name: 'pages', match: 'prefix', path: '/pages/' }],
      deviceTypes: ['desktop'],
    },
    queue: { keeper: { publishInterval: 1000 } },
  });
  const f = await h.fetch('/prerender_admin/fleets', {
    body: { name: 'pages', queues: ['pages'], username: pagesFleet.username },
  });
  if (f.status !== 200) throw new Error(`fleet: ${f.status} ${f.text}`);
  const f0 = performance.now();
  const now = Date.now();
  await fileSeed(h, URLS, now);
  await keeperLive(h, URLS);
  emit('seed', { seconds: ms((performance.now() - f0) / 1000), record: (await storage(h)).record });

  await phase('add', probeDir, profileDir, async () => {
    const t0 = performance.now();
    await configure(h!, { render: { deviceTypes: ['desktop', ADDED] } });
    const d = await dutyDone(h!, 'add');
    const doneMs = performance.now() - t0;
    await keeperLive(h!, 2 * URLS);
    const heldMs = performance.now() - t0;
    return {
      dutyDoneMs: ms(doneMs),
      keeperHoldsAllMs: ms(heldMs),
      rowsFiled: d.rows,
      rowsPerSec: ms((d.rows / doneMs) * 1000),
      recordEntries: (await storage(h!)).record.entries,
    };
  });

  const pages = await renderPages(h);
  emit('pages', pages);
  const urls = URLS + pages.urls;

  await phase('drop', probeDir, profileDir, async () => {
    const t0 = performance.now();
    await configure(h!, { render: { deviceTypes: ['desktop'] } });
    const held = await keeperRowsAtMost(h!, urls);
    const droppedMs = performance.now() - t0;
    const orphaned = await until(
      'queue-state counting the mobile rows as orphaned',
      async () => {
        const n = (await devicesBlock(h!))?.orphanedRows;
        return typeof n === 'number' && n >= urls ? n : undefined;
      },
      600_000,
      500,
    );
    return {
      keeperDroppedMs: ms(droppedMs),
      keeperRows: held,
      orphanedCountedMs: ms(performance.now() - t0),
      orphanedRows: orphaned,
    };
  });

  await phase('remove', probeDir, profileDir, async () => {
    const t0 = performance.now();
    const r = await h!.fetch(`/prerender_admin/devices/${ADDED}`, { method: 'DELETE' });
    if (r.status !== 202) throw new Error(`device removal: ${r.status} ${r.text}`);
    const d = await dutyDone(h!, 'remove');
    const doneMs = performance.now() - t0;
    return {
      dutyDoneMs: ms(doneMs),
      rowsDeleted: d.rows,
      pagesDeleted: d.pages,
      rowsPerSec: ms((d.rows / doneMs) * 1000),
    };
  });
} finally {
  const out = h?.output() ?? '';
  const errors = out.split('\n').filter((l) => /\berror\b|heap|out of memory/i.test(l));
  if (errors.length) emit('harper-log', { lines: errors.length, last: errors.slice(-5) });
  await h?.destroy();
  removeScratch(component);
  rmSync(probeDir, { recursive: true, force: true });
}
console.log(JSON.stringify({ done: true, uptime: execFileSync('uptime', { encoding: 'utf8' }).trim() }));
