// The media type rule of a state-changing request (services/http/requestChecks.ts, docs/http-api.md,
// "What is refused, and why"): application/json, a charset allowed where it names UTF-8 or its subset US-ASCII.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mediaTypeProblem } from '../../services/http/requestChecks.js';

const headers = (h: Record<string, string>) => (name: string) => h[name];

test('a JSON body may name its charset as UTF-8 or US-ASCII; any other charset or type is refused', () => {
  for (const ct of [
    'application/json',
    'application/json; charset=utf-8',
    'Application/JSON; Charset="UTF-8"',
    'application/json;charset=utf8',
    'application/json; charset=us-ascii',
    'application/json; charset="US-ASCII"',
  ])
    assert.equal(mediaTypeProblem(headers({ 'content-type': ct }), false).problem, null, ct);
  for (const ct of [
    'application/json; charset=latin1',
    'application/json; charset=iso-8859-1',
    'application/json; charset=utf-16',
    'text/plain',
    'application/octet-stream',
  ])
    assert.match(
      mediaTypeProblem(headers({ 'content-type': ct }), false).problem ?? '',
      /content-type must be/,
      ct,
    );
  assert.deepEqual(mediaTypeProblem(headers({ 'content-type': 'application/octet-stream' }), true), {
    problem: null,
    octet: true,
  });
});
