import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultConfig } from '../../util/config/schema.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import { scheduleRow } from '../scheduleRow.js';
import { rowAfterVerdict, verdictOf, type VerdictInput } from '../../util/schedule/verdicts.js';
import { startOfMinute } from '../../util/time.js';

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 11, 7, 12, 30, 17);
const URL_A = 'https://example.com/a';
const cfg = defaultConfig();

function row(over: Partial<ScheduleRow> = {}): ScheduleRow {
  return scheduleRow(URL_A, startOfMinute(NOW), over);
}

const input = (over: Partial<VerdictInput>): VerdictInput => ({
  outcome: 'rendered',
  statusCode: 200,
  redirectedTo: null,
  reason: null,
  isIndexable: null,
  ...over,
});
const same = (to: string) => to === URL_A;
const result = (outcome: VerdictInput['outcome'], statusCode: number | null) => ({
  completedAt: NOW,
  outcome,
  statusCode,
  error: null,
});

test('an origin error that may recover is a failure strike whatever the outcome says', () => {
  for (const status of [401, 403, 408, 429, 500, 503, 599])
    for (const outcome of ['rendered', 'redirected', 'non-indexable'] as const)
      assert.deepEqual(
        verdictOf(input({ outcome, statusCode: status }), same),
        { kind: 'failure' },
        `${outcome} ${status}`,
      );
});

test('a 301 or 308 to another URL moves the row; any other redirect strikes; one to itself is a render', () => {
  const to = 'https://example.com/b';
  assert.deepEqual(verdictOf(input({ outcome: 'redirected', statusCode: 301, redirectedTo: to }), same), {
    kind: 'moved',
    to,
  });
  assert.deepEqual(verdictOf(input({ outcome: 'redirected', statusCode: 308, redirectedTo: to }), same), {
    kind: 'moved',
    to,
  });
  for (const status of [302, 303, 307])
    assert.deepEqual(
      verdictOf(input({ outcome: 'redirected', statusCode: status, redirectedTo: to }), same),
      {
        kind: 'redirect-strike',
      },
    );
  assert.deepEqual(verdictOf(input({ outcome: 'redirected', statusCode: 301, redirectedTo: URL_A }), same), {
    kind: 'success',
  });
});

test('404 and 410 are gone; a non-indexable page is suppressed with its reason; an indexable render succeeds', () => {
  assert.deepEqual(verdictOf(input({ outcome: 'non-indexable', statusCode: 404 }), same), { kind: 'gone' });
  assert.deepEqual(verdictOf(input({ outcome: 'rendered', statusCode: 410 }), same), { kind: 'gone' });
  assert.deepEqual(verdictOf(input({ outcome: 'non-indexable', reason: 'canonical-mismatch' }), same), {
    kind: 'suppressed',
    reason: 'canonical-mismatch',
  });
  assert.deepEqual(verdictOf(input({ isIndexable: false }), same), { kind: 'suppressed', reason: 'noindex' });
  assert.deepEqual(verdictOf(input({}), same), { kind: 'success' });
});

test('a suppressed row loses its page, comes due at its recheck, and retires at its strike limit', () => {
  let r: ScheduleRow | null = row({ strikes: 2, failingSince: NOW - DAY });
  for (let n = 1; n < cfg.render.suppression.maxStrikes; n++) {
    const w = rowAfterVerdict(
      r!,
      { kind: 'suppressed', reason: 'noindex' },
      result('non-indexable', 200),
      cfg,
    );
    assert.equal(w.page, 'delete');
    assert.equal(w.retired, null);
    assert.equal(w.row?.state, 'suppressed');
    assert.equal(w.row?.reason, 'noindex');
    assert.equal(w.row?.suppressionStrikes, n);
    assert.equal(w.row?.strikes, 0, 'a verdict ends the run of failures');
    assert.equal(w.row?.nextRenderTime, startOfMinute(NOW) + cfg.render.suppression.recheckInterval);
    r = w.row;
  }
  const last = rowAfterVerdict(
    r!,
    { kind: 'suppressed', reason: 'noindex' },
    result('non-indexable', 200),
    cfg,
  );
  assert.deepEqual([last.row, last.retired, last.page], [null, 'suppressed', 'delete']);
});

test('a gone row rechecks after its own interval and retires after render.gone.maxStrikes', () => {
  const first = rowAfterVerdict(row(), { kind: 'gone' }, result('non-indexable', 404), cfg);
  assert.equal(first.row?.state, 'gone');
  assert.equal(first.row?.nextRenderTime, startOfMinute(NOW) + cfg.render.gone.recheckInterval);
  const second = rowAfterVerdict(first.row!, { kind: 'gone' }, result('non-indexable', 404), cfg);
  assert.deepEqual([second.row, second.retired], [null, 'gone']);
});

test('redirect strikes come due a cadence out and retire at render.redirects.maxStrikes', () => {
  let r = row();
  for (let n = 1; n < cfg.render.redirects.maxStrikes; n++) {
    const w = rowAfterVerdict(r, { kind: 'redirect-strike' }, result('redirected', 302), cfg);
    assert.equal(w.row?.redirectStrikes, n);
    assert.equal(w.page, 'keep');
    assert.equal(w.row?.nextRenderTime, startOfMinute(NOW) + cfg.render.defaultInterval);
    r = w.row!;
  }
  const last = rowAfterVerdict(r, { kind: 'redirect-strike' }, result('redirected', 302), cfg);
  assert.deepEqual([last.row, last.retired], [null, 'redirect-strikes']);
});

test('an indexable render reactivates a parked row and resets every strike counter', () => {
  const parked = row({ state: 'gone', reason: 'http-error', suppressionStrikes: 1, redirectStrikes: 2 });
  const w = rowAfterVerdict(parked, { kind: 'success' }, result('rendered', 200), cfg);
  assert.equal(w.page, 'store');
  assert.deepEqual(
    [w.row?.state, w.row?.reason, w.row?.suppressionStrikes, w.row?.redirectStrikes, w.row?.strikes],
    ['active', null, 0, 0, 0],
  );
});

test('a failure strikes as before and never touches the stored page or the state', () => {
  const parked = row({ state: 'suppressed', reason: 'noindex', suppressionStrikes: 1 });
  const w = rowAfterVerdict(parked, { kind: 'failure' }, result('rendered', 503), cfg);
  assert.equal(w.page, 'keep');
  assert.equal(w.row?.strikes, 1);
  assert.equal(w.row?.state, 'suppressed');
  assert.equal(w.retired, null);
});
