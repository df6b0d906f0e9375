// SSRF rules for hook URLs (docs/wakes.md, "Where a hook may point"). The resolver is a fake table: nothing here touches the network.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  checkAddresses,
  classifyAddress,
  parseAllowList,
  redactUrl,
  validateHookUrl,
  type HookUrlPolicy,
} from '../../util/notify/addressPolicy.js';

const PUBLIC4 = '93.184.216.34';
const PUBLIC6 = '2606:2800:220:1:248:1893:25c8:1946';
/** Stand-ins for this server's own addresses: one public, one private. */
const SELF_PUBLIC = '52.10.20.30';
const SELF_PRIVATE = '10.0.0.5';

const DNS: Record<string, string[]> = {
  'public.example': [PUBLIC4],
  'public6.example': [PUBLIC6],
  'dual.example': [PUBLIC4, PUBLIC6],
  'mixed.example': [PUBLIC4, '10.0.0.7'],
  'mixed6.example': [PUBLIC6, 'fd12:3456::1'],
  'loop.example': ['127.0.0.1'],
  'loop6.example': ['::1'],
  localhost: ['127.0.0.1', '::1'],
  'mapped.example': ['::ffff:127.0.0.1'],
  'mappedhex.example': ['::ffff:a00:1'],
  'meta.example': ['169.254.169.254'],
  'meta6.example': ['fd00:ec2::254'],
  'linklocal.example': ['fe80::1%eth0'],
  'cgnat.example': ['100.64.12.34'],
  'multicast.example': ['224.0.0.251'],
  'multicast6.example': ['ff02::1'],
  'broadcast.example': ['255.255.255.255'],
  'zero.example': ['0.0.0.0'],
  'nat64.example': ['64:ff9b::192.168.1.1'],
  'sixtofour.example': ['2002:a00:1::1'],
  'ula.example': ['fd12:3456:789a::1'],
  'private172.example': ['172.16.5.4'],
  'private192.example': ['192.168.0.10'],
  'doc.example': ['192.0.2.10'],
  'self.example': [PUBLIC4, SELF_PUBLIC],
  'selfprivate.example': [SELF_PRIVATE],
  'empty.example': [],
};

let resolveCalls = 0;
async function fakeResolve(host: string): Promise<string[]> {
  resolveCalls++;
  const answer = DNS[host];
  // The message names an address on purpose: a phrase that echoed it would fail the leak check below.
  if (answer === undefined) throw new Error(`getaddrinfo ENOTFOUND ${host} via 10.9.8.7`);
  return answer;
}

function policy(over: Partial<HookUrlPolicy> = {}): HookUrlPolicy {
  return {
    allowHttp: false,
    allowList: [],
    selfAddresses: [SELF_PUBLIC, SELF_PRIVATE, '127.0.0.1', '::1'],
    resolve: fakeResolve,
    ...over,
  };
}

const LOOPBACK = 'resolves to a loopback address';
const PRIVATE = 'resolves to a private address';
const LINK_LOCAL = 'resolves to a link-local address';
const METADATA = 'resolves to a cloud metadata address';
const UNSPECIFIED = 'resolves to an unspecified address';
const MULTICAST = 'resolves to a multicast address';
const SELF = 'resolves to this server';

interface Hostile {
  url: string;
  phrase: string;
  allowHttp?: boolean;
  allow?: string[];
}

