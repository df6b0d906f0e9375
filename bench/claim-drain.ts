// The fleet side of the claim benchmarks: N clients, each on its own keep-alive connection, claiming
// with limit 25 until a target number of jobs has been granted, optionally posting one job_results
// batch per claim. Counts every id granted twice (a duplicate: no lease in these runs can expire). With a
// due instant (a burst), also counts the claims answered empty while rows of the burst were still due.
import { startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import {
  benchUrl,
  claimCounters,
  cpuMeter,
  fileAll,
  keeperStats,
  overview,
  sleep,
  summarize,
  until,
  type FleetClient,
} from './lib.js';

const LIMIT = 25;
/** An empty answer means the set is used up until the keeper's next publish; a real fleet backs off. */
const EMPTY_BACKOFF_MS = 10;
/** A drain that grants nothing for this long is stuck: report what it got instead of hanging. */
const STUCK_MS = 30_000;

export interface Granted {
  id: string;
  leaseToken: string;
}

// The side by side's node (claims-vs-bullmq.ts, drain-rounds.ts). maxLeases big enough that 100,000
// unreported leases fit (the default 4,096 would refuse grants past ~4k) with room to spare: at 131,072
// (100k live = 76 % of maxLeases) a few keys per 100k find their probe window full and stay refused
// until a slot frees, which stalls a drain's tail (measured).
export const SIDE_BY_SIDE_MAX_LEASES = 262_144;
// Claim-only leases of one round must be dead before the next round's 100,000 arrive.
const SIDE_BY_SIDE_LEASE_MS = 120_000;
export const SIDE_BY_SIDE_CONFIG = {
  queue: { keeper: { publishInterval: 1000, stateInterval: 1000 }, jobLeaseTime: SIDE_BY_SIDE_LEASE_MS },
};

/**
 * Harper's own settings for an experiment, from `BENCH_HARPER_CONFIG` (JSON merged into Harper's config,
 * e.g. `{"storage":{"writeAsync":true}}` to see what the per-commit sync costs). Unset: Harper's defaults,
 * which is what every recorded side by side uses.
 */
function benchHarperConfig(): Record<string, unknown> | undefined {
  const raw = process.env.BENCH_HARPER_CONFIG;
  if (raw === undefined || raw === '') return undefined;
  const parsed: unknown = JSON.parse(raw);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new Error('BENCH_HARPER_CONFIG must be a JSON object');
  return parsed as Record<string, unknown>;
}

/**
 * Boots the side by side's node: `fleet` added as a render_fleet user, maxLeases set (a restart key,
 * so the node is started a second time on the same root), then the intervals and lease time.
 */
export async function bootSideBySide(fleet: Credentials, componentDir?: string): Promise<HarperInstance> {
  const harperConfig = benchHarperConfig();
  const first = await startHarper({ logLevel: 'warn', componentDir, harperConfig });
  try {
    await first.addUser(fleet.username, fleet.password, 'render_fleet');
    const r = await first.fetch('/prerender_admin/config', {
      body: { queue: { maxLeases: SIDE_BY_SIDE_MAX_LEASES } },
    });
    if (r.status !== 200) throw new Error(`config: ${r.status} ${r.text}`);
  } finally {
    await first.stop();
  }
  const h = await startHarper({ root: first.root, logLevel: 'warn', componentDir, harperConfig });
  try {
    const c = await h.fetch('/prerender_admin/config', { body: SIDE_BY_SIDE_CONFIG });
    if (c.status !== 200) throw new Error(`config: ${c.status} ${c.text}`);
    const leases = (await overview(h)).leases.maxLeases;
    if (leases !== SIDE_BY_SIDE_MAX_LEASES)
      throw new Error(`maxLeases is ${leases}, not ${SIDE_BY_SIDE_MAX_LEASES}`);
    return h;
  } catch (e) {
    await h.destroy();
    throw e;
  }
}

/** The `job_results` body that reports every job given as rendered (200). */
export function renderedResults(jobs: readonly Granted[]) {
  return {
    results: jobs.map((j) => ({ id: j.id, leaseToken: j.leaseToken, outcome: 'rendered', statusCode: 200 })),
  };
}

export interface DrainOptions {
  target: number;
  withResults: boolean;
  /**
   * When set, every grant's wall time minus this instant is recorded (due → started), and the claims
   * answered empty while the burst's rows were due are counted (see `burst` in the result).
   */
  dueAt?: number;
  /** Collect every grant here (claim-only runs hand their leases back afterwards, untimed). */
  grants?: Granted[];
}

/** Files due rows and waits until the keeper counts them due, so the drain starts on a warm queue. */
export async function fileToClaim(h: HarperInstance, urls: string[], dueAt: number): Promise<number> {
  const before = Number((await overview(h)).keeper.dueCount);
  const rate = await fileAll(
    h,
    urls.map((url) => ({ url, dueAt })),
  );
  await until('the keeper counts the filed rows due', async () =>
    Number((await overview(h)).keeper.dueCount) >= before + urls.length ? true : undefined,
  );
  return rate;
}

/**
 * Reports every grant as rendered (100 per request, over all clients): the leases a claim-only run left
 * are released, so the next measurement starts with an empty lease table. Answers results not accepted.
 */
export async function reportAll(clients: FleetClient[], grants: readonly Granted[]): Promise<number> {
  let next = 0;
  let refused = 0;
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const batch = grants.slice(next, next + 100);
        next += batch.length;
        if (batch.length === 0) return;
        const r = await c.post('/render_queue/job_results', renderedResults(batch));
        const answers = (r.json as { results?: Array<{ accepted: boolean }> } | undefined)?.results ?? [];
        refused += batch.length - answers.filter((a) => a.accepted).length;
      }
    }),
  );
  return refused;
}

