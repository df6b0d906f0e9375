// A node joined while its source is being written to ends up with every row (replica repair). In Harper
// 4.7.29 `add_node` copies each database whole to the new node, walking the live table, and then resumes
// the audit log after the newest record it copied, so a transaction committed on the source while the
// copy runs can be skipped on the new node for good (docs/clusters.md, "Joining a node";
// test/clusterJoin.ts). Here node-a holds 20,000 rows, so the copy takes a while, and rows are filed on
// node-a in small batches right after the link; some land inside the copy. The keepers' repair rounds
// (queue.keeper.repairInterval, 10 s here) must bring node-b every row node-a has within a few rounds.
//
// The walk is in key order and each batch's keys are spread over the seed keys, so a batch committed
// while the walk runs is always split: its keys ahead of the walk are copied (and move the resume point
// past the batch), those behind are lost. The walk starts within a few seconds of the link and lasts one
// to several seconds, so batches are filed at a steady pace from the link until node-b holds the seed rows.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN_PASS, ADMIN_USER, startHarper, type HarperInstance } from '../harness.js';
import { sleep, until } from '../wait.js';
import { tableRows } from '../clusterJoin.js';

const DAY = 86_400_000;
const HOST = 'https://join-repair.example.com';
/** Rows on node-a before the link: the more, the longer the copy (the window the batches must hit). */
const SEED = 20_000;
const PER_BATCH = 50;
/** Between batches: ~3 batches a second keeps the copy's window covered without slowing it much. */
const PAUSE_MS = 250;
/** Filing stops here even if node-b never holds the seed rows (the copy never came). */
const FILE_FOR_MS = 25_000;
const REPAIR_INTERVAL = 10_000;
/** A few repair rounds, with room for a round that starts before the copy is over. */
const CATCH_UP_MS = 90_000;

let a: HarperInstance;
let b: HarperInstance;

/** A node that replicates on its HTTP port (test/harness.ts `replicationHostname`), as cluster.test's. */
function node(name: string): Promise<HarperInstance> {
  return startHarper({ replicationHostname: name });
}

/** Every RenderSchedule key (`<url>|desktop`) a node holds. */
async function keysOn(n: HarperInstance): Promise<Set<string>> {
  const rows = (await n.operation({
    operation: 'sql',
    sql: 'SELECT cacheKey FROM render_schedule.RenderSchedule',
  })) as Array<{ cacheKey: string }>;
  return new Set(rows.map((r) => r.cacheKey));
}

/** The keys node-a holds and node-b does not. */
async function missingOnB(): Promise<string[]> {
  const [onA, onB] = [await keysOn(a), await keysOn(b)];
  return [...onA].filter((k) => !onB.has(k));
}

/** Seed keys, in order: the copy walks them by key. */
const seedUrl = (i: number) => `${HOST}/p/${String(i).padStart(6, '0')}`;
/**
 * A batch's keys, spread evenly among the seed keys: wherever the copy's walk stands when the batch
 * commits, some of its keys lie ahead (copied, which moves the audit-log resume point past the batch)
 * and some behind (skipped).
 */
const duringUrls = (batch: number) =>
  Array.from(
    { length: PER_BATCH },
    (_, i) => `${seedUrl(((i * SEED) / PER_BATCH + batch * 7) % SEED)}-during-${batch}`,
  );

const targets = (urls: string[]) => ({
  targets: urls.map((url) => ({ url, dueAt: Date.now() + DAY })),
});

let setupMs = 0;

before(async () => {
  const bootAt = Date.now();
  // Side by side (a boot is mostly waiting); a node that did boot is kept for after() to stop even when
  // the other failed.
  const [na, nb] = await Promise.allSettled([node('node-a'), node('node-b')]);
  if (na.status === 'fulfilled') a = na.value;
  if (nb.status === 'fulfilled') b = nb.value;
  for (const r of [na, nb]) if (r.status === 'rejected') throw r.reason;
  for (const n of [a, b]) {
    // repairInterval is unknown to a build without replica repair: ignored there (and logged once).
    const r = await n.fetch('/prerender_admin/config', {
      body: { queue: { keeper: { repairInterval: REPAIR_INTERVAL, stateInterval: 1000 } } },
    });
    assert.equal(r.status, 200, r.text);
  }
  for (let part = 0; part < 2; part++) {
    const urls = Array.from({ length: SEED / 2 }, (_, i) => seedUrl(part * (SEED / 2) + i));
    const r = await a.fetch('/render_queue/targets', { body: targets(urls) });
    assert.equal(r.status, 200, r.text);
  }
  await until('node-a to hold the seed rows', async () => (await tableRows(a)) === SEED, 30_000, 250);
  setupMs = Date.now() - bootAt;
});