const HOSTILE: Hostile[] = [
  // DNS answers
  { url: 'https://loop.example/', phrase: LOOPBACK },
  { url: 'https://loop6.example/', phrase: LOOPBACK },
  { url: 'https://localhost/', phrase: LOOPBACK },
  { url: 'https://mixed.example/?token=SECRET', phrase: PRIVATE },
  { url: 'https://mixed6.example/', phrase: PRIVATE },
  { url: 'https://mapped.example/', phrase: LOOPBACK },
  { url: 'https://mappedhex.example/', phrase: PRIVATE },
  { url: 'https://meta.example/', phrase: METADATA },
  { url: 'https://meta6.example/', phrase: METADATA },
  { url: 'https://linklocal.example/', phrase: LINK_LOCAL },
  { url: 'https://cgnat.example/', phrase: 'resolves to a shared (CGNAT) address' },
  { url: 'https://multicast.example/', phrase: MULTICAST },
  { url: 'https://multicast6.example/', phrase: MULTICAST },
  { url: 'https://broadcast.example/', phrase: 'resolves to a broadcast address' },
  { url: 'https://zero.example/', phrase: UNSPECIFIED },
  { url: 'https://nat64.example/', phrase: PRIVATE },
  { url: 'https://sixtofour.example/', phrase: PRIVATE },
  { url: 'https://ula.example/', phrase: PRIVATE },
  { url: 'https://private172.example/', phrase: PRIVATE },
  { url: 'https://private192.example/', phrase: PRIVATE },
  { url: 'https://doc.example/', phrase: 'resolves to a documentation address' },
  { url: 'https://self.example/', phrase: SELF },
  { url: 'https://selfprivate.example/', phrase: SELF },
  { url: 'https://empty.example/', phrase: 'does not resolve' },
  { url: 'https://unknown.example/?key=SECRET', phrase: 'does not resolve' },
  // literal hosts in every notation
  { url: 'https://127.0.0.1/', phrase: LOOPBACK },
  { url: 'https://2130706433/', phrase: LOOPBACK },
  { url: 'https://017700000001/', phrase: LOOPBACK },
  { url: 'https://0177.0.0.1/', phrase: LOOPBACK },
  { url: 'https://0x7f.1/', phrase: LOOPBACK },
  { url: 'https://0x7f000001/', phrase: LOOPBACK },
  { url: 'https://127.1/', phrase: LOOPBACK },
  { url: 'https://127.0.0.1./', phrase: LOOPBACK },
  { url: 'https://%31%32%37.0.0.1/', phrase: LOOPBACK },
  { url: 'https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/', phrase: LOOPBACK },
  { url: 'https://0.0.0.0/', phrase: UNSPECIFIED },
  { url: 'https://0/', phrase: UNSPECIFIED },
  { url: 'https://[::]/', phrase: UNSPECIFIED },
  { url: 'https://[::1]/', phrase: LOOPBACK },
  { url: 'https://[fe80::1%25eth0]/', phrase: 'is not a valid URL' },
  { url: 'https://[fe80::1]/', phrase: LINK_LOCAL },
  { url: 'https://[::ffff:127.0.0.1]/', phrase: LOOPBACK },
  { url: 'https://[::ffff:7f00:1]/', phrase: LOOPBACK },
  { url: 'https://[::ffff:169.254.169.254]/', phrase: METADATA },
  { url: 'https://[::127.0.0.1]/', phrase: LOOPBACK },
  { url: 'https://169.254.169.254/latest/meta-data/', phrase: METADATA },
  { url: 'https://[fd00:ec2::254]/', phrase: METADATA },
  { url: 'https://100.100.100.200/', phrase: METADATA },
  { url: 'https://100.64.0.1/', phrase: 'resolves to a shared (CGNAT) address' },
  { url: 'https://224.0.0.1/', phrase: MULTICAST },
  { url: 'https://[ff02::1]/', phrase: MULTICAST },
  { url: 'https://255.255.255.255/', phrase: 'resolves to a broadcast address' },
  { url: 'https://[64:ff9b::10.0.0.1]/', phrase: PRIVATE },
  { url: 'https://[64:ff9b::7f00:1]/', phrase: LOOPBACK },
  { url: 'https://[2002:c0a8:101::1]/', phrase: PRIVATE },
  { url: 'https://[2002:7f00:1::]/', phrase: LOOPBACK },
  { url: 'https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/', phrase: LOOPBACK },
  { url: 'https://10.0.0.1/', phrase: PRIVATE },
  { url: 'https://[fd12::1]/', phrase: PRIVATE },
  { url: 'https://[fec0::1]/', phrase: PRIVATE },
  { url: 'https://240.0.0.1/', phrase: 'resolves to a reserved address' },
  { url: 'https://[5f00::1]/', phrase: 'resolves to a reserved address' },
  { url: `https://${SELF_PUBLIC}/`, phrase: SELF },
  // the URL itself
  { url: 'https://user:pass@public.example/', phrase: 'must not contain credentials' },
  { url: 'https://token@public.example/', phrase: 'must not contain credentials' },
  { url: 'http://public.example/', phrase: 'must use https' },
  { url: 'ftp://public.example/', phrase: 'must use https' },
  { url: 'file:///etc/passwd', phrase: 'must use https' },
  { url: 'javascript:alert(1)', phrase: 'must use https' },
  { url: 'gopher://public.example/', phrase: 'must use http or https', allowHttp: true },
  { url: `https://public.example/${'a'.repeat(2040)}`, phrase: 'is too long' },
  { url: 'not a url?secret=SECRET', phrase: 'is not a valid URL' },
  { url: 'http://127.0.0.1:8080/', phrase: LOOPBACK, allowHttp: true },
  // allow-list entries that must NOT open what they appear to cover
  { url: 'http://127.0.0.1:8080/', phrase: LOOPBACK, allowHttp: true, allow: ['127.0.0.0/8'] },
  { url: 'https://[::1]/', phrase: LOOPBACK, allow: ['::/0', '0.0.0.0/0'] },
  { url: 'https://169.254.169.254/', phrase: METADATA, allow: ['0.0.0.0/0', '169.254.0.0/16'] },
  { url: 'https://[fd00:ec2::254]/', phrase: METADATA, allow: ['fd00::/8'] },
  { url: 'https://169.254.7.7/', phrase: LINK_LOCAL, allow: ['169.254.0.0/16'] },
  { url: 'https://0.0.0.0/', phrase: UNSPECIFIED, allow: ['0.0.0.0/0'] },
  { url: `https://${SELF_PRIVATE}/`, phrase: SELF, allow: ['10.0.0.0/8'] },
  { url: `https://${SELF_PUBLIC}/`, phrase: SELF, allow: ['0.0.0.0/0'] },
  { url: 'https://mixed.example/', phrase: PRIVATE, allow: ['10.0.1.0/24', '127.0.0.1'] },
  { url: 'https://[::ffff:127.0.0.2]/', phrase: LOOPBACK, allow: ['::ffff:127.0.0.0/104'] },
];