export async function drainClaims(h: HarperInstance, clients: FleetClient[], opts: DrainOptions) {
  const seen = new Set<string>();
  let dups = 0;
  let granted = 0;
  let emptyClaims = 0;
  let notAccepted = 0;
  let errors = 0;
  const claimMs: number[] = [];
  const resultsMs: number[] = [];
  const dueMs: number[] = [];
  let done = false;
  const counters0 = await claimCounters(h);
  let lastGrant = performance.now();
  let lastResult = NaN;
  const meter = cpuMeter({ harper: h.pid });
  const t0 = performance.now();
  let firstGrantAt = NaN;
  let targetAt = NaN;
  // When each empty answer came (performance.now()) to a claim sent at or after dueAt; and how many empty
  // answers came to claims sent before it.
  const emptyAfterDue: number[] = [];
  let emptyBeforeDue = 0;
  await Promise.all(
    clients.map(async (c) => {
      while (!done) {
        const sentWall = Date.now();
        const s = performance.now();
        const r = await c.post('/render_queue/claim', { limit: LIMIT });
        const e = performance.now();
        if (r.status !== 200) {
          errors++;
          await sleep(EMPTY_BACKOFF_MS);
          continue;
        }
        const jobs = r.json as Granted[];
        if (jobs.length === 0) {
          emptyClaims++;
          if (opts.dueAt !== undefined) {
            if (sentWall >= opts.dueAt) emptyAfterDue.push(e);
            else emptyBeforeDue++;
          }
          if (e - lastGrant > STUCK_MS && granted > 0) done = true;
          await sleep(EMPTY_BACKOFF_MS);
          continue;
        }
        claimMs.push(e - s);
        lastGrant = e;
        if (Number.isNaN(firstGrantAt)) firstGrantAt = e;
        const wall = Date.now();
        for (const j of jobs) {
          if (seen.has(j.id)) dups++;
          else seen.add(j.id);
          if (opts.dueAt !== undefined) dueMs.push(wall - opts.dueAt);
        }
        opts.grants?.push(...jobs);
        granted += jobs.length;
        if (granted >= opts.target && Number.isNaN(targetAt)) targetAt = e;
        if (granted >= opts.target) done = true;
        if (opts.withResults) {
          const rs = performance.now();
          const res = await c.post('/render_queue/job_results', renderedResults(jobs));
          lastResult = performance.now();
          resultsMs.push(lastResult - rs);
          const answers = (res.json as { results?: Array<{ accepted: boolean }> } | undefined)?.results ?? [];
          notAccepted += jobs.length - answers.filter((a) => a.accepted).length;
        }
      }
    }),
  );
  const end = performance.now();
  const cpu = meter();
  const counters1 = await claimCounters(h);
  // Claim-only ends at the grant that reached the target; a full drain when its last results landed. An
  // incomplete drain ends at its last grant or result, never at the stuck timeout.
  const grantEnd = Number.isNaN(targetAt) ? lastGrant : targetAt;
  const spanMs = (opts.withResults ? (Number.isNaN(lastResult) ? end : lastResult) : grantEnd) - t0;
  const sortedDue = [...dueMs].sort((a, b) => a - b);
  // Rows of the burst stay due and unleased until the grant that reaches the target: an empty answer to a
  // claim sent at or after dueAt and answered before that grant counts (after it, nothing is left to
  // grant). A drain that never reached the target had rows due throughout: every such answer counts.
  const emptyWhileDue = Number.isNaN(targetAt)
    ? emptyAfterDue.length
    : emptyAfterDue.filter((t) => t < targetAt).length;
  const grantingClaims = claimMs.length;
  return {
    jobs: granted,
    distinct: seen.size,
    complete: granted >= opts.target,
    jobsPerSec: Math.round((granted / spanMs) * 1000),
    spanMs: Math.round(spanMs),
    firstGrantMs: Math.round(firstGrantAt - t0),
    dups,
    notAccepted,
    errors,
    emptyClaims,
    claims: claimMs.length,
    // publishes = ready-set generations during the drain; stale/wedged = entries the claim path skipped
    publishes: counters1.generation - counters0.generation,
    // The keeper's publishes in the drain (walks and flips) and their mean cost on worker 0.
    keeperPublishes: counters1.publishCount - counters0.publishCount,
    publishMsMean:
      Math.round(
        ((1000 * (counters1.publishSec - counters0.publishSec)) /
          Math.max(1, counters1.publishCount - counters0.publishCount)) *
          10,
      ) / 10,
    stale: counters1.stale - counters0.stale,
    wedged: counters1.wedged - counters0.wedged,
    claimMs: summarize(claimMs),
    resultsMs: summarize(resultsMs),
    ...(opts.dueAt !== undefined
      ? {
          dueMs: { ...summarize(dueMs), first: sortedDue[0], last: sortedDue.at(-1) },
          burst: {
            emptyWhileDue,
            grantingClaims,
            emptyPct: Math.round((1000 * emptyWhileDue) / Math.max(1, emptyWhileDue + grantingClaims)) / 10,
            // The rest of emptyClaims, not in the burst: sent before dueAt, or answered after the last grant.
            emptyBeforeDue,
            emptyAfterLastGrant: emptyAfterDue.length - emptyWhileDue,
          },
        }
      : {}),
    ...cpu,
  };
}

