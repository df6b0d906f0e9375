// The persistent channel against the two HTTP paths, in the same run: the same number
// of due jobs drained in full (granted and reported) three ways, interleaved per round:
//   channel  one WebSocket per fleet process at /render_queue/channel, CREDITS credits each; every push is
//            reported at once in one message that also gives its credits back
//   next     POST /render_queue/next: the previous claim's results and a claim of 25 in one round trip
//   claim    POST /render_queue/claim (25), then one job_results batch of its 25 (bench/claim-drain.ts)
// CLIENTS connections each (one keep-alive connection or one socket per fleet process), 2 Harper worker
// threads. Each drain files its rows due, waits until the keeper counts them, drains, and deletes them.
// Reports the medians of RUNS rounds and the load (`uptime`) before and after each drain.
// Run: npm run build && node dist/bench/channel.js   (RUNS=3 JOBS=20000 CLIENTS=24 CREDITS=25 by default)
import { execFileSync } from 'node:child_process';
import { WebSocket } from 'undici';
import { basicAuth, startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import { drainClaims, fileToClaim } from './claim-drain.js';
import {
  benchUrl,
  cpuMeter,
  deleteAll,
  fleetClient,
  loadavg,
  machine,
  median,
  overview,
  until,
} from './lib.js';

const RUNS = Number(process.env.RUNS ?? 3);
const JOBS = Number(process.env.JOBS ?? 20_000);
const CLIENTS = Number(process.env.CLIENTS ?? 24);
const CREDITS = Number(process.env.CREDITS ?? 25);
const LIMIT = 25;
/** A drain that moves nothing for this long is stuck: it reports what it got instead of hanging. */
const STUCK_MS = 30_000;
const CONFIG = { queue: { keeper: { publishInterval: 1000, stateInterval: 1000 }, jobLeaseTime: 120_000 } };

const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };

interface Job {
  id: string;
  leaseToken: string;
}

const rendered = (j: Job) => ({ id: j.id, leaseToken: j.leaseToken, outcome: 'rendered', statusCode: 200 });

interface Drain {
  jobs: number;
  distinct: number;
  dups: number;
  notAccepted: number;
  jobsPerSec: number;
  spanMs: number;
  complete: boolean;
  [k: string]: unknown;
}

/** The figures of one finished drain (what every mode reports). */
function drainOf(
  d: {
    granted: number;
    distinct: number;
    dups: number;
    notAccepted: number;
    accepted: number;
    target: number;
    spanMs: number;
  },
  cpu: Record<string, unknown>,
): Drain {
  return {
    jobs: d.granted,
    distinct: d.distinct,
    dups: d.dups,
    notAccepted: d.notAccepted,
    complete: d.accepted >= d.target,
    jobsPerSec: Math.round((d.accepted / d.spanMs) * 1000),
    spanMs: Math.round(d.spanMs),
    ...cpu,
  };
}

/** `uptime`'s line as the machine printed it (the load the numbers were taken under). */
function uptime(): string {
  try {
    return execFileSync('uptime', { encoding: 'utf8' }).trim();
  } catch {
    return `loadavg ${loadavg()}`;
  }
}

async function channelDrain(h: HarperInstance, target: number): Promise<Drain> {
  const seen = new Set<string>();
  let dups = 0;
  let accepted = 0;
  let notAccepted = 0;
  let granted = 0;
  const meter = cpuMeter({ harper: h.pid });
  const sockets: WebSocket[] = [];
  const t0 = performance.now();
  let lastMove = t0;
  let lastResult = NaN;
  await new Promise<void>((resolve, reject) => {
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      clearInterval(watchdog);
      resolve();
    };
    const watchdog = setInterval(() => {
      if (performance.now() - lastMove > STUCK_MS) finish();
    }, 1000);
    for (let i = 0; i < CLIENTS; i++) {
      const ws = new WebSocket(h.url.replace(/^http/, 'ws') + '/render_queue/channel', {
        headers: { authorization: basicAuth(fleet) },
      });
      sockets.push(ws);
      ws.addEventListener('message', (e) => {
        const f = JSON.parse(String(e.data)) as {
          type?: string;
          jobs?: Job[];
          results?: Array<{ accepted: boolean }>;
          code?: string;
        };
        if (f.type === 'ready') ws.send(JSON.stringify({ credits: CREDITS }));
        else if (f.type === 'jobs' && f.jobs) {
          lastMove = performance.now();
          for (const j of f.jobs) {
            if (seen.has(j.id)) dups++;
            else seen.add(j.id);
          }
          granted += f.jobs.length;
          ws.send(JSON.stringify({ results: f.jobs.map(rendered), credits: f.jobs.length }));
        } else if (f.type === 'ack' && f.results) {
          for (const r of f.results) {
            if (r.accepted) accepted++;
            else notAccepted++;
          }
          if (f.results.length > 0) lastResult = lastMove = performance.now();
          if (accepted + notAccepted >= target) finish();
        } else if (f.code) reject(new Error(`channel error frame: ${JSON.stringify(f)}`));
      });
      ws.addEventListener('close', (e) => {
        if (!finished) reject(new Error(`channel closed mid-drain: ${e.code} ${e.reason}`));
      });
    }
  });
  const spanMs = (Number.isNaN(lastResult) ? performance.now() : lastResult) - t0;
  for (const ws of sockets) ws.close();
  return drainOf({ granted, distinct: seen.size, dups, notAccepted, accepted, target, spanMs }, meter());
}