test('the hostile table has at least 40 cases', () => {
  assert.ok(HOSTILE.length >= 40, `only ${HOSTILE.length}`);
});

for (const h of HOSTILE) {
  const extra = h.allow ? ` with allow-list ${h.allow.join(',')}` : h.allowHttp ? ' with http allowed' : '';
  test(`${h.url.slice(0, 80)} is refused: ${h.phrase}${extra}`, async () => {
    const verdict = await validateHookUrl(
      h.url,
      policy({ allowHttp: h.allowHttp ?? false, allowList: parseAllowList(h.allow ?? []) }),
    );
    assert.deepEqual(verdict, { ok: false, code: 'invalid_url', phrase: h.phrase });
    // A phrase names a class, never an address, a port or the query.
    assert.match(verdict.phrase, /^[A-Za-z (),-]+$/);
    assert.ok(!verdict.phrase.includes('SECRET'));
  });
}

interface Good {
  url: string;
  addresses: string[];
  allowHttp?: boolean;
  allow?: string[];
}

const GOOD: Good[] = [
  { url: 'https://public.example/hook?token=abc', addresses: [PUBLIC4] },
  { url: 'https://public6.example/', addresses: [PUBLIC6] },
  { url: 'https://dual.example:8443/x', addresses: [PUBLIC4, PUBLIC6] },
  { url: `https://${PUBLIC4}/x`, addresses: [PUBLIC4] },
  { url: 'https://1572395042/', addresses: [PUBLIC4] }, // decimal spelling of PUBLIC4
  { url: 'https://[2606:4700::1111]/', addresses: ['2606:4700::1111'] },
  { url: 'https://[64:ff9b::5db8:d822]/', addresses: ['64:ff9b::5db8:d822'] }, // NAT64 of PUBLIC4
  { url: 'http://public.example/', addresses: [PUBLIC4], allowHttp: true },
  { url: 'http://127.0.0.1:8080/hook', addresses: ['127.0.0.1'], allowHttp: true, allow: ['127.0.0.1'] },
  { url: 'http://127.0.0.1:8080/hook', addresses: ['127.0.0.1'], allowHttp: true, allow: ['127.0.0.1/32'] },
  { url: 'https://[::ffff:127.0.0.1]/', addresses: ['::ffff:7f00:1'], allow: ['127.0.0.1'] },
  { url: 'https://[::1]/', addresses: ['::1'], allow: ['::1/128'] },
  { url: 'https://localhost/', addresses: ['127.0.0.1', '::1'], allow: ['127.0.0.1', '::1'] },
  { url: 'https://169.254.169.254/', addresses: ['169.254.169.254'], allow: ['169.254.169.254'] },
  { url: `https://${SELF_PUBLIC}/`, addresses: [SELF_PUBLIC], allow: [`${SELF_PUBLIC}/32`] },
  { url: 'https://10.1.2.3/', addresses: ['10.1.2.3'], allow: ['10.0.0.0/8'] },
  { url: 'https://mixed.example/', addresses: [PUBLIC4, '10.0.0.7'], allow: ['10.0.0.0/24'] },
  { url: 'https://ula.example/', addresses: ['fd12:3456:789a::1'], allow: ['fd00::/8'] },
  { url: 'https://cgnat.example/', addresses: ['100.64.12.34'], allow: ['100.64.0.0/10'] },
];

