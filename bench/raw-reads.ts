// Raw record reads against a real Harper 4.7.29 store: the keeper's walk
// (walkSchedule vs walkScheduleRaw, alone and with KeeperCore.apply per row, i.e. the load without its
// publishes and yields) and the claim's point read (readRow vs readClaimRow), old and new interleaved
// round by round in one process. The rows are filed through the API of a real Harper, which is then
// stopped; a child process opens the same root in-process (Harper's in-process mode) and times the reads there.
// Run: npx tsc -p tsconfig.json && node dist/bench/raw-reads.js [rows] [rounds]
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { rmSync } from 'node:fs';
import { startHarper } from '../test/harness.js';
import { fileAll, loadavg, machine } from './lib.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const PREFIXES = ['/catalog/products/', '/news/', '/blog/', '/help/articles/'];

function urlOf(i: number): string {
  const p = PREFIXES[i % PREFIXES.length]!;
  return `https://www.example-shop.com${p}item-${i.toString(36)}-${'abcdefghij'.repeat(10)}`.slice(0, 100);
}

async function seed(rows: number): Promise<string> {
  const h = await startHarper({ logLevel: 'warn' });
  const now = Date.now();
  const targets = Array.from({ length: rows }, (_, i) => {
    const t: Record<string, unknown> = { url: urlOf(i), fromSitemap: i % 2 === 0 };
    if (i % 10 === 3) t.cadenceMs = 7 * DAY;
    if (i % 10 === 7) t.cadenceMs = HOUR;
    if (i % 3 === 0) t.dueAt = now - (i % 50) * 60_000 - 60_000;
    return t;
  });
  const rate = await fileAll(h, targets);
  console.log(JSON.stringify({ seeded: rows, fileRowsPerSec: Math.round(rate) }));
  await h.stop();
  return h.root;
}

async function measure(rounds: number): Promise<void> {
  const store = await import('../services/schedule/store.js');
  const raw = await import('../services/schedule/rawRecords.js');
  const { KeeperCore } = await import('../util/keeper/core.js');
  const { defaultConfig } = await import('../util/config/schema.js');
  const { classifyUrl } = await import('../util/schedule/rules.js');
  const cfg = defaultConfig();
  const r = cfg.queue.ready;
  const newCore = () =>
    new KeeperCore({
      classify: (url: string, own: number | null) => classifyUrl(url, own, cfg),
      score: {
        sitemapBoost: r.sitemapBoost,
        urgentHeadStart: r.urgentHeadStart,
        changedHeadStart: r.changedHeadStart,
      },
    });
  type Walk = typeof store.walkSchedule;
  const walks: Record<string, Walk> = { old: store.walkSchedule, raw: raw.walkScheduleRaw };
  const CHUNK = 1000;
  // As loadWalk reads: chunks of 1,000 resumed after the last key.
  const walkAll = (walk: Walk, apply: ((key: string, row: unknown) => void) | null) => {
    let last: string | undefined;
    let n = 0;
    for (;;) {
      let read = 0;
      for (const { key, row } of walk({ start: last, exclusiveStart: last !== undefined, limit: CHUNK })) {
        if (apply && row) apply(key, row);
        last = key;
        read++;
      }
      if (read === 0) return n;
      n += read;
    }
  };
  const keys = [...store.walkSchedule({})].map((x) => x.key);
  const sample = Array.from({ length: 100_000 }, (_, i) => keys[(i * 7919) % keys.length]!);
  const reads = { old: store.readRow, raw: raw.readClaimRow } as Record<string, (k: string) => unknown>;
  for (let round = 1; round <= rounds; round++) {
    const out: Record<string, unknown> = { round, loadBefore: loadavg() };
    for (const form of round % 2 ? ['old', 'raw'] : ['raw', 'old']) {
      let t = performance.now();
      const n = walkAll(walks[form]!, null);
      out[`walk_${form}_rowsPerSec`] = Math.round((n / (performance.now() - t)) * 1000);
      const core = newCore();
      const now = Date.now();
      t = performance.now();
      walkAll(walks[form]!, (key, row) => core.apply(key, row as never, now));
      out[`walkApply_${form}_rowsPerSec`] = Math.round((n / (performance.now() - t)) * 1000);
      out[`held_${form}`] = core.size;
      // 25 distinct keys per event-loop turn, as a claim reads.
      let ns = 0;
      for (let i = 0; i < sample.length; i += 25) {
        await new Promise((res) => setImmediate(res));
        const t0 = performance.now();
        for (let j = i; j < i + 25 && j < sample.length; j++) reads[form]!(sample[j]!);
        ns += (performance.now() - t0) * 1e6;
      }
      out[`read_${form}_us`] = Math.round(ns / sample.length / 10) / 100;
    }
    out.loadAfter = loadavg();
    console.log(JSON.stringify(out));
  }
}

const args = process.argv.slice(2);
if (args[0] === '--measure') {
  await measure(Number(args[1] ?? 3));
  process.exit(0);
} else {
  const rows = Number(args[0] ?? 1_000_000);
  const rounds = Number(args[1] ?? 3);
  console.log(JSON.stringify({ bench: 'raw-reads', ...machine(), rows, rounds }));
  const root = await seed(rows);
  try {
    const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--measure', String(rounds)], {
      stdio: 'inherit',
      env: { ...process.env, ROOTPATH: join(root, 'hdb'), HOME: join(root, 'home') },
    });
    if (child.status !== 0) throw new Error(`measuring child exited ${child.status}`);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
