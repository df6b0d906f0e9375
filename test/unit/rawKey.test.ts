// Schedule keys read flat from their stored bytes (util/schedule/rawKey.ts): only printable ASCII, the
// bytes ordered-binary stores such a string key as, is read here; anything else is left to the store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { printableKey } from '../../util/schedule/rawKey.js';

test('a printable-ASCII key inside a larger key buffer reads back as one flat string of exactly its bytes', () => {
  const url = 'https://www.example-shop.com/catalog/products/item-1a-abcdefghij?x=1&y=~2';
  const buf = Buffer.alloc(4096, 0xff);
  buf.write(url, 32, 'latin1');
  assert.equal(printableKey(buf, 32, 32 + url.length), url);
  assert.equal(printableKey(buf, 32, 40), url.slice(0, 8));
});

test('bytes that are not printable ASCII, an empty key or a non-Buffer are left to the store', () => {
  const of = (bytes: number[]) => printableKey(Buffer.from(bytes), 0, bytes.length);
  assert.equal(of([0x68, 0x74, 0xc3, 0xa9]), undefined, 'UTF-8');
  assert.equal(of([0x68, 0x04, 0x01]), undefined, 'an escape byte');
  assert.equal(of([0x68, 0x00, 0x69]), undefined, 'a multi-part key separator');
  assert.equal(of([27, 0x68]), undefined, 'a string escaped with 27');
  assert.equal(of([0x7f]), undefined, 'DEL');
  assert.equal(of([]), undefined, 'empty');
  assert.equal(printableKey(Uint8Array.from([0x68, 0x69]), 0, 2), undefined, 'not a Buffer');
});
