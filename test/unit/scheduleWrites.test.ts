// Per-key atomic read-modify-write of RenderSchedule. Each test injects the competing
// write at the worst moment — after this write read its rows and before it wrote them — through the
// store's afterRead seam. Every scenario is also run over a store whose lock does nothing (the guard
// removed): there the lost update happens, so the scenario itself can tell a racy writer from a safe one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '../../util/config/schema.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import { scheduleRow } from '../scheduleRow.js';
import { ScheduleWrites, type ScheduleStore, type ScheduleWrite } from '../../util/schedule/writes.js';
import { rowKey, splitRowKey } from '../../util/schedule/rowKey.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const cfg = () => defaultConfig();
/** The key of a URL's row for the default device. */
const K = (url: string) => rowKey(url, 'desktop');

/** An in-memory RenderSchedule with lmdb-like per-key locks (or none, for the guard-removed runs). */
class FakeSchedule implements ScheduleStore {
  readonly rows = new Map<string, ScheduleRow>();
  readonly retired: ScheduleWrite[] = [];
  private readonly held = new Map<string, Promise<void>>();
  afterRead?: (keys: readonly string[]) => Promise<void> | void;
  constructor(private readonly locking: boolean) {}

  read(key: string): ScheduleRow | undefined {
    return this.rows.get(key);
  }

  keysOfUrl(url: string): string[] {
    return [...this.rows.keys()].filter((k) => splitRowKey(k)?.url === url);
  }

  /** Bare-URL rows the upgrade has not moved yet (moved to `desktop`). */
  readonly bare = new Map<string, ScheduleRow>();
  bareRow(key: string): ScheduleRow | undefined {
    const parts = splitRowKey(key);
    const row = parts?.device === 'desktop' ? this.bare.get(parts.url) : undefined;
    return row && { ...row, cacheKey: key };
  }

  async locked<T>(keys: readonly string[], fn: () => Promise<T>): Promise<T> {
    if (!this.locking) return fn();
    const mine: Array<() => void> = [];
    const ordered = [...new Set(keys)].sort();
    try {
      for (const key of ordered) {
        while (this.held.has(key)) await this.held.get(key);
        let release!: () => void;
        this.held.set(
          key,
          new Promise<void>((r) => {
            release = () => {
              this.held.delete(key);
              r();
            };
          }),
        );
        mine.push(release);
      }
      return await fn();
    } finally {
      for (const release of mine) release();
    }
  }

  async commit(writes: readonly ScheduleWrite[]): Promise<void> {
    await Promise.resolve();
    for (const w of writes) {
      if (w.row) this.rows.set(w.key, w.row);
      else this.rows.delete(w.key);
      if (w.retired) this.retired.push(w);
    }
  }
}

/** Runs `other` once, the first time the writer under test has read `key` and not yet written it. */
function interleaveOnce(
  store: FakeSchedule,
  key: string,
  other: () => Promise<unknown>,
): { done: Promise<unknown> } {
  let started = false;
  const result = { done: Promise.resolve() as Promise<unknown> };
  store.afterRead = async (keys) => {
    if (started || !keys.includes(key)) return;
    started = true;
    result.done = other();
    // Give the other writer every chance to run to its end before this one writes (it cannot while
    // the keys are locked; it does without the lock).
    for (let i = 0; i < 20; i++) await Promise.resolve();
    await new Promise((r) => setImmediate(r));
  };
  return result;
}

async function seeded(locking: boolean, urls: string[]): Promise<{ store: FakeSchedule; w: ScheduleWrites }> {
  const store = new FakeSchedule(locking);
  const w = new ScheduleWrites(store, cfg, 2);
  await w.fileTargets(
    urls.map((url) => ({ url, dueAt: NOW - 120_000 })),
    NOW - 60_000,
  );
  return { store, w };
}

