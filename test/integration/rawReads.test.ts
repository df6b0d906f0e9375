// The raw record reads against a real Harper: the claim's raw point read still
// refuses a row rescheduled or deleted after the keeper published it, and a keeper loading through the
// raw walk after a restart holds every row exactly as it held it from the writes before the restart.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarper, type Credentials, type HarperInstance } from '../harness.js';
import { fileTargets, postConfig } from '../api.js';
import { parseScrape, total } from '../promText.js';
import { sleep, until } from '../wait.js';

let h: HarperInstance;
const fleet: Credentials = { username: 'fleet', password: 'fleet-pass' };
const MIN = 60_000;
const DAY = 86_400_000;

before(async () => {
  h = await startHarper();
  await h.addUser(fleet.username, fleet.password, 'render_fleet');
  await postConfig(h, {
    queue: { keeper: { publishInterval: 1500, stateInterval: 1000 }, jobLeaseTime: 60_000 },
  });
});

after(async () => {
  await h?.destroy();
});

async function keeper() {
  const r = await h.fetch('/prerender_admin/queue-state');
  assert.equal(r.status, 200, r.text);
  return r.json.trust.keeper;
}

async function held(url: string) {
  const r = await h.fetch('/prerender_admin/explain', { body: { url } });
  assert.equal(r.status, 200, r.text);
  const d = r.json.held;
  // The score and `due` move with the clock; the rest is what the keeper holds of the row.
  return (
    d && {
      route: d.route,
      cadenceMs: d.cadenceMs,
      fromSitemap: d.fromSitemap,
      verified: d.verified,
      mark: d.mark,
      dueMs: d.dueMs,
    }
  );
}

async function staleCount(): Promise<number> {
  const r = await h.fetch('/prerender_admin/metrics');
  assert.equal(r.status, 200, r.text);
  return total(parseScrape(r.text), 'queue_keeper_claim_stale_total');
}

test('a claim refuses a row rescheduled and a row deleted after the keeper published them', async () => {
  for (let attempt = 0; ; attempt++) {
    assert.ok(attempt < 6, 'a publish came between the writes and the claim in every attempt');
    // Away from a minute boundary: a new row filed due a second from now is due at once and unmarked,
    // and no minute publish can come between the writes and the claim.
    while (Date.now() % MIN > 45_000) await sleep(250);
    const later = `https://raw.example.com/later-${attempt}`;
    const gone = `https://raw.example.com/gone-${attempt}`;
    await fileTargets(h, [
      { url: later, dueAt: Date.now() + 1000 },
      { url: gone, dueAt: Date.now() + 1000 },
    ]);
    await until('the keeper holds both rows due', async () => {
      const [a, b] = [await held(later), await held(gone)];
      return a && b && a.dueMs <= Date.now() && b.dueMs <= Date.now();
    });
    const heldAt = Date.now();
    const published = await until('a publish after the keeper held them', async () => {
      const p = (await keeper()).lastPublish;
      return p && p.at > heldAt ? p.at : undefined;
    });
    await fileTargets(h, [{ url: later, dueAt: Date.now() + DAY }]);
    const del = await h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls: [gone] } });
    assert.equal(del.status, 200, del.text);
    const staleBefore = await staleCount();
    const r = await h.fetch('/render_queue/claim', { body: { limit: 25 }, auth: fleet });
    assert.equal(r.status, 200, r.text);
    const granted = (r.json as Array<{ url: string }>).map((j) => j.url);
    assert.ok(!granted.includes(later) && !granted.includes(gone), `granted ${granted.join(', ')}`);
    if ((await keeper()).lastPublish.at !== published) continue; // the set was replaced meanwhile: again
    // Both entries were taken from the set and refused on the row as stored now.
    assert.equal(granted.length, 0);
    const stale = await until('the claim counted both refused', async () => {
      const n = (await staleCount()) - staleBefore;
      return n >= 2 ? n : undefined;
    });
    assert.equal(stale, 2);
    // Leave an empty table for the next test.
    const urls = Array.from({ length: attempt + 1 }, (_, i) => `https://raw.example.com/later-${i}`);
    const cleared = await h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls } });
    assert.equal(cleared.status, 200, cleared.text);
    await until('the keeper holds no row', async () => (await keeper()).rows === 0);
    return;
  }
});

