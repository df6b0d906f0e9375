// Which addresses a notify hook may reach (SSRF; docs/wakes.md, "Where a hook may point"). Pure: the resolver
// is passed in, nothing here touches the network. Every check works on the parsed address value, never on its
// spelling, so `0x7f.1`, `::ffff:7f00:1` and `127.0.0.1` are the same address to every rule.
import { isIP } from 'node:net';

export type AddressClass =
  | 'loopback'
  | 'link-local'
  | 'metadata'
  | 'private'
  | 'ula'
  | 'cgnat'
  | 'unspecified'
  | 'multicast'
  | 'broadcast'
  | 'reserved'
  | 'documentation';

/** A parsed address: the family and its value as a 32- or 128-bit integer. */
interface Ip {
  v: 4 | 6;
  n: bigint;
}

interface Cidr extends Ip {
  prefix: number;
}

export interface AllowEntry extends Cidr {
  /** A bare address, /32 or /128: the only kind that may open loopback, link-local, metadata or this server. */
  exact: boolean;
}

export type AllowList = readonly AllowEntry[];

export interface HostPolicy {
  allowList: AllowList;
  /** This server's own addresses; a hook pointing back at us is refused unless an exact entry names it. */
  selfAddresses: readonly string[];
  resolve: (host: string) => Promise<string[]>;
}

export interface HookUrlPolicy extends HostPolicy {
  allowHttp: boolean;
}

/**
 * `transient`: the resolver could not answer now (EAI_AGAIN and kin). That says nothing about the host's
 * addresses, so it is a network error to retry, not a refusal.
 */
export type HostVerdict = { ok: true; addresses: string[] } | { ok: false; phrase: string; transient?: true };
export type HookUrlVerdict =
  | { ok: true; url: URL; addresses: string[] }
  | { ok: false; code: 'invalid_url'; phrase: string; transient?: true };

/** Longer URLs are refused outright; a hook URL is config, not data, and this keeps rows and logs small. */
const MAX_HOOK_URL_BYTES = 2048;

const V4_BITS = 32;
const V6_BITS = 128;

// ---------------------------------------------------------------- parsing

function parseV4Part(part: string): bigint | null {
  // WHATWG / inet_aton number forms: 0x.. hex, a leading 0 means octal, otherwise decimal.
  if (/^0[xX][0-9a-fA-F]*$/.test(part)) return part.length === 2 ? 0n : BigInt(part);
  if (/^0[0-7]+$/.test(part)) return BigInt('0o' + part.slice(1));
  if (/^(0|[1-9][0-9]*)$/.test(part)) return BigInt(part);
  return null;
}

/** IPv4 in every notation a URL host or inet_aton accepts: `2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`. */
function parseV4Loose(text: string): bigint | null {
  const parts = text.split('.');
  if (parts.length > 1 && parts[parts.length - 1] === '') parts.pop();
  if (parts.length === 0 || parts.length > 4 || parts.some((p) => p === '')) return null;
  const nums = parts.map(parseV4Part);
  if (nums.some((x) => x === null)) return null;
  const values = nums as bigint[];
  const last = values.pop()!;
  if (values.some((x) => x > 255n)) return null;
  const tailBits = BigInt(8 * (4 - values.length));
  if (last >= 1n << tailBits) return null;
  return values.reduce((acc, x, i) => acc | (x << BigInt(8 * (3 - i))), 0n) | last;
}

function parseV6(text: string): bigint | null {
  if (isIP(text) !== 6) return null;
  let head = text;
  let tail4: bigint | null = null;
  const dotted = /:(\d+\.\d+\.\d+\.\d+)$/.exec(head);
  if (dotted) {
    tail4 = parseV4Loose(dotted[1]!);
    head = head.slice(0, dotted.index + 1) + '0:0';
  }
  const [left, right] = head.split('::') as [string, string | undefined];
  const groups = (s: string) => (s === '' ? [] : s.split(':'));
  const l = groups(left);
  const r = right === undefined ? [] : groups(right);
  const all = right === undefined ? l : [...l, ...Array<string>(8 - l.length - r.length).fill('0'), ...r];
  let n = all.reduce((acc, g) => (acc << 16n) | BigInt('0x' + g), 0n);
  if (tail4 !== null) n = (n & ~0xffffffffn) | tail4;
  return n;
}