/** The next minute boundary at least `leadMs` away: rows are due at whole minutes. */
export function nextMinute(leadMs: number): number {
  return Math.ceil((Date.now() + leadMs) / 60_000) * 60_000;
}

/**
 * `count` rows due at the next whole minute at least 20 s away, drained with results from just before
 * that instant: due → granted per job (the side by side's C).
 */
export async function dueAtOnce(h: HarperInstance, clients: FleetClient[], round: number, count: number) {
  const dueAt = nextMinute(20_000);
  const rows = (await keeperStats(h))?.rows ?? 0;
  await fileAll(
    h,
    Array.from({ length: count }, (_, i) => ({ url: benchUrl(`c${round}`, i), dueAt })),
  );
  await until('keeper holds the due-at-once rows', async () =>
    ((await keeperStats(h))?.rows ?? 0) >= rows + count ? true : undefined,
  );
  await sleep(dueAt - 1500 - Date.now());
  return drainClaims(h, clients, { target: count, withResults: true, dueAt });
}

/**
 * Filed due-now → claimable on an idle queue (the side by side's D): one row filed due a minute ago,
 * then one client claims (limit 1) until it gets it, reporting whatever it got; `samples` times.
 */
export async function dueNowLatency(h: HarperInstance, client: FleetClient, round: number, samples: number) {
  const lat: number[] = [];
  for (let k = 0; k < samples; k++) {
    const url = benchUrl(`d${round}-${k}`, k);
    const t0 = performance.now();
    await fileAll(h, [{ url, dueAt: Date.now() - 60_000 }]);
    for (;;) {
      const r = await client.post('/render_queue/claim', { limit: 1 });
      const jobs = r.json as Granted[];
      if (jobs.length === 0) continue;
      if (jobs[0]!.id === url) lat.push(performance.now() - t0);
      await client.post('/render_queue/job_results', renderedResults(jobs));
      if (jobs[0]!.id === url) break;
    }
    await sleep(100 + Math.random() * 300);
  }
  return summarize(lat);
}
