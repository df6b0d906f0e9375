// Where the keeper's load time goes inside Harper: files ROWS rows (30 % due), restarts on the same
// root with a scratch copy of the component whose workers profile themselves from module load until the
// keeper is live, then prints trust.keeper.load and the summary of each worker's profile (worker 0 holds
// the keeper). The .cpuprofile files stay in the printed folder.
// Run: npx tsc -p tsconfig.json && node dist/bench/keeper-load-profile.js [rows=250000]
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startHarper } from '../test/harness.js';
import { summarizeProfile } from './cpuprofile-summary.js';
import { benchUrl, fileAll, loadavg, machine, until } from './lib.js';
import { removeScratch, scratchComponent } from './scratch-component.js';

const ROWS = Number(process.argv[2] ?? 250_000);
const profileDir = mkdtempSync(join(tmpdir(), 'qk-load-profiles-'));
const component = scratchComponent({ keeper: true, profileDir });

console.log(JSON.stringify({ bench: 'keeper-load-profile', ...machine(), rows: ROWS, profileDir }));
const first = await startHarper({ logLevel: 'warn' });
try {
  const now = Date.now();
  await fileAll(
    first,
    Array.from({ length: ROWS }, (_, i) =>
      i % 10 < 3 ? { url: benchUrl('load', i), dueAt: now - 3_600_000 } : { url: benchUrl('load', i) },
    ),
  );
  await first.stop();
  writeFileSync(join(profileDir, 'start'), '');
  const h = await startHarper({ root: first.root, componentDir: component, logLevel: 'warn' });
  const keeper = await until(
    'the keeper live',
    async () => {
      const r = await h.fetch('/prerender_admin/queue-state');
      return r.status === 200 ? r.json.trust.keeper : undefined;
    },
    600_000,
    100,
  );
  writeFileSync(join(profileDir, 'stop'), '');
  await until(
    'profiles',
    async () =>
      readdirSync(profileDir).filter((f) => f.endsWith('.cpuprofile')).length >= 2 ? true : undefined,
    60_000,
  );
  console.log(JSON.stringify({ load: keeper.load, rows: keeper.rows, loadavg: loadavg() }));
  for (const f of readdirSync(profileDir).filter((x) => x.endsWith('.cpuprofile'))) {
    const s = summarizeProfile(JSON.parse(readFileSync(join(profileDir, f), 'utf8')), 25);
    console.log(
      `--- ${f}: ${s.busyMs} ms busy of ${s.totalMs} ms; areas ${JSON.stringify(s.areasPctOfBusy)}`,
    );
    console.log('self:\n' + s.selfTop.join('\n'));
    console.log('inclusive:\n' + s.inclusiveTop.join('\n'));
  }
  await h.stop();
} finally {
  await first.destroy();
  removeScratch(component);
}
