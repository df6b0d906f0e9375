// Row keys per URL and device (util/schedule/rowKey.ts): the last `|` splits a key, a URL may hold `|` of
// its own, and the hash that names a row in the lease table and decides its cluster owner takes its owner
// half from the URL alone, so every device's row of a URL lives on one node.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  deviceOfKey,
  deviceSuffixes,
  keyOfDevices,
  rowHash,
  rowKey,
  rowKeys,
  splitRowKey,
  urlOfKey,
} from '../../util/schedule/rowKey.js';
import { keyHash } from '../../util/keyHash.js';
import { Ownership } from '../../util/cluster/ownership.js';

const device = fc.stringMatching(/^[a-z][a-z0-9-]{0,31}$/);
const url = fc.webUrl({ withQueryParameters: true, withFragments: false }).map((u) => u.slice(0, 1900));

test('a key splits back into its URL and device, whatever `|` the URL holds', () => {
  fc.assert(
    fc.property(url, fc.constantFrom('', '|', '|x', '|desktop'), device, (u, extra, d) => {
      const withBar = u + extra;
      const key = rowKey(withBar, d);
      assert.deepEqual(splitRowKey(key), { url: withBar, device: d });
      assert.equal(urlOfKey(key), withBar);
      assert.equal(deviceOfKey(key), d);
    }),
  );
  assert.equal(splitRowKey('https://x.test/a'), null, 'a bare URL carries no device');
  assert.equal(splitRowKey('https://x.test/a|Desk top'), null, 'nor does a suffix that is no device name');
  assert.equal(urlOfKey('https://x.test/a'), 'https://x.test/a');
  assert.deepEqual(rowKeys('https://x.test/a', ['desktop', 'mobile']), [
    'https://x.test/a|desktop',
    'https://x.test/a|mobile',
  ]);
});

test('keyOfDevices matches a configured device suffix only', () => {
  const suffixes = deviceSuffixes(['desktop', 'mobile']);
  assert.equal(keyOfDevices('https://x.test/a|desktop', suffixes), true);
  assert.equal(keyOfDevices('https://x.test/a|mobile', suffixes), true);
  assert.equal(keyOfDevices('https://x.test/a|tablet', suffixes), false);
  assert.equal(keyOfDevices('https://x.test/a', suffixes), false);
});

test("every device's row of a URL has the URL's owner, and two devices are two leases", () => {
  const nodes = ['node-a', 'node-b', 'node-c'];
  const views = nodes.map((n) => new Ownership(nodes, n));
  fc.assert(
    fc.property(url, device, device, (u, d1, d2) => {
      const a = rowHash(rowKey(u, d1));
      const b = rowHash(rowKey(u, d2));
      assert.equal(a.hi, keyHash(u).hi, 'the high half is the URL');
      if (d1 !== d2) assert.notEqual(a.lo, b.lo, "two devices' rows are two lease keys");
      assert.equal(views[0]!.ownerOf(rowKey(u, d1)), views[0]!.ownerOf(rowKey(u, d2)));
      assert.equal(views[0]!.ownerOf(rowKey(u, d1)), views[0]!.ownerOf(u), "a bare URL's owner too");
      assert.equal(views.filter((v) => v.owns(rowKey(u, d1))).length, 1, 'exactly one node owns it');
    }),
  );
});

test('ownership by the URL half still spreads rows evenly over the nodes', () => {
  const nodes = ['node-a', 'node-b', 'node-c'];
  const view = new Ownership(nodes, 'node-a');
  const counts = new Map<string, number>();
  for (let i = 0; i < 30_000; i++) {
    const owner = view.ownerOf(rowKey(`https://shop.test/p/${i}`, 'desktop'));
    counts.set(owner, (counts.get(owner) ?? 0) + 1);
  }
  for (const n of nodes) {
    const share = (counts.get(n) ?? 0) / 30_000;
    assert.ok(Math.abs(share - 1 / 3) < 0.02, `${n} owns ${share}`);
  }
});