/** Brackets and an IPv6 zone id (`%eth0`) are dropped: the zone names an interface, not a different host. */
function parseIp(text: string): Ip | null {
  let t = text.trim();
  if (t.startsWith('[') && t.endsWith(']')) t = t.slice(1, -1);
  const zone = t.indexOf('%');
  if (zone >= 0 && t.includes(':')) t = t.slice(0, zone);
  if (t.includes(':')) {
    const n = parseV6(t);
    return n === null ? null : { v: 6, n };
  }
  const n = parseV4Loose(t);
  return n === null ? null : { v: 4, n };
}

/** IPv4-mapped (`::ffff:a.b.c.d`) is the IPv4 host itself on a dual-stack socket, so every rule sees the IPv4. */
function unmap(ip: Ip): Ip {
  if (ip.v === 6 && ip.n >> 32n === 0xffffn) return { v: 4, n: ip.n & 0xffffffffn };
  return ip;
}

function formatV4(n: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 255n)).join('.');
}

function cidr(text: string): Cidr {
  const [addr, bits] = text.split('/') as [string, string];
  const ip = parseIp(addr)!;
  return { ...ip, prefix: Number(bits) };
}

function contains(net: Cidr, ip: Ip): boolean {
  if (net.v !== ip.v) return false;
  const shift = BigInt((ip.v === 4 ? V4_BITS : V6_BITS) - net.prefix);
  return ip.n >> shift === net.n >> shift;
}

// ---------------------------------------------------------------- classes

type V6Class = AddressClass | null | ((n: bigint) => AddressClass | null);

// First match wins, so each specific range (metadata, broadcast) sits above the range that contains it.
const V4_RULES: [Cidr, AddressClass][] = (
  [
    ['0.0.0.0/8', 'unspecified'], // Linux dials 0.0.0.0 as this host
    ['10.0.0.0/8', 'private'],
    ['100.100.100.200/32', 'metadata'], // Alibaba Cloud
    ['100.64.0.0/10', 'cgnat'],
    ['127.0.0.0/8', 'loopback'],
    ['168.63.129.16/32', 'metadata'], // Azure wire server
    ['169.254.169.254/32', 'metadata'], // AWS, GCP, Azure, OCI, DigitalOcean
    ['169.254.170.2/32', 'metadata'], // AWS ECS task credentials
    ['169.254.0.0/16', 'link-local'],
    ['172.16.0.0/12', 'private'],
    ['192.0.0.0/24', 'reserved'],
    ['192.0.2.0/24', 'documentation'],
    ['192.88.99.0/24', 'reserved'],
    ['192.168.0.0/16', 'private'],
    ['198.18.0.0/15', 'reserved'],
    ['198.51.100.0/24', 'documentation'],
    ['203.0.113.0/24', 'documentation'],
    ['224.0.0.0/4', 'multicast'],
    ['255.255.255.255/32', 'broadcast'],
    ['240.0.0.0/4', 'reserved'],
  ] as const
).map(([c, k]) => [cidr(c), k]);

function classifyV4(n: bigint): AddressClass | null {
  const ip: Ip = { v: 4, n };
  for (const [net, k] of V4_RULES) if (contains(net, ip)) return k;
  return null;
}

const low32 = (n: bigint) => n & 0xffffffffn;

// Translation prefixes carry an IPv4 destination inside; they take that IPv4's class so a NAT64 or 6to4
// spelling of 10.0.0.1 is refused like 10.0.0.1 itself.
const V6_RULES: [Cidr, V6Class][] = (
  [
    ['::/128', 'unspecified'],
    ['::1/128', 'loopback'],
    ['::ffff:0:0:0/96', (n) => classifyV4(low32(n))], // SIIT IPv4-translated
    ['::/96', (n) => classifyV4(low32(n)) ?? 'reserved'], // deprecated IPv4-compatible
    ['64:ff9b::/96', (n) => classifyV4(low32(n))], // NAT64 well-known prefix
    ['64:ff9b:1::/48', 'private'], // NAT64 local-use
    ['100::/64', 'reserved'], // discard-only
    ['2001::/32', (n) => classifyV4(low32(~n)) ?? 'reserved'], // Teredo: client IPv4 stored inverted
    ['2001:db8::/32', 'documentation'],
    ['2001::/23', 'reserved'],
    ['2002::/16', (n) => classifyV4((n >> 80n) & 0xffffffffn)], // 6to4
    ['3fff::/20', 'documentation'],
    ['fd00:ec2::254/128', 'metadata'], // AWS IMDS over IPv6
    ['fc00::/7', 'ula'],
    ['fe80::/10', 'link-local'],
    ['fec0::/10', 'private'], // deprecated site-local
    ['ff00::/8', 'multicast'],
  ] satisfies [string, V6Class][]
).map(([c, k]) => [cidr(c), k]);

