import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isWellFormed, quotedCut, wellFormed } from '../../util/text.js';

test('wellFormed replaces a lone surrogate and keeps a pair', () => {
  assert.equal(wellFormed('a\uD800b'), 'a\uFFFDb');
  assert.equal(wellFormed('😀'), '😀');
  assert.equal(isWellFormed('a\uDC00'), false);
  assert.equal(isWellFormed('😀'), true);
});

test('quotedCut quotes a short value whole and cuts a long one, never inside a pair', () => {
  assert.equal(quotedCut('line\nforged', 200), '"line\\nforged"');
  assert.equal(quotedCut('abcdef', 3), '"abc…"');
  // The cut falls between the halves of 😀: the high half left alone becomes U+FFFD, so strict parsers read it.
  const cut = quotedCut('ab😀', 3);
  assert.equal(cut, '"ab\uFFFD…"');
  assert.equal(JSON.parse(cut), 'ab\uFFFD…');
});