async function resultDuringDelete(locking: boolean): Promise<boolean> {
  const url = 'https://example.com/a';
  const { store, w } = await seeded(locking, [url]);
  const other = interleaveOnce(store, K(url), () => w.deleteTargets([url]));
  await w.applyResults([{ key: K(url), outcome: 'rendered', statusCode: 200, completedAt: NOW }]);
  await other.done;
  return store.rows.has(K(url));
}

test('a result applied while the target is deleted never brings the row back', async () => {
  assert.equal(await resultDuringDelete(true), false);
  assert.equal(await resultDuringDelete(false), true, 'without the lock the deleted row comes back');
});

test('a delete that read the row before a result landed still deletes it, and the result finds nothing', async () => {
  const url = 'https://example.com/a';
  const { store, w } = await seeded(true, [url]);
  let applied: unknown;
  const other = interleaveOnce(store, K(url), async () => {
    applied = await w.applyResults([{ key: K(url), outcome: 'failed', statusCode: 500, completedAt: NOW }]);
  });
  assert.equal((await w.deleteTargets([url])).urls, 1);
  await other.done;
  assert.equal(store.rows.has(K(url)), false);
  assert.deepEqual(applied, [{ found: false }]);
});

async function discoverDuringFiling(locking: boolean): Promise<boolean | undefined> {
  const url = 'https://example.com/new';
  const store = new FakeSchedule(locking);
  const w = new ScheduleWrites(store, cfg);
  const other = interleaveOnce(store, K(url), () => w.fileTargets([{ url, fromSitemap: true }], NOW));
  await w.discoverUrls([url], NOW);
  await other.done;
  return store.rows.get(K(url))?.verified;
}

test('discover racing a feeder never overwrites a verified row with an unverified one', async () => {
  assert.equal(await discoverDuringFiling(true), true);
  assert.equal(
    await discoverDuringFiling(false),
    false,
    'without the lock discover wins with verified: false',
  );
});

async function resultDuringBigBatch(locking: boolean, during: number): Promise<number> {
  const urls = Array.from({ length: 6 }, (_, i) => `https://example.com/p/${i}`);
  const { store, w } = await seeded(locking, urls);
  const last = urls[5]!;
  // The feeder re-files all six (chunks of 2) while a result for the last one lands during the chunk
  // that holds urls[during]. The old writer read every row up front and so wrote the pre-result row
  // back (due again, rendered twice) whichever chunk the result landed in.
  const other = interleaveOnce(store, K(urls[during]!), () =>
    w.applyResults([{ key: K(last), outcome: 'rendered', statusCode: 200, completedAt: NOW }]),
  );
  await w.fileTargets(
    urls.map((url) => ({ url })),
    NOW,
  );
  await other.done;
  return store.rows.get(K(last))!.nextRenderTime;
}

test('a result that lands between the chunks of a large batch is not rolled back to due-now', async () => {
  assert.ok((await resultDuringBigBatch(true, 0)) > NOW, 'read in its own chunk, after the result');
  assert.ok((await resultDuringBigBatch(true, 5)) > NOW, 'locked in its own chunk: the result waits');
  assert.ok(
    (await resultDuringBigBatch(false, 5)) <= NOW,
    'without the lock a result inside the chunk is rolled back to due',
  );
});

test('entries for one URL within a batch apply in order, last wins', async () => {
  const store = new FakeSchedule(true);
  const w = new ScheduleWrites(store, cfg, 2);
  const url = 'https://example.com/a';
  await w.fileTargets(
    [{ url, cadenceMs: 3_600_000 }, { url: 'https://example.com/b' }, { url, cadenceMs: 7_200_000 }],
    NOW,
  );
  assert.equal(store.rows.get(K(url))!.effectiveInterval, 7_200_000);
  assert.equal(store.rows.size, 2);
});

test('delete counts only rows that existed and revalidate of a missing row writes nothing', async () => {
  const { store, w } = await seeded(true, ['https://example.com/a']);
  assert.equal(
    (await w.deleteTargets(['https://example.com/a', 'https://example.com/a', 'https://example.com/x'])).urls,
    1,
  );
  assert.deepEqual(await w.revalidate('https://example.com/x', NOW), []);
  assert.equal(store.rows.size, 0);
});