const GLOBAL_UNICAST_V6 = cidr('2000::/3');

function classifyIp(ip: Ip): AddressClass | null {
  const u = unmap(ip);
  if (u.v === 4) return classifyV4(u.n);
  for (const [net, k] of V6_RULES) {
    if (contains(net, u)) return typeof k === 'function' ? k(u.n) : k;
  }
  // Outside 2000::/3 nothing is allocated for hosts; unallocated space is refused, not assumed public.
  return contains(GLOBAL_UNICAST_V6, u) ? null : 'reserved';
}

/**
 * The class of one address, or null for a public one. Accepts IPv4 in any URL notation, IPv6 with or
 * without brackets and zone id. Text that is not an address at all is 'reserved': fail closed.
 */
export function classifyAddress(ip: string): AddressClass | null {
  const parsed = parseIp(ip);
  return parsed === null ? 'reserved' : classifyIp(parsed);
}

// ---------------------------------------------------------------- allow-list and verdicts

/** Classes a broad allow-list entry never opens: reaching them is the attack, not a private deployment. */
const EXACT_ONLY: ReadonlySet<AddressClass> = new Set([
  'loopback',
  'link-local',
  'metadata',
  'unspecified',
  'multicast',
  'broadcast',
]);

const PHRASES: Record<AddressClass | 'self', string> = {
  loopback: 'resolves to a loopback address',
  'link-local': 'resolves to a link-local address',
  metadata: 'resolves to a cloud metadata address',
  private: 'resolves to a private address',
  ula: 'resolves to a private address',
  cgnat: 'resolves to a shared (CGNAT) address',
  unspecified: 'resolves to an unspecified address',
  multicast: 'resolves to a multicast address',
  broadcast: 'resolves to a broadcast address',
  reserved: 'resolves to a reserved address',
  documentation: 'resolves to a documentation address',
  self: 'resolves to this server',
};

/**
 * Parses `notify.allowCidrs`. Entries are strict dotted IPv4 or IPv6, bare or with a prefix length;
 * an IPv4-mapped entry is stored as its IPv4. Throws a TypeError naming the first bad entry.
 */
export function parseAllowList(entries: readonly string[]): AllowList {
  return entries.map((entry) => {
    const [addr, bits, extra] = entry.trim().split('/');
    const family = isIP(addr ?? '');
    const ip = family === 0 || extra !== undefined || addr!.includes('%') ? null : parseIp(addr!);
    const width = family === 4 ? V4_BITS : V6_BITS;
    const prefix = bits === undefined ? width : /^\d{1,3}$/.test(bits) ? Number(bits) : -1;
    if (ip === null || prefix < 0 || prefix > width) {
      throw new TypeError(`allow-list entry "${entry}" is not an address or CIDR`);
    }
    // Only a mapped entry narrow enough to sit inside ::ffff:0:0/96 becomes an IPv4 entry.
    const u = prefix >= 96 ? unmap(ip) : ip;
    const p = u.v === 4 && ip.v === 6 ? prefix - 96 : prefix;
    const bitsOfFamily = u.v === 4 ? V4_BITS : V6_BITS;
    const hostMask = (1n << BigInt(bitsOfFamily - p)) - 1n;
    return { v: u.v, n: u.n & ~hostMask, prefix: p, exact: p === bitsOfFamily };
  });
}

function sameIp(a: Ip, b: Ip): boolean {
  return a.v === b.v && a.n === b.n;
}

/** Why one address is refused, or null when a hook may dial it. */
function refusal(ip: Ip, allowList: AllowList, self: readonly Ip[]): AddressClass | 'self' | null {
  const u = unmap(ip);
  if (allowList.some((e) => e.exact && contains(e, u))) return null;
  const cls = classifyIp(u);
  if (cls !== null && EXACT_ONLY.has(cls)) return cls;
  if (self.some((s) => sameIp(s, u))) return 'self';
  if (cls === null || allowList.some((e) => !e.exact && contains(e, u))) return null;
  return cls;
}

