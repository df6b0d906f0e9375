// What a claim and a result pay for their request checks, in two builds side by side in one process,
// rounds interleaved (first build, second build, first, …) so a busy machine weighs on both alike. Per
// round and build, in microseconds per call:
//   result  one token-protocol result with a 2 KiB page (`checkResult`, as job_result and each entry of
//           job_results take it);
//   batch   a job_results batch of 25 such results, each checked on its own;
//   claim   a claim body `{limit, queues}` to the capped limit (ClaimService.parseLimit in a build that
//           has it; else the `claim` shape of util/requests/shape.ts, then ClaimService.limitOf).
// Each figure is timed over ~0.1-0.5 s of calls, so one scheduling hiccup weighs little in a round.
// Run: npm run build && node dist/bench/request-checks.js <componentDir> <componentDir> [rounds]
//      (each directory a built checkout; 15 rounds by default)
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { defaultConfig } from '../util/config/schema.js';
import { loadavg, machine, median } from './lib.js';

const DIRS = process.argv.slice(2, 4);
const ROUNDS = Number(process.argv[4] ?? 15);
if (DIRS.length !== 2) throw new Error('usage: request-checks.js <componentDir> <componentDir> [rounds]');

type Check = (input: unknown) => unknown;
interface Build {
  dir: string;
  result: Check;
  claim: Check;
}

async function load(dir: string): Promise<Build> {
  const mod = async (rel: string) => import(pathToFileURL(join(dir, 'dist', rel)).href);
  const check = (await mod('util/results/check.js')) as { checkResult(i: unknown, max: number): unknown };
  const claims = (await mod('services/leases/claims.js')) as {
    ClaimService: new (deps: unknown) => {
      parseLimit?: (body: unknown) => number;
      limitOf?: (limit: number | undefined) => number;
    };
  };
  const cfg = defaultConfig();
  const svc = new claims.ClaimService({ config: () => cfg });
  const max = cfg.render.maxBodyBytes;
  let claim: Check;
  if (svc.parseLimit) claim = (b) => svc.parseLimit!(b);
  else {
    const { requestShape } = (await mod('util/requests/shape.js')) as {
      requestShape(
        name: string,
        what: string,
        codes: Record<string, string>,
      ): {
        check(v: unknown): unknown;
      };
    };
    const shape = requestShape('claim', 'body', { limit: 'invalid_limit', queues: 'invalid_queues' });
    claim = (b) => {
      if (shape.check(b)) throw new Error('refused');
      return svc.limitOf!((b as { limit?: number }).limit);
    };
  }
  return { dir, result: (i) => check.checkResult(i, max), claim };
}

const page = `<html><body>${'<p>queue-keeper</p>'.repeat(100)}</body></html>`;
const result = (i: number) => ({
  id: `https://shop.example.com/p/${i}`,
  leaseToken: `0193f2a1c4e87d2f${String(i).padStart(12, '0')}`,
  outcome: 'rendered',
  statusCode: 200,
  renderTimeMs: 850,
  contentType: 'text/html; charset=utf-8',
  body: page,
});
const results = Array.from({ length: 1000 }, (_, i) => result(i));
const claimBodies = [{ limit: 25 }, { limit: 25, queues: ['product'] }, {}];

/** Microseconds per call of `f` over `n` calls. */
function timed(n: number, f: (i: number) => void): number {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) f(i);
  return ((performance.now() - t0) * 1000) / n;
}

function round(b: Build) {
  return {
    resultUs: timed(100_000, (i) => b.result(results[i % 1000])),
    batchUs: timed(4_000, (i) => {
      for (let k = 0; k < 25; k++) b.result(results[(i * 25 + k) % 1000]);
    }),
    claimUs: timed(1_000_000, (i) => b.claim(claimBodies[i % 3])),
  };
}

const builds = [await load(DIRS[0]!), await load(DIRS[1]!)];
console.log(JSON.stringify({ bench: 'request-checks', ...machine(), dirs: DIRS, rounds: ROUNDS }));
// One warm-up round each, not recorded: both builds' code is compiled by the JIT before timing.
for (const b of builds) round(b);
const rows = builds.map(() => [] as Array<ReturnType<typeof round>>);
for (let r = 1; r <= ROUNDS; r++)
  builds.forEach((b, k) => {
    const x = round(b);
    rows[k]!.push(x);
    console.log(JSON.stringify({ round: r, dir: b.dir, ...x, load: loadavg() }));
  });
const med = (k: number, f: keyof ReturnType<typeof round>) => median(rows[k]!.map((x) => x[f]));
const fields = ['resultUs', 'batchUs', 'claimUs'] as const;
console.log(
  JSON.stringify({
    medians: builds.map((b, k) => ({ dir: b.dir, ...Object.fromEntries(fields.map((f) => [f, med(k, f)])) })),
    secondOverFirst: Object.fromEntries(
      fields.map((f) => [f, Math.round((med(1, f) / med(0, f)) * 1000) / 1000]),
    ),
    loadEnd: loadavg(),
  }),
);