test('a permanent redirect retires the row with its entry in the same commit and files the destination once', async () => {
  const store = new FakeSchedule(true);
  const w = new ScheduleWrites(store, cfg);
  const src = 'https://example.com/old';
  const dest = 'https://example.com/new';
  await w.fileTargets([{ url: src, cadenceMs: 3_600_000, fromSitemap: true }], NOW);
  const [applied] = await w.applyResults([
    {
      key: K(src),
      outcome: 'redirected',
      statusCode: 301,
      completedAt: NOW,
      redirectedTo: dest,
      fileDestination: dest,
    },
  ]);
  assert.deepEqual(applied, {
    found: true,
    row: null,
    keepLease: false,
    page: 'delete',
    retired: 'redirect',
  });
  assert.equal(store.rows.has(K(src)), false);
  assert.equal(store.retired.length, 1);
  assert.deepEqual(store.retired[0]!.retired, {
    url: src,
    deviceType: 'desktop',
    reason: 'redirect',
    queue: 'unrouted',
    lastStatusCode: 301,
    retiredAt: NOW,
  });
  const filed = store.rows.get(K(dest))!;
  assert.equal(filed.effectiveInterval, 3_600_000, "the source's cadence");
  assert.equal(filed.fromSitemap, true);
  assert.ok(filed.nextRenderTime <= NOW, 'due now');
  // A destination that already has a row is left as it is.
  await w.fileTargets([{ url: src }], NOW);
  store.rows.set(K(dest), { ...filed, nextRenderTime: NOW + 86_400_000 });
  await w.applyResults([
    {
      key: K(src),
      outcome: 'redirected',
      statusCode: 308,
      completedAt: NOW,
      redirectedTo: dest,
      fileDestination: dest,
    },
  ]);
  assert.equal(store.rows.get(K(dest))!.nextRenderTime, NOW + 86_400_000);
});

/** Writes over render.deviceTypes [desktop, mobile]. */
function twoDevices(): { store: FakeSchedule; w: ScheduleWrites } {
  const store = new FakeSchedule(true);
  const config = () => {
    const c = defaultConfig();
    c.render.deviceTypes = ['desktop', 'mobile'];
    return c;
  };
  return { store, w: new ScheduleWrites(store, config) };
}

test('filing a URL files a row per configured device, both due in the same minute', async () => {
  const { store, w } = twoDevices();
  const url = 'https://example.com/d';
  await w.fileTargets([{ url, cadenceMs: 86_400_000 }], NOW);
  const d = store.rows.get(rowKey(url, 'desktop'))!;
  const m = store.rows.get(rowKey(url, 'mobile'))!;
  assert.equal(store.rows.size, 2);
  assert.equal(d.nextRenderTime, m.nextRenderTime, 'the spread is taken from the URL');
  assert.equal(m.cacheKey, rowKey(url, 'mobile'));
});

test('delete and revalidate act on every device of a URL, a device no longer configured included', async () => {
  const { store, w } = twoDevices();
  const url = 'https://example.com/all';
  await w.fileTargets([{ url, cadenceMs: 86_400_000 }], NOW);
  store.rows.set(rowKey(url, 'tablet'), {
    ...store.rows.get(rowKey(url, 'desktop'))!,
    cacheKey: rowKey(url, 'tablet'),
  });
  const due = await w.revalidate(url, NOW);
  assert.deepEqual(due.map((r) => r.cacheKey).sort(), [
    rowKey(url, 'desktop'),
    rowKey(url, 'mobile'),
    rowKey(url, 'tablet'),
  ]);
  assert.ok(due.every((r) => r.nextRenderTime <= NOW && r.urgentAt === NOW));
  const gone = await w.deleteTargets([url]);
  assert.equal(gone.urls, 1, 'one URL');
  assert.equal(gone.keys.length, 3, 'three rows');
  assert.equal(store.rows.size, 0);
});