/** Checks a resolved answer: ANY refused address refuses the host, so a mixed answer cannot be raced. */
export function checkAddresses(
  addresses: readonly string[],
  policy: Pick<HostPolicy, 'allowList' | 'selfAddresses'>,
): HostVerdict {
  if (addresses.length === 0) return { ok: false, phrase: 'does not resolve' };
  const self = policy.selfAddresses.map(parseIp).filter((x): x is Ip => x !== null);
  for (const a of addresses) {
    const ip = parseIp(a);
    const why = ip === null ? 'reserved' : refusal(ip, policy.allowList, self);
    if (why !== null) return { ok: false, phrase: PHRASES[why] };
  }
  return { ok: true, addresses: [...addresses] };
}

/**
 * Resolver codes that mean "ask again later" (getaddrinfo's EAI_AGAIN; c-ares' timeout and server
 * failure), as opposed to ENOTFOUND / EAI_NONAME, which is the name's own answer.
 */
const TRANSIENT_DNS_CODES: ReadonlySet<string> = new Set(['EAI_AGAIN', 'ETIMEOUT', 'ESERVFAIL']);

/**
 * Resolves a hook host once and checks every address. A literal IP (any notation) is checked directly
 * and returned in canonical form, because sockets skip the lookup for literals and inet_aton would read
 * `0177.0.0.1` differently from a naive check.
 */
export async function validateHookHost(hostname: string, policy: HostPolicy): Promise<HostVerdict> {
  const host = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
  const literal = parseIp(host);
  if (literal !== null) {
    return checkAddresses([literal.v === 4 ? formatV4(literal.n) : host], policy);
  }
  let addresses: string[];
  try {
    addresses = await policy.resolve(host);
  } catch (e) {
    // The resolver's message names the host and sometimes the server; the phrase never does.
    if (TRANSIENT_DNS_CODES.has(String((e as { code?: unknown } | null)?.code)))
      return { ok: false, phrase: 'could not be resolved just now (temporary DNS failure)', transient: true };
    return { ok: false, phrase: 'does not resolve' };
  }
  return checkAddresses(addresses, policy);
}

/**
 * The checks that need no DNS: scheme, credentials, length. The dispatcher runs this before every attempt
 * and leaves the host to the pinned agent, so each attempt resolves exactly once.
 */
export function checkHookUrlShape(
  raw: string,
  opts: { allowHttp: boolean },
): { ok: true; url: URL } | { ok: false; code: 'invalid_url'; phrase: string } {
  const bad = (phrase: string) => ({ ok: false, code: 'invalid_url', phrase }) as const;
  if (Buffer.byteLength(raw, 'utf8') > MAX_HOOK_URL_BYTES) return bad('is too long');
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return bad('is not a valid URL');
  }
  if (url.protocol !== 'https:' && !(opts.allowHttp && url.protocol === 'http:')) {
    return bad(opts.allowHttp ? 'must use http or https' : 'must use https');
  }
  if (url.username !== '' || url.password !== '') return bad('must not contain credentials');
  // Punycode can make the canonical form longer than the input.
  if (Buffer.byteLength(url.href, 'utf8') > MAX_HOOK_URL_BYTES) return bad('is too long');
  return { ok: true, url };
}

/** Full validation for create/update: shape, then one resolution of the host. */
export async function validateHookUrl(raw: string, policy: HookUrlPolicy): Promise<HookUrlVerdict> {
  const shape = checkHookUrlShape(raw, policy);
  if (!shape.ok) return shape;
  const host = await validateHookHost(shape.url.hostname, policy);
  if (!host.ok)
    return host.transient
      ? { ok: false, code: 'invalid_url', phrase: host.phrase, transient: true }
      : { ok: false, code: 'invalid_url', phrase: host.phrase };
  return { ok: true, url: shape.url, addresses: host.addresses };
}

/** A hook URL fit to show or log: a query (often a token) becomes `?redacted`; userinfo and fragment go. */
export function redactUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // Not a URL: keep only what cannot be a secret by position.
    const beforeFragment = raw.split('#', 1)[0]!;
    const cut = beforeFragment.split('?', 1)[0]!.replace(/^([^/?#]*:\/\/)?[^/?#@]*@/, '$1');
    return cut + (beforeFragment.includes('?') ? '?redacted' : '');
  }
  url.username = '';
  url.password = '';
  url.hash = '';
  const hadQuery = url.href.includes('?');
  url.search = '';
  return url.href + (hadQuery ? '?redacted' : '');
}