async function nextDrain(h: HarperInstance, target: number): Promise<Drain> {
  const seen = new Set<string>();
  let dups = 0;
  let accepted = 0;
  let notAccepted = 0;
  let granted = 0;
  let done = false;
  const meter = cpuMeter({ harper: h.pid });
  const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
  const t0 = performance.now();
  let lastMove = t0;
  let lastResult = NaN;
  const count = (json: unknown) => {
    const results = (json as { results?: Array<{ accepted: boolean }> } | undefined)?.results ?? [];
    for (const r of results) {
      if (r.accepted) accepted++;
      else notAccepted++;
    }
    if (results.length > 0) lastResult = lastMove = performance.now();
  };
  await Promise.all(
    clients.map(async (c) => {
      let pending: Job[] = [];
      while (!done) {
        const r = await c.post('/render_queue/next', { results: pending.map(rendered), limit: LIMIT });
        if (r.status !== 200) throw new Error(`next: ${r.status} ${JSON.stringify(r.json)}`);
        count(r.json);
        pending = (r.json as { jobs: Job[] }).jobs;
        for (const j of pending) {
          if (seen.has(j.id)) dups++;
          else seen.add(j.id);
        }
        granted += pending.length;
        if (pending.length > 0) lastMove = performance.now();
        if (granted >= target || performance.now() - lastMove > STUCK_MS) done = true;
        // An empty answer: the set is used up until the next publish; a real fleet backs off briefly.
        if (pending.length === 0 && !done) await new Promise((res) => setTimeout(res, 10));
      }
      if (pending.length > 0)
        count((await c.post('/render_queue/job_results', { results: pending.map(rendered) })).json);
    }),
  );
  const spanMs = (Number.isNaN(lastResult) ? performance.now() : lastResult) - t0;
  await Promise.all(clients.map((c) => c.close()));
  return drainOf({ granted, distinct: seen.size, dups, notAccepted, accepted, target, spanMs }, meter());
}

async function claimDrain(h: HarperInstance, target: number): Promise<Drain> {
  const clients = Array.from({ length: CLIENTS }, () => fleetClient(h, fleet));
  const r = await drainClaims(h, clients, { target, withResults: true });
  await Promise.all(clients.map((c) => c.close()));
  return r as unknown as Drain;
}

const MODES: Record<string, (h: HarperInstance, target: number) => Promise<Drain>> = {
  channel: channelDrain,
  next: nextDrain,
  claim: claimDrain,
};

async function main(): Promise<void> {
  const h = await startHarper({ logLevel: 'warn' });
  try {
    await h.addUser(fleet.username, fleet.password, 'render_fleet');
    const c = await h.fetch('/prerender_admin/config', { body: CONFIG });
    if (c.status !== 200) throw new Error(`config: ${c.status} ${c.text}`);
    const rows: Array<Record<string, unknown>> = [];
    for (let round = 1; round <= RUNS; round++) {
      for (const [mode, drain] of Object.entries(MODES)) {
        const urls = Array.from({ length: JOBS }, (_, i) => benchUrl(`${mode}${round}`, i));
        await fileToClaim(h, urls, Date.now() - 120_000);
        const before = uptime();
        const r = await drain(h, JOBS);
        const row = { mode, round, ...r, uptimeBefore: before, uptimeAfter: uptime() };
        rows.push(row);
        console.log(JSON.stringify(row));
        await deleteAll(h, urls);
        await until('the drained rows dropped', async () =>
          Number((await overview(h)).keeper.dueCount) === 0 ? true : undefined,
        );
      }
    }
    const summary: Record<string, unknown> = {};
    for (const mode of Object.keys(MODES)) {
      const mine = rows.filter((r) => r.mode === mode);
      summary[mode] = {
        medianJobsPerSec: median(mine.map((r) => Number(r.jobsPerSec))),
        rounds: mine.map((r) => r.jobsPerSec),
        dups: mine.reduce((n, r) => n + Number(r.dups), 0),
        notAccepted: mine.reduce((n, r) => n + Number(r.notAccepted), 0),
        complete: mine.every((r) => r.complete === true),
      };
    }
    const ch = (summary.channel as { medianJobsPerSec: number }).medianJobsPerSec;
    const nx = (summary.next as { medianJobsPerSec: number }).medianJobsPerSec;
    const cl = (summary.claim as { medianJobsPerSec: number }).medianJobsPerSec;
    console.log(
      JSON.stringify(
        {
          machine: machine(),
          jobs: JOBS,
          clients: CLIENTS,
          credits: CREDITS,
          runs: RUNS,
          summary,
          channelOverNext: Math.round((ch / nx) * 100) / 100,
          channelOverClaim: Math.round((ch / cl) * 100) / 100,
        },
        null,
        2,
      ),
    );
  } finally {
    await h.destroy();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