for (const g of GOOD) {
  const extra = g.allow ? ` with allow-list ${g.allow.join(',')}` : g.allowHttp ? ' with http allowed' : '';
  test(`${g.url} is accepted${extra}`, async () => {
    const verdict = await validateHookUrl(
      g.url,
      policy({ allowHttp: g.allowHttp ?? false, allowList: parseAllowList(g.allow ?? []) }),
    );
    assert.equal(verdict.ok, true, JSON.stringify(verdict));
    assert.ok(verdict.ok);
    assert.deepEqual(verdict.addresses, g.addresses);
    assert.equal(verdict.url.href, new URL(g.url).href);
  });
}

test('a name is resolved exactly once per validation and a literal not at all', async () => {
  resolveCalls = 0;
  await validateHookUrl('https://dual.example/', policy());
  assert.equal(resolveCalls, 1);
  await validateHookUrl(`https://${PUBLIC4}/`, policy());
  await validateHookUrl('http://public.example/', policy());
  assert.equal(resolveCalls, 1);
});

test('one spelling of an address never classifies differently from another', () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 0xffffffff }), (n) => {
      const bytes = [24, 16, 8, 0].map((s) => (n >>> s) & 255);
      const dotted = bytes.join('.');
      const expected = classifyAddress(dotted);
      const hex = (n >>> 0).toString(16).padStart(8, '0');
      const spellings = [
        String(n),
        '0x' + hex,
        bytes.map((b) => '0' + b.toString(8)).join('.'),
        `${bytes[0]}.${(n & 0xffffff) >>> 0}`,
        `::ffff:${dotted}`,
        `::ffff:${hex.slice(0, 4)}:${hex.slice(4)}`,
        `[::ffff:${dotted}]`,
      ];
      for (const s of spellings) assert.equal(classifyAddress(s), expected, s);
      // Through the URL parser too: the host a socket would actually dial.
      assert.equal(classifyAddress(new URL(`https://${n}/`).hostname), expected);
    }),
  );
});

