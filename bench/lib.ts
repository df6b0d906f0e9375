// Shared pieces of the Harper-backed benchmarks: machine facts, percentiles, per-process CPU from /proc,
// a private redis-server (persistence off, or AOF as BullMQ's production guide asks) stopped by pid,
// one keep-alive HTTP connection per simulated fleet client, and the URLs every script files
// (~100 characters, like real product pages).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis as RedisClient } from 'ioredis';
import { Client } from 'undici';
import {
  basicAuth,
  freePort,
  setContractChecks,
  type Credentials,
  type HarperInstance,
} from '../test/harness.js';

// A benchmark measures the server; checking each answer against docs/openapi.yaml (as tests do) would
// spend client time on the cores the server runs on.
setContractChecks(false);

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function machine(): Record<string, unknown> {
  return {
    date: new Date().toISOString(),
    nproc: cpus().length,
    cpu: /model name\s*:\s*(.*)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? cpus()[0]?.model,
    node: process.version,
    loadavg: loadavg(),
  };
}

/**
 * Fleet loops through /render_queue/next on every node: `clients` a node, limit 25, each job reported
 * rendered in the loop's next call, every grant counted in `grants` (a count above 1 is a duplicate). A
 * loop ends once it has nothing left to report and `more` says so; `more` is given the number of empty
 * answers in a row over all loops. An empty answer waits `idleMs`.
 */
export async function drainByNext(
  nodes: ReadonlyArray<{ name: string; h: HarperInstance }>,
  clients: number,
  grants: Map<string, number>,
  more: (emptyInARow: number) => boolean,
  idleMs: number,
): Promise<void> {
  let emptyInARow = 0;
  await Promise.all(
    nodes.flatMap((n) =>
      Array.from({ length: clients }, async () => {
        let results: unknown[] = [];
        while (results.length > 0 || more(emptyInARow)) {
          const r = await n.h.fetch('/render_queue/next', {
            body: { results, limit: 25 },
            timeoutMs: 60_000,
          });
          if (r.status !== 200) throw new Error(`next on ${n.name}: ${r.status} ${r.text.slice(0, 200)}`);
          const jobs = r.json.jobs as Array<{ id: string; leaseToken: unknown }>;
          for (const j of jobs) grants.set(j.id, (grants.get(j.id) ?? 0) + 1);
          results = jobs.map((j) => ({
            id: j.id,
            leaseToken: j.leaseToken,
            outcome: 'rendered',
            statusCode: 200,
          }));
          if (jobs.length > 0) emptyInARow = 0;
          else {
            emptyInARow++;
            await sleep(idleMs);
          }
        }
      }),
    ),
  );
}

/** The 1-minute load average: read before and after each run so a noisy neighbour shows in the record. */
export function loadavg(): number {
  return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
}

export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

export function summarize(samples: number[]): { n: number; p50: number; p99: number; max: number } {
  const s = Float64Array.from(samples).sort();
  const r = (x: number) => Math.round(x * 100) / 100;
  return {
    n: s.length,
    p50: r(percentile(s, 0.5)),
    p99: r(percentile(s, 0.99)),
    max: r(s[s.length - 1] ?? NaN),
  };
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

const TICK_MS = 10; // USER_HZ is 100 on Linux: utime/stime in /proc count 10 ms ticks.

/** CPU ms a process (all its threads) has used so far, from /proc/<pid>/stat. */
export function procCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

/** CPU ms per thread (name and tid), to see whether both Harper workers carry the load. */
export function threadCpuMs(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(`${name}#${tid}`, (Number(f[11]) + Number(f[12])) * TICK_MS);
    } catch {
      // the thread ended between readdir and read
    }
  }
  return out;
}

/** The busiest threads between two threadCpuMs snapshots (ms of CPU each). */
export function busiestThreads(before: Map<string, number>, after: Map<string, number>, n = 4) {
  return [...after]
    .map(([k, v]) => [k, v - (before.get(k) ?? 0)] as const)
    .filter(([, v]) => v > 0)
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([k, v]) => `${k}:${v}`);
}

export function rssKb(pid: number): { rssAnonKb: number; rssFileKb: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`${k}:\\s*(\\d+)`).exec(s)?.[1] ?? NaN);
  return { rssAnonKb: kb('RssAnon'), rssFileKb: kb('RssFile') };
}

