// Where a claim's time goes inside Harper: the claim benchmark's A (grants only) and B (claim 25 + one
// job_results batch per claim) workloads against a scratch copy of the component whose workers sample
// themselves with the inspector (the harness strips NODE_OPTIONS, so --cpu-prof cannot reach them).
// Prints each worker's summary (areas, self and inclusive top functions) per workload and leaves the
// .cpuprofile files in the printed folder for a closer look.
// Run: npx tsc -p tsconfig.json && node dist/bench/claims-profile.js [jobs=50000]
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startHarper, type Credentials, type HarperInstance } from '../test/harness.js';
import { drainClaims, fileToClaim } from './claim-drain.js';
import {
  benchUrl,
  deleteAll,
  fleetClient,
  loadavg,
  machine,
  overview,
  until,
  type FleetClient,
} from './lib.js';
import { profiledRun, removeScratch, scratchComponent } from './scratch-component.js';

const JOBS = Number(process.argv[2] ?? 50_000);
const fleet: Credentials = { username: 'bench-fleet', password: 'bench-fleet-pass' };
const profileDir = mkdtempSync(join(tmpdir(), 'qk-profiles-'));
const component = scratchComponent({ keeper: true, profileDir });

async function profiled(label: string, run: () => Promise<unknown>) {
  const result = await profiledRun(profileDir, label, run);
  console.log(JSON.stringify({ label, result }));
}

console.log(JSON.stringify({ bench: 'claims-profile', ...machine(), jobs: JOBS, profileDir }));
const first = await startHarper({ logLevel: 'warn', componentDir: component });
let h: HarperInstance = first;
let clients: FleetClient[] = [];
try {
  await first.addUser(fleet.username, fleet.password, 'render_fleet');
  await first.fetch('/prerender_admin/config', {
    body: { queue: { maxLeases: 131_072, jobLeaseTime: 120_000 } },
  });
  await first.stop();
  h = await startHarper({ root: first.root, logLevel: 'warn', componentDir: component });
  // Optional runtime config for the profiled run, e.g. QK_CONFIG='{"queue":{"keeper":{"stateInterval":1000}}}'
  if (process.env.QK_CONFIG)
    await h.fetch('/prerender_admin/config', { body: JSON.parse(process.env.QK_CONFIG) });
  clients = Array.from({ length: 24 }, () => fleetClient(h, fleet));
  const aUrls = Array.from({ length: JOBS }, (_, i) => benchUrl('pa', i));
  await fileToClaim(h, aUrls, Date.now() - 120_000);
  await profiled('A-grants', () => drainClaims(h, clients, { target: JOBS, withResults: false }));
  await deleteAll(h, aUrls);
  await until('claim-only rows dropped', async () =>
    (await overview(h)).keeper.dueCount === 0 ? true : undefined,
  );
  const bUrls = Array.from({ length: JOBS }, (_, i) => benchUrl('pb', i));
  await fileToClaim(h, bUrls, Date.now() - 120_000);
  await profiled('B-drain', () => drainClaims(h, clients, { target: JOBS, withResults: true }));
  console.log(JSON.stringify({ loadavg: loadavg(), profileDir, kept: existsSync(profileDir) }));
} finally {
  await Promise.all(clients.map((c) => c.close()));
  await h.destroy();
  await first.destroy();
  removeScratch(component);
}