test('after a restart the raw walk loads every row as the keeper held it from the writes, odd values included', async () => {
  const now = Date.now();
  const cadences = [undefined, 60_000, 3_600_000, 7 * DAY, 30 * DAY, 365 * DAY];
  const paths = ['plain', 'caf\u00e9', '\u65e5\u672c', 'emoji-\u{1f600}', 'a'.repeat(180)];
  const targets = Array.from({ length: 240 }, (_, i) => {
    const t: Record<string, unknown> = {
      url: `https://odd.example.com/${paths[i % paths.length]}/${i}`,
      fromSitemap: i % 3 === 0,
    };
    const c = cadences[i % cadences.length];
    if (c !== undefined) t.cadenceMs = c;
    if (i % 4 === 1) t.dueAt = now - (i + 1) * MIN;
    if (i % 4 === 2) t.dueAt = now + (i + 1) * 7 * MIN;
    if (i % 7 === 3) t.changed = true;
    return t;
  });
  await fileTargets(h, targets);
  // Results give rows strikes, outcomes, status codes and render times; deletes leave what they leave.
  const outcomes = ['failed', 'rendered', 'redirected', 'non-indexable'] as const;
  let reported = 0;
  for (let round = 0; round < 6 && reported < 40; round++) {
    const c = await h.fetch('/render_queue/claim', { body: { limit: 25 }, auth: fleet });
    const jobs = c.json as Array<{ id: string; leaseToken: string }>;
    for (const [k, j] of jobs.entries()) {
      const outcome = outcomes[(reported + k) % outcomes.length]!;
      const r = await h.fetch('/render_queue/job_result', {
        auth: fleet,
        body: { id: j.id, leaseToken: j.leaseToken, outcome, statusCode: outcome === 'failed' ? 503 : 200 },
      });
      assert.ok(r.status < 300, r.text);
    }
    reported += jobs.length;
    await sleep(300);
  }
  assert.ok(reported > 0, 'some rows were claimed and reported');
  const deleted = targets.filter((_, i) => i % 11 === 5).map((t) => t.url as string);
  const d = await h.fetch('/render_queue/targets', { method: 'DELETE', body: { urls: deleted } });
  assert.equal(d.status, 200, d.text);
  const urls = targets.map((t) => t.url as string);
  // The table's rows as the full read (readRow) sees them, and what the keeper holds of each.
  const snapshot = async () => {
    const out = new Map<string, unknown>();
    let present = 0;
    for (const u of urls) {
      const r = await h.fetch('/prerender_admin/explain', { body: { url: u } });
      assert.equal(r.status, 200, r.text);
      if (r.json.row !== null) present++;
      out.set(u, await held(u));
    }
    return { out, present };
  };
  const before = await until(
    'the keeper holds exactly the rows of the table',
    async () => {
      const s = await snapshot();
      const k = await keeper();
      return k.rows === s.present ? s : undefined;
    },
    120_000,
  );
  assert.ok(before.present > 150, `${before.present} rows left`);
  assert.equal([...before.out.values()].filter((v) => v !== null).length, before.present);

  await h.stop();
  h = await startHarper({ root: h.root });
  const k = await until(
    'the keeper live after the restart',
    async () => {
      const r = await h.fetch('/prerender_admin/queue-state');
      return r.status === 200 && r.json.trust.phase === 'live' ? r.json.trust.keeper : undefined;
    },
    60_000,
  );
  assert.equal(k.rows, before.present);
  for (const u of urls) assert.deepEqual(await held(u), before.out.get(u), u);
});