/** Measures this process's CPU over a stretch of wall time, as a share of every core of the machine. */
export function cpuMeter(pids: Record<string, number> = {}) {
  const wall0 = performance.now();
  const self0 = process.cpuUsage();
  const others0 = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, procCpuMs(pid)]));
  return () => {
    const wallMs = performance.now() - wall0;
    const u = process.cpuUsage(self0);
    const selfMs = (u.user + u.system) / 1000;
    const cores = cpus().length;
    const share = (ms: number) => Math.round((1000 * ms) / (wallMs * cores)) / 10;
    const out: Record<string, number> = { wallMs: Math.round(wallMs), generatorCpuPct: share(selfMs) };
    for (const [k, pid] of Object.entries(pids)) {
      const ms = procCpuMs(pid) - others0[k]!;
      out[`${k}CpuMs`] = ms;
      out[`${k}CpuPct`] = share(ms);
    }
    return out;
  };
}

/**
 * How a private redis-server keeps its data. `aof-everysec` is BullMQ's production setting (its "Going to
 * production" guide): append-only file on, fsync once a second, `maxmemory-policy noeviction`.
 * `off` keeps nothing on disk (no AOF, no RDB snapshots), the setting BullMQ's own benchmarks use.
 * Neither takes RDB snapshots, so the two differ by the AOF alone.
 */
export type RedisPersistence = 'aof-everysec' | 'off';

export interface RedisOptions {
  persistence: RedisPersistence;
}

export interface Redis {
  port: number;
  pid: number;
  /** The server's own temp folder (its `dir`: the AOF lives here). */
  dir: string;
  persistence: RedisPersistence;
  /** One `INFO` section as name → value. */
  info: (section: string) => Promise<Record<string, string>>;
  stop: () => Promise<void>;
}

const REDIS_ARGS: Record<RedisPersistence, string[]> = {
  'aof-everysec': ['--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec'],
  off: ['--save', '', '--appendonly', 'no'],
};

/** What `CONFIG GET` must answer for each mode; `startRedis` refuses a server that answers otherwise. */
const REDIS_EXPECTED: Record<RedisPersistence, Record<string, string>> = {
  'aof-everysec': { appendonly: 'yes', appendfsync: 'everysec', 'maxmemory-policy': 'noeviction', save: '' },
  off: { appendonly: 'no', 'maxmemory-policy': 'noeviction', save: '' },
};

/**
 * A private redis-server on 127.0.0.1 and a free port, in its own temp folder, stopped by pid. Once it is
 * up, its live settings (`CONFIG GET`) and `INFO persistence`'s `aof_enabled` are checked against the mode
 * asked for; any difference stops the server and throws.
 */