test('a 301 on the mobile row retires it alone and files the destination for every device', async () => {
  const { store, w } = twoDevices();
  const src = 'https://example.com/m';
  const dest = 'https://m.example.com/m';
  await w.fileTargets([{ url: src, cadenceMs: 3_600_000 }], NOW);
  const [a] = await w.applyResults([
    {
      key: rowKey(src, 'mobile'),
      outcome: 'redirected',
      statusCode: 301,
      completedAt: NOW,
      redirectedTo: dest,
      fileDestination: dest,
    },
  ]);
  assert.equal(a!.found && a!.retired, 'redirect');
  assert.ok(store.rows.has(rowKey(src, 'desktop')), 'the desktop row stays');
  assert.ok(!store.rows.has(rowKey(src, 'mobile')));
  assert.equal(store.retired[0]!.key, rowKey(src, 'mobile'));
  assert.equal(store.retired[0]!.retired!.deviceType, 'mobile');
  assert.ok(store.rows.has(rowKey(dest, 'desktop')) && store.rows.has(rowKey(dest, 'mobile')));
});

test('discover files only the devices it may, and counts URLs', async () => {
  const { store, w } = twoDevices();
  const url = 'https://example.com/disc';
  const filed = await w.discoverUrls([url, url], NOW, (key) => !key.endsWith('|mobile'));
  assert.equal(filed, 1);
  assert.deepEqual([...store.rows.keys()], [rowKey(url, 'desktop')]);
});

test("an added device's row is made from another device's row: same minute, cadence and sitemap link, no history", async () => {
  const { store, w } = twoDevices();
  const url = 'https://example.com/add';
  await w.fileTargets([{ url, cadenceMs: 3_600_000, fromSitemap: true }], NOW);
  const source = {
    ...store.rows.get(rowKey(url, 'desktop'))!,
    strikes: 3,
    lastOutcome: 'failed',
    sitemapId: 's1',
    sitemapLastmod: 5,
  };
  assert.equal(await w.fileDeviceRows([{ key: rowKey(url, 'tablet'), source }]), 1);
  const t = store.rows.get(rowKey(url, 'tablet'))!;
  assert.equal(t.nextRenderTime, source.nextRenderTime);
  assert.deepEqual(
    [t.effectiveInterval, t.fromSitemap, t.verified, t.sitemapId, t.sitemapLastmod, t.strikes, t.lastOutcome],
    [3_600_000, true, true, 's1', 5, 0, null],
  );
  assert.equal(await w.fileDeviceRows([{ key: rowKey(url, 'tablet'), source }]), 0, 'never over a row');
});

test("while the upgrade has not moved a URL's bare row, filing it writes the device row from that row and keeps its history", async () => {
  // Without the fallback, a feeder filing the URL mid-upgrade writes a fresh row and the upgrade then
  // keeps that one: the failure history of the bare row is lost.
  const { store, w } = twoDevices();
  const url = 'https://example.com/old-layout';
  const bare = {
    ...scheduleRow(url, NOW + 86_400_000),
    strikes: 3,
    lastOutcome: 'failed',
    failingSince: NOW - 1000,
  };
  store.bare.set(url, bare);
  await w.fileTargets([{ url, cadenceMs: 3_600_000 }], NOW);
  const d = store.rows.get(rowKey(url, 'desktop'))!;
  assert.deepEqual(
    [d.cacheKey, d.strikes, d.lastOutcome, d.failingSince],
    [rowKey(url, 'desktop'), 3, 'failed', NOW - 1000],
  );
  assert.equal(d.effectiveInterval, 3_600_000, "the feeder's change applies on top");
  assert.equal(
    store.rows.get(rowKey(url, 'mobile'))!.strikes,
    0,
    'only the device the upgrade moves to stands for it',
  );
});
