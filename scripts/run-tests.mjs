// Runs every compiled test file with node's test runner: the unit files (dist/test/unit and the fleet
// client's client/dist/test) in one process, and each integration file (dist/test/integration) in a
// process of its own. `unit` (which includes the client's tests) or `integration` narrows it, and
// names after `integration` narrow it to those files (`integration restart stall`).
//
// Most of an integration file's time is waiting (lease expiries, backoff steps, Harper boots), so the
// files run QK_TEST_JOBS at a time (default 2; 1 runs them one by one), longest first. Files
// in one `apart` group never run at the same time: the cluster files each boot several Harpers, and the
// Chromium files would each unpack the shared Chromium binary into the temp folder on a first run.
// Each running file gets its own QK_TEST_SLOT, and test/harness.ts gives every slot its own port range,
// so two Harpers booting side by side never pick the same port. A file's output is printed whole when it
// ends (no interleaving), then a table of every file's time and counts; a file that runs past
// QK_TEST_FILE_TIMEOUT_S (default 900) is stopped with everything it started.
import { readdirSync, existsSync } from 'node:fs';
import { join, basename } from 'node:path';
import { spawn } from 'node:child_process';

const dirs = {
  unit: [join('dist', 'test', 'unit'), join('client', 'dist', 'test')],
  integration: [join('dist', 'test', 'integration')],
};
// Seconds each file took in a clean-clone run, for the longest-first order (a file not listed counts as
// DEFAULT_WEIGHT). Only the order depends on these; a stale figure costs time, never coverage.
const WEIGHTS = {
  unit: 60,
  'cluster.test.js': 110,
  'cluster3.test.js': 100,
  'clusterReturn.test.js': 90,
  'leases.test.js': 115,
  'notify.test.js': 75,
  'restart.test.js': 45,
  'pages.test.js': 60,
  'stall.test.js': 55,
  'claims.test.js': 40,
  'console.test.js': 30,
  'install.test.js': 30,
  'metrics.test.js': 28,
  'results.test.js': 28,
  'harness.test.js': 25,
  'fleetBrowser.test.js': 25,
  'clientCluster.test.js': 45,
  'clientInstall.test.js': 40,
  'prerenderFleet.test.js': 35,
};
const DEFAULT_WEIGHT = 20;
const APART = [
  ['cluster.test.js', 'cluster3.test.js', 'clusterReturn.test.js', 'clientCluster.test.js'],
  ['console.test.js', 'fleetBrowser.test.js', 'prerenderFleetBrowser.test.js'],
];

const jobsWanted = Number(process.env.QK_TEST_JOBS ?? 2);
const slots = Number.isInteger(jobsWanted) && jobsWanted >= 1 ? Math.min(jobsWanted, 4) : 2;
const fileTimeoutMs = Number(process.env.QK_TEST_FILE_TIMEOUT_S ?? 900) * 1000;

const groups = process.argv[2] ? [process.argv[2]] : ['unit', 'integration'];
const only = process.argv.slice(3).map((n) => (n.endsWith('.test.js') ? n : `${n}.test.js`));
const work = [];
for (const g of groups) {
  const files = [];
  for (const dir of dirs[g] ?? []) {
    if (!existsSync(dir)) continue;
    for (const f of readdirSync(dir).sort()) if (f.endsWith('.test.js')) files.push(join(dir, f));
  }
  if (g === 'unit' && files.length > 0) work.push({ name: 'unit', files });
  if (g === 'integration')
    for (const f of files)
      if (only.length === 0 || only.includes(basename(f))) work.push({ name: basename(f), files: [f] });
}
if (work.length === 0) {
  console.error('no test files found under dist/test; did the build run?');
  process.exit(1);
}
const weight = (w) => WEIGHTS[w.name] ?? DEFAULT_WEIGHT;
work.sort((a, b) => weight(b) - weight(a));
const apartFrom = (name) => APART.find((g) => g.includes(name)) ?? [];

const reporter = process.stdout.isTTY ? ['--test-reporter=spec'] : [];
const t0 = Date.now();
const done = [];
const running = new Map(); // slot -> { job, child }
let stopping = false;

function counts(text) {
  const c = {};
  for (const m of text.matchAll(/^(?:#|ℹ) (tests|pass|fail|cancelled) (\d+)$/gm)) c[m[1]] = Number(m[2]);
  return c;
}

function start(job, slot) {
  const stream = slots === 1;
  const child = spawn(process.execPath, ['--test', '--test-concurrency=1', ...reporter, ...job.files], {
    env: { ...process.env, QK_TEST_SLOT: String(slot) },
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group, so a file that overruns is stopped with every Harper it spawned.
    detached: true,
  });
  const run = { job, child, started: Date.now(), out: '', timedOut: false };
  const keep = (c) => {
    run.out += c;
    if (stream) process.stdout.write(c);
  };
  for (const s of [child.stdout, child.stderr]) {
    s.setEncoding('utf8');
    s.on('data', keep);
  }
  run.timer = setTimeout(() => {
    run.timedOut = true;
    killGroup(child, 'SIGTERM');
    setTimeout(() => killGroup(child, 'SIGKILL'), 20_000).unref();
  }, fileTimeoutMs);
  running.set(slot, run);
  console.log(`# ${job.name} started${slots > 1 ? ` (slot ${slot})` : ''}`);
  child.on('close', (code, signal) => {
    clearTimeout(run.timer);
    running.delete(slot);
    const secs = (Date.now() - run.started) / 1000;
    const ok = code === 0 && !run.timedOut;
    const why = run.timedOut
      ? `stopped after ${fileTimeoutMs / 1000} s`
      : signal
        ? `signal ${signal}`
        : `exit ${code}`;
    if (!stream) {
      console.log(`\n# ---- ${job.name}: ${ok ? 'ok' : `FAILED (${why})`}, ${secs.toFixed(1)} s ----`);
      process.stdout.write(run.out);
    }
    done.push({ name: job.name, secs, ok, why, ...counts(run.out) });
    fill();
  });
}

function killGroup(child, signal) {
  try {
    process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

function fill() {
  if (!stopping) {
    for (let slot = 0; slot < slots; slot++) {
      if (running.has(slot)) continue;
      const busy = [...running.values()].map((r) => r.job.name);
      const i = work.findIndex((w) => !apartFrom(w.name).some((n) => busy.includes(n)));
      if (i < 0) break;
      start(work.splice(i, 1)[0], slot);
    }
  }
  if (running.size === 0) finish();
}

function finish() {
  const total = (Date.now() - t0) / 1000;
  console.log(`\n# ---- ${done.length} test processes, ${slots} at a time, ${total.toFixed(1)} s ----`);
  for (const d of done) {
    const n = d.tests === undefined ? '' : `${d.pass ?? 0}/${d.tests} passed`;
    const bad = d.ok ? '' : `  FAILED (${d.why}${d.fail ? `, ${d.fail} failing` : ''})`;
    console.log(`# ${d.name.padEnd(24)} ${d.secs.toFixed(1).padStart(6)} s  ${n}${bad}`);
  }
  const failed = done.filter((d) => !d.ok);
  if (stopping) console.log('# stopped before every file ran');
  process.exit(failed.length > 0 || stopping || work.length > 0 ? 1 : 0);
}

for (const sig of ['SIGINT', 'SIGTERM'])
  process.on(sig, () => {
    stopping = true;
    for (const r of running.values()) {
      killGroup(r.child, 'SIGTERM');
      setTimeout(() => killGroup(r.child, 'SIGKILL'), 20_000).unref();
    }
  });

fill();