export async function startRedis(opts: RedisOptions): Promise<Redis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), `qk-redis-${opts.persistence}-`));
  const child: ChildProcess = spawn(
    '/usr/bin/redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--maxmemory-policy',
      'noeviction',
      ...REDIS_ARGS[opts.persistence],
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  const collect = (c: Buffer) => (out += c.toString());
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  let alive = true;
  const exited = new Promise<void>((r) =>
    child.on('exit', () => {
      alive = false;
      r();
    }),
  );
  const client = new RedisClient({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
  });
  const stop = async () => {
    client.disconnect();
    if (alive) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const info = async (section: string) => {
    const fields: Record<string, string> = {};
    for (const line of (await client.info(section)).split(/\r?\n/)) {
      const at = line.indexOf(':');
      if (at > 0 && !line.startsWith('#')) fields[line.slice(0, at)] = line.slice(at + 1);
    }
    return fields;
  };
  try {
    for (let i = 0; !out.includes('Ready to accept connections'); i++) {
      if (!alive || i > 200) throw new Error(`redis-server did not start:\n${out}`);
      await sleep(50);
    }
    await client.connect();
    const expected = REDIS_EXPECTED[opts.persistence];
    const wrong: string[] = [];
    for (const [key, want] of Object.entries(expected)) {
      const got = ((await client.config('GET', key)) as string[])[1];
      if (got !== want) wrong.push(`${key} is ${JSON.stringify(got)}, not ${JSON.stringify(want)}`);
    }
    const aof = (await info('persistence')).aof_enabled;
    const wantAof = expected.appendonly === 'yes' ? '1' : '0';
    if (aof !== wantAof) wrong.push(`INFO persistence aof_enabled is ${aof}, not ${wantAof}`);
    if (wrong.length)
      throw new Error(`redis-server (${opts.persistence}) runs with the wrong settings: ${wrong.join('; ')}`);
  } catch (e) {
    await stop();
    throw e;
  }
  return { port, pid: child.pid!, dir, persistence: opts.persistence, info, stop };
}

/** ~100-character URL; `tag` keeps every run's rows apart. */
export function benchUrl(tag: string, i: number): string {
  const u = `https://shop.example.com/catalogue/category-${i % 97}/product-${String(i).padStart(8, '0')}-${tag}?ref=bench`;
  return u.length >= 100 ? u : u + '-'.repeat(100 - u.length);
}

export interface FleetClient {
  post: (
    path: string,
    body: unknown,
  ) => Promise<{ status: number; headers: Record<string, unknown>; json: unknown }>;
  close: () => Promise<void>;
}

/** One keep-alive connection, as one renderer process of a fleet would hold. */
export function fleetClient(h: HarperInstance, who: Credentials): FleetClient {
  const client = new Client(h.url, { pipelining: 1, keepAliveTimeout: 120_000 });
  const authorization = basicAuth(who);
  return {
    post: async (path, body) => {
      const r = await client.request({
        path,
        method: 'POST',
        headers: { authorization, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const text = await r.body.text();
      return { status: r.statusCode, headers: r.headers, json: text ? JSON.parse(text) : undefined };
    },
    close: () => client.close(),
  };
}

/** Files targets through the API in batches of 10,000 (the API's ceiling); returns rows/s. */
export async function fileAll(
  h: HarperInstance,
  targets: Array<Record<string, unknown>>,
  batch = 10_000,
): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < targets.length; i += batch) {
    const chunk = targets.slice(i, i + batch);
    const r = await h.fetch('/render_queue/targets', { body: { targets: chunk } });
    if (r.status !== 200 || r.json.upserted !== chunk.length)
      throw new Error(`filing failed: ${r.status} ${r.text.slice(0, 300)}`);
  }
  return (targets.length / (performance.now() - t0)) * 1000;
}

export async function deleteAll(h: HarperInstance, urls: string[], batch = 10_000): Promise<void> {
  for (let i = 0; i < urls.length; i += batch) {
    const r = await h.fetch('/render_queue/targets', {
      method: 'DELETE',
      body: { urls: urls.slice(i, i + batch) },
    });
    if (r.status !== 200) throw new Error(`delete failed: ${r.status} ${r.text.slice(0, 300)}`);
  }
}

/** Polls `check` until it answers something other than undefined or false (0 and '' are answers); throws after `ms`. */
export async function until<T>(
  what: string,
  check: () => Promise<T | undefined | false>,
  ms = 120_000,
  every = 200,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function overview(h: HarperInstance): Promise<any> {
  return (await h.fetch('/prerender_admin/overview')).json;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function keeperStats(h: HarperInstance): Promise<any> {
  const r = await h.fetch('/prerender_admin/overview');
  return r.json?.keeper?.stats ?? null;
}

/** Every sample of the Prometheus scrape, summed over label sets, by metric name. */
export async function metricValues(h: HarperInstance): Promise<Map<string, number>> {
  const text = (await h.fetch('/prerender_admin/metrics')).text;
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m) out.set(m[1]!, (out.get(m[1]!) ?? 0) + Number(m[3]));
  }
  return out;
}

/** What the claim path did between two points: ready-set publishes (and their cost), grants, stale and wedged skips. */
export async function claimCounters(h: HarperInstance) {
  const [o, m] = await Promise.all([overview(h), metricValues(h)]);
  const pick = (name: string) => m.get(name) ?? NaN;
  return {
    generation: Number(o.ready.generation),
    granted: pick('queue_keeper_claim_granted_total'),
    stale: pick('queue_keeper_claim_stale_total'),
    wedged: pick('queue_keeper_claim_wedged_total'),
    // Walks and flips of the keeper, and their summed duration.
    publishCount: pick('queue_keeper_keeper_publish_duration_seconds_count'),
    publishSec: pick('queue_keeper_keeper_publish_duration_seconds_sum'),
  };
}

/** One keep-alive connection for any method (DELETE included); a dead server rejects. */
export function jsonClient(h: HarperInstance, who: Credentials) {
  return jsonClientAt(h.url, who);
}

/** jsonClient for a server known by its URL (the crash soak reconnects after every restart). */
export function jsonClientAt(url: string, who: Credentials) {
  const client = new Client(url, { pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 60_000 });
  const authorization = basicAuth(who);
  return {
    send: async (method: 'POST' | 'DELETE', path: string, body: unknown) => {
      const r = await client.request({
        path,
        method,
        headers: { authorization, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const text = await r.body.text();
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      let json: any = undefined;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = undefined;
      }
      return { status: r.statusCode, json, text };
    },
    close: () => client.close(),
  };
}
