// Feeding input, per item (docs/feeding.md): what a URL, a due time and a cadence may be.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  MAX_CADENCE_MS,
  MIN_CADENCE_MS,
  MIN_DUE_AT,
  checkTargetsBody as checkTargetsOrProblem,
  checkUrlList as checkUrlListOrProblem,
  checkSingleUrl as checkSingleUrlOrProblem,
  urlProblem,
} from '../../util/schedule/targetChecks.js';
import { HttpError } from '../../services/runtime/httpError.js';
import { orRefuse } from '../../services/http/problems.js';

// The checks as the routes answer them: a problem thrown as its HTTP answer.
const checkTargetsBody = (...a: Parameters<typeof checkTargetsOrProblem>) =>
  orRefuse(checkTargetsOrProblem(...a));
const checkUrlList = (...a: Parameters<typeof checkUrlListOrProblem>) =>
  orRefuse(checkUrlListOrProblem(...a));
const checkSingleUrl = (...a: Parameters<typeof checkSingleUrlOrProblem>) =>
  orRefuse(checkSingleUrlOrProblem(...a));

const NOW = Date.UTC(2026, 11, 1);
const YEAR = 365.25 * 86_400_000;

test('a URL with a lone surrogate is refused per item (it would be stored as U+FFFD and never read back)', () => {
  for (const u of ['https://a.co/p/1\ud800', 'https://a.co/\udc00x', 'https://a.co/\udbff'])
    assert.match(urlProblem(u) ?? '', /well-formed Unicode/, JSON.stringify(u));
  // A proper pair is fine.
  assert.equal(urlProblem('https://a.co/\ud83d\ude00'), null);
  const r = checkTargetsBody(
    { targets: [{ url: 'https://a.co/ok' }, { url: 'https://a.co/p/1\ud800' }, { url: 'https://a.co/ok2' }] },
    NOW,
  );
  assert.deepEqual(
    r.accepted.map((a) => a.index),
    [0, 2],
  );
  assert.equal(r.rejected[0]!.index, 1);
});

test('C0, DEL and C1 control characters are refused in targets, delete, discover and single-URL bodies', () => {
  for (const c of ['\u0000', '\u0009', '\u001b', '\u007f', '\u0080', '\u0085', '\u009b', '\u009f']) {
    const u = `https://a.co/x${c}y`;
    assert.match(urlProblem(u) ?? '', /control/, JSON.stringify(c));
    assert.equal(checkUrlList({ urls: [u] }).rejected.length, 1);
    assert.throws(
      () => checkSingleUrl({ url: u }),
      (e) => e instanceof HttpError && e.code === 'invalid_url',
    );
  }
  assert.equal(urlProblem('https://a.co/\u00a0'.slice(0, -1) + 'é'), null);
});

test('due times before 2000 or more than ten years ahead, and non-finite ones, are refused per item', () => {
  const due = (dueAt: unknown) => checkTargetsBody({ targets: [{ url: 'https://a.co/d', dueAt }] }, NOW);
  for (const bad of [0, -1, MIN_DUE_AT - 1, NOW + 10.1 * YEAR, Infinity, -Infinity, NaN, '1767225600000'])
    assert.equal(due(bad).rejected.length, 1, String(bad));
  for (const good of [MIN_DUE_AT, NOW - YEAR, NOW, NOW + 9.9 * YEAR])
    assert.equal(due(good).accepted.length, 1);
});

test('cadences outside the configured bounds (render.defaultInterval range), or not safe integers, are refused', () => {
  const cad = (cadenceMs: unknown) =>
    checkTargetsBody({ targets: [{ url: 'https://a.co/c', cadenceMs }] }, NOW);
  for (const bad of [MIN_CADENCE_MS - 1, MAX_CADENCE_MS + 1, 1.5 * MIN_CADENCE_MS + 0.5, 2 ** 60, Infinity])
    assert.equal(cad(bad).rejected.length, 1, String(bad));
  for (const good of [MIN_CADENCE_MS, MAX_CADENCE_MS]) assert.equal(cad(good).accepted.length, 1);
});