test('every loopback address in every notation is refused, even under a broad allow-list', async () => {
  const broad = parseAllowList(['127.0.0.0/8', '0.0.0.0/0', '::/0']);
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 0, max: 0xffffff }),
      fc.constantFrom('dec', 'hex', 'oct', 'mapped'),
      async (low, form) => {
        const n = (0x7f000000 | low) >>> 0;
        const bytes = [24, 16, 8, 0].map((s) => (n >>> s) & 255);
        const host = {
          dec: String(n),
          hex: '0x' + n.toString(16),
          oct: bytes.map((b) => '0' + b.toString(8)).join('.'),
          mapped: `[::ffff:${bytes.join('.')}]`,
        }[form];
        const v = await validateHookUrl(`https://${host}/`, policy({ allowList: broad }));
        assert.equal(v.ok, false);
      },
    ),
  );
});

test('a broad entry of any width never opens link-local or metadata', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 31 }),
      fc.constantFrom('169.254.169.254', '169.254.3.4'),
      (p, ip) => {
        const v = checkAddresses([ip], { allowList: parseAllowList([`${ip}/${p}`]), selfAddresses: [] });
        assert.equal(v.ok, false);
      },
    ),
  );
});

test('classes are named for the ranges operators expect', () => {
  const cases: [string, ReturnType<typeof classifyAddress>][] = [
    ['8.8.8.8', null],
    [PUBLIC6, null],
    ['127.255.255.254', 'loopback'],
    ['::1', 'loopback'],
    ['0.1.2.3', 'unspecified'],
    ['172.31.255.255', 'private'],
    ['172.32.0.1', null],
    ['100.127.255.255', 'cgnat'],
    ['100.128.0.0', null],
    ['169.254.170.2', 'metadata'],
    ['fe80::abcd%en0', 'link-local'],
    ['fc00::1', 'ula'],
    ['198.18.0.1', 'reserved'],
    ['203.0.113.9', 'documentation'],
    ['2001:db8::5', 'documentation'],
    ['::8.8.8.8', 'reserved'], // deprecated IPv4-compatible: never routed
    ['2002:808:808::1', null], // 6to4 of a public address
    ['not an address', 'reserved'], // fail closed
  ];
  for (const [ip, cls] of cases) assert.equal(classifyAddress(ip), cls, ip);
});

test('a malformed allow-list entry is refused with the entry named', () => {
  for (const bad of [
    '10.0.0.0/33',
    '10/8',
    '1.2.3',
    '::1/129',
    'fe80::1%eth0',
    'example.com',
    '10.0.0.0/8/1',
  ]) {
    assert.throws(
      () => parseAllowList([bad]),
      (e: Error) => e.message.includes(`"${bad}"`),
      bad,
    );
  }
});

test('an allow-list entry with host bits set covers its whole network', () => {
  const [entry] = parseAllowList(['10.1.2.3/8']);
  assert.equal(entry!.exact, false);
  assert.equal(checkAddresses(['10.200.0.1'], { allowList: [entry!], selfAddresses: [] }).ok, true);
});

test('a redacted URL keeps no query, credentials or fragment', () => {
  assert.equal(
    redactUrl('https://u:p@hooks.example/a/b?token=s3cret#frag'),
    'https://hooks.example/a/b?redacted',
  );
  assert.equal(redactUrl('https://hooks.example/a?'), 'https://hooks.example/a?redacted');
  assert.equal(redactUrl('https://hooks.example/a'), 'https://hooks.example/a');
  assert.equal(redactUrl('not a url?token=s3cret#x'), 'not a url?redacted');
  assert.equal(redactUrl('ht!tp://u:p@x/y?token=s3cret'), 'ht!tp://x/y?redacted');
});