after(async () => {
  await Promise.all([a?.destroy(), b?.destroy()]);
});

test('rows filed on node-a while add_node copies it to node-b all reach node-b', async (t) => {
  // node-b's row count from the link on: when the copy arrives, and when filing may stop.
  const seen: Array<{ at: number; rows: number }> = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const rows = await tableRows(b).catch(() => -1);
      if (rows !== seen.at(-1)?.rows) seen.push({ at: Date.now(), rows });
      await sleep(200);
    }
  })();
  const linkAt = Date.now();
  const since = (at: number | undefined) => (at === undefined ? 'never' : `+${at - linkAt} ms`);
  const committed: number[] = [];
  let last = '';
  let firstB: number | undefined;
  try {
    // Filing starts with the link, not after add_node answers: the copy may start before it does.
    let linkedAt: number | undefined;
    let linkError: unknown;
    const linked = b
      .operation({
        operation: 'add_node',
        hostname: 'node-a',
        url: a.replicationUrl,
        authorization: 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASS}`).toString('base64'),
        retain_authorization: true,
      })
      .then(
        () => void (linkedAt = Date.now()),
        (e: unknown) => void (linkError = e ?? new Error('add_node failed')),
      );
    while (linkError === undefined && (seen.at(-1)?.rows ?? 0) < SEED && Date.now() - linkAt < FILE_FOR_MS) {
      const r = await a.fetch('/render_queue/targets', { body: targets(duringUrls(committed.length)) });
      assert.equal(r.status, 200, r.text);
      committed.push(Date.now());
      await sleep(PAUSE_MS);
    }
    await linked;
    if (linkError !== undefined) throw linkError;
    const total = SEED + committed.length * PER_BATCH;
    t.diagnostic(
      `setup (boots, seed rows) ${setupMs} ms; add_node answered ${since(linkedAt)}; ` +
        `${committed.length} batches of ${PER_BATCH} filed ${since(committed[0])}..${since(committed.at(-1))}; ` +
        `node-b's first row ${since(seen.find((s) => s.rows > 0)?.at)}, ` +
        `${SEED} rows ${since(seen.find((s) => s.rows >= SEED)?.at)}`,
    );

    await until(
      'node-b to hold every row node-a has',
      async () => {
        const [onA, onB] = [await tableRows(a), await tableRows(b)];
        firstB ??= onB;
        last = `node-a ${onA} rows, node-b ${onB} (${firstB} when the wait began)`;
        return onA === total && onB === total;
      },
      CATCH_UP_MS,
      1000,
    ).catch(async (e: unknown) => {
      const missing = await missingOnB();
      // Keys are `<url>|desktop`: the batch number ends the URL.
      const ids = missing.map((k) => Number(/-during-(\d+)\|desktop$/.exec(k)?.[1] ?? -1));
      const batches = [...new Set(ids.filter((i) => i >= 0))].sort((x, y) => x - y);
      const seeds = ids.filter((i) => i < 0).length;
      throw new Error(
        `${String(e)} (${CATCH_UP_MS / 1000} s): ${last}; node-b lacks ${missing.length} of node-a's ` +
          `rows: ${seeds} seed rows, and rows of ${batches.length} of ${committed.length} batches (filed ` +
          `${since(committed[batches[0]!])}..${since(committed[batches.at(-1)!])}); e.g. ` +
          missing.slice(0, 5).join(', '),
        { cause: e },
      );
    });
    const missing = await missingOnB();
    assert.deepEqual(missing.slice(0, 5), [], `node-b lacks ${missing.length} of node-a's rows`);
    t.diagnostic(`node-b held all ${total} rows ${since(Date.now())}`);
  } finally {
    sampling = false;
    await sampler;
    for (const [name, n] of [
      ['node-a', a],
      ['node-b', b],
    ] as const) {
      const s = await n.fetch('/prerender_admin/queue-state').catch((e: Error) => ({ status: e.message }));
      const lastRepair = 'json' in s ? s.json?.trust?.keeper?.lastRepair : `no queue-state (${s.status})`;
      t.diagnostic(`${name} trust.keeper.lastRepair: ${JSON.stringify(lastRepair) ?? 'absent'}`);
    }
  }
});
