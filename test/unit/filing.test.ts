// Filing (services/http/filing.ts): what the feeding routes and the in-process API both answer, over a
// fake schedule owner and page store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Filing } from '../../services/http/filing.js';
import { HttpError } from '../../services/runtime/httpError.js';
import type { ScheduleRow, TargetInput } from '../../util/schedule/rules.js';

const NOW = Date.UTC(2026, 2, 1, 12, 0, 0);

function world() {
  const filed: TargetInput[][] = [];
  const deletedRows: string[][] = [];
  const deletedPages: string[][] = [];
  const rows = new Map<string, Pick<ScheduleRow, 'nextRenderTime' | 'urgentAt'>>();
  const filing = new Filing({
    fileTargets: async (targets) => {
      filed.push([...targets]);
      return targets.length;
    },
    deleteTargets: async (urls) => {
      deletedRows.push([...urls]);
      const gone = urls.filter((u) => rows.delete(u));
      return { urls: gone.length, keys: gone.map((u) => `${u}|desktop`) };
    },
    revalidate: async (url, now) => {
      const row = rows.get(url);
      if (!row) return [];
      const next = { cacheKey: `${url}|desktop`, nextRenderTime: now, urgentAt: now };
      rows.set(url, next);
      return [next as ScheduleRow];
    },
    deletePages: async (keys) => {
      deletedPages.push(keys);
      return 0;
    },
    pageKeysOfUrl: (url) => [`${url}|tv`],
  });
  return { filing, filed, deletedRows, deletedPages, rows };
}

test('filing hands the accepted targets to the schedule owner and lists the refused ones by index', async () => {
  const w = world();
  const answer = await w.filing.fileTargets(
    { targets: [{ url: 'https://a.example/1' }, { url: 'ftp://a.example/2' }] },
    NOW,
  );
  assert.equal(answer.upserted, 1);
  assert.deepEqual(
    answer.rejected.map((r) => r.index),
    [1],
  );
  assert.deepEqual(
    w.filed.map((batch) => batch.map((t) => t.url)),
    [['https://a.example/1']],
  );
});

test("a malformed body is refused with the route's status and code, and reaches no owner", async () => {
  const w = world();
  await assert.rejects(w.filing.fileTargets({ targets: 'x' }, NOW), (e: unknown) => {
    assert.ok(e instanceof HttpError);
    assert.deepEqual([e.status, e.statusCode, e.code], [400, 400, 'invalid_body']);
    return true;
  });
  await assert.rejects(w.filing.deleteTargets({ url: 'x' }), HttpError);
  assert.deepEqual([w.filed, w.deletedRows], [[], []]);
});

test('deleting takes the rows and their pages, and says `rejected` only when something was refused', async () => {
  const w = world();
  w.rows.set('https://a.example/1', { nextRenderTime: NOW, urgentAt: null });
  assert.deepEqual(await w.filing.deleteTargets({ urls: ['https://a.example/1'] }), { deleted: 1 });
  // The deleted rows' pages, and the pages of the URL's other devices (here a device no longer configured).
  assert.deepEqual(w.deletedPages, [['https://a.example/1|desktop', 'https://a.example/1|tv']]);
  const mixed = await w.filing.deleteTargets({ urls: ['https://a.example/2', 7] });
  assert.equal(mixed.deleted, 0);
  assert.equal(mixed.rejected?.length, 1);
});

test('revalidating answers the row due now and urgent, and 404 not_found without one', async () => {
  const w = world();
  w.rows.set('https://a.example/1', { nextRenderTime: NOW + 86_400_000, urgentAt: null });
  assert.deepEqual(await w.filing.revalidate({ url: 'https://a.example/1' }, NOW), {
    url: 'https://a.example/1',
    nextRenderTime: NOW,
    urgentAt: NOW,
    devices: [{ deviceType: 'desktop', nextRenderTime: NOW, urgentAt: NOW }],
  });
  await assert.rejects(w.filing.revalidate({ url: 'https://a.example/none' }, NOW), (e: unknown) => {
    assert.ok(e instanceof HttpError);
    assert.deepEqual([e.status, e.code], [404, 'not_found']);
    return true;
  });
});
