// Which addresses an outbound request may reach (SSRF; docs/wakes.md, "Where a hook may point"). Pure: the
// resolver and every setting (allowHttp, the allow-list, this server's addresses) are arguments, so each
// kind of outbound fetch brings its own policy. Nothing here touches the network. Every check works on the
// address value, never on its spelling: IPv4 in any URL notation goes through the WHATWG URL parser, which
// is what a socket dials, and the range checks are Node's net.BlockList, so `0x7f.1`, `::ffff:7f00:1` and
// `127.0.0.1` are the same address to every rule.
import { BlockList, isIP } from 'node:net';

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

type Family = 'ipv4' | 'ipv6';

/** A parsed address: its family and a spelling net.BlockList reads (IPv4 dotted decimal). */
interface Ip {
  family: Family;
  address: string;
}

export interface AllowEntry {
  family: Family;
  /** The network as written (host bits and all: `10.1.2.3/8` covers 10.0.0.0/8). */
  address: string;
  prefix: number;
  /** A bare address, /32 or /128: the only kind that may open loopback, link-local, metadata or this server. */
  exact: boolean;
  /** The entry's range. */
  covers: BlockList;
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

function subnet(cidr: string): BlockList {
  const [address, bits] = cidr.split('/') as [string, string];
  const list = new BlockList();
  list.addSubnet(address, Number(bits), isIP(address) === 4 ? 'ipv4' : 'ipv6');
  return list;
}

// Only what can spell an IPv4 number (digits, hex, dots) is handed to the URL parser: a name stays a name.
const IPV4_NUMBER_FORM = /^[0-9a-fA-FxX.]+$/;

/**
 * Brackets and an IPv6 zone id (`%eth0`) are dropped: the zone names an interface, not a different host.
 * IPv4 is read as a URL host is (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`, a trailing dot).
 */
function parseIp(text: string): Ip | null {
  let t = text.trim();
  if (t.startsWith('[') && t.endsWith(']')) t = t.slice(1, -1);
  const zone = t.indexOf('%');
  if (zone >= 0 && t.includes(':')) t = t.slice(0, zone);
  if (t.includes(':')) return isIP(t) === 6 ? { family: 'ipv6', address: t.toLowerCase() } : null;
  if (!IPV4_NUMBER_FORM.test(t)) return null;
  let host: string;
  try {
    host = new URL(`http://${t}/`).hostname;
  } catch {
    return null;
  }
  return isIP(host) === 4 ? { family: 'ipv4', address: host } : null;
}

/** The eight 16-bit words of an IPv6 address isIP accepts (a dotted tail is the last two). */
function v6Words(address: string): number[] {
  let text = address;
  const tail: number[] = [];
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    tail.push((a << 8) | b, (c << 8) | d);
    text = text.slice(0, dotted.index);
    if (!text.endsWith('::')) text = text.slice(0, -1);
  }
  const words = (part: string) => (part === '' ? [] : part.split(':').map((w) => parseInt(w, 16)));
  const [left, right] = text.split('::') as [string, string | undefined];
  const l = words(left);
  if (right === undefined) return [...l, ...tail];
  const r = [...words(right), ...tail];
  return [...l, ...Array<number>(8 - l.length - r.length).fill(0), ...r];
}

/** Dotted IPv4 from two 16-bit words. */
function v4Of(hi: number, lo: number): string {
  return [hi >> 8, hi & 255, lo >> 8, lo & 255].join('.');
}

/** The IPv4 in the last 32 bits of an IPv6 address. */
function low32(address: string): string {
  const w = v6Words(address);
  return v4Of(w[6]!, w[7]!);
}

const MAPPED = subnet('::ffff:0:0/96');

/** IPv4-mapped (`::ffff:a.b.c.d`) is the IPv4 host itself on a dual-stack socket, so every rule sees the IPv4. */
function unmap(ip: Ip): Ip {
  if (ip.family === 'ipv6' && MAPPED.check(ip.address, 'ipv6'))
    return { family: 'ipv4', address: low32(ip.address) };
  return ip;
}

// ---------------------------------------------------------------- classes

type V6Class = AddressClass | null | ((address: string) => AddressClass | null);

// First match wins, so each specific range (metadata, broadcast) sits above the range that contains it.
const V4_RULES: [BlockList, AddressClass][] = (
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
).map(([c, k]) => [subnet(c), k]);

function classifyV4(address: string): AddressClass | null {
  for (const [net, k] of V4_RULES) if (net.check(address, 'ipv4')) return k;
  return null;
}

/** Teredo stores the client's IPv4 inverted in the last 32 bits. */
function teredoClient(address: string): string {
  const w = v6Words(address);
  return v4Of(~w[6]! & 0xffff, ~w[7]! & 0xffff);
}

/** 6to4 carries the site's IPv4 in bits 16 to 47. */
function sixToFourSite(address: string): string {
  const w = v6Words(address);
  return v4Of(w[1]!, w[2]!);
}

// Translation prefixes carry an IPv4 destination inside; they take that IPv4's class so a NAT64 or 6to4
// spelling of 10.0.0.1 is refused like 10.0.0.1 itself.
const V6_RULES: [BlockList, V6Class][] = (
  [
    ['::/128', 'unspecified'],
    ['::1/128', 'loopback'],
    ['::ffff:0:0:0/96', (a) => classifyV4(low32(a))], // SIIT IPv4-translated
    ['::/96', (a) => classifyV4(low32(a)) ?? 'reserved'], // deprecated IPv4-compatible
    ['64:ff9b::/96', (a) => classifyV4(low32(a))], // NAT64 well-known prefix
    ['64:ff9b:1::/48', 'private'], // NAT64 local-use
    ['100::/64', 'reserved'], // discard-only
    ['2001::/32', (a) => classifyV4(teredoClient(a)) ?? 'reserved'], // Teredo
    ['2001:db8::/32', 'documentation'],
    ['2001::/23', 'reserved'],
    ['2002::/16', (a) => classifyV4(sixToFourSite(a))], // 6to4
    ['3fff::/20', 'documentation'],
    ['fd00:ec2::254/128', 'metadata'], // AWS IMDS over IPv6
    ['fc00::/7', 'ula'],
    ['fe80::/10', 'link-local'],
    ['fec0::/10', 'private'], // deprecated site-local
    ['ff00::/8', 'multicast'],
  ] satisfies [string, V6Class][]
).map(([c, k]) => [subnet(c), k]);

const GLOBAL_UNICAST_V6 = subnet('2000::/3');

function classifyIp(ip: Ip): AddressClass | null {
  const u = unmap(ip);
  if (u.family === 'ipv4') return classifyV4(u.address);
  for (const [net, k] of V6_RULES) {
    if (net.check(u.address, 'ipv6')) return typeof k === 'function' ? k(u.address) : k;
  }
  // Outside 2000::/3 nothing is allocated for hosts; unallocated space is refused, not assumed public.
  return GLOBAL_UNICAST_V6.check(u.address, 'ipv6') ? null : 'reserved';
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
    const p = u.family === 'ipv4' && ip.family === 'ipv6' ? prefix - 96 : prefix;
    const covers = new BlockList();
    covers.addSubnet(u.address, p, u.family);
    return {
      family: u.family,
      address: u.address,
      prefix: p,
      exact: p === (u.family === 'ipv4' ? V4_BITS : V6_BITS),
      covers,
    };
  });
}

/**
 * Whether an entry covers an address of its own family: BlockList alone would let `::/0` cover every
 * IPv4 address (it reads IPv4 as IPv4-mapped IPv6), and an IPv6 entry never opens an IPv4 host here.
 */
function covers(entry: AllowEntry, ip: Ip): boolean {
  return entry.family === ip.family && entry.covers.check(ip.address, ip.family);
}

/** Why one address is refused, or null when a hook may dial it. */
function refusal(ip: Ip, allowList: AllowList, self: BlockList): AddressClass | 'self' | null {
  const u = unmap(ip);
  if (allowList.some((e) => e.exact && covers(e, u))) return null;
  const cls = classifyIp(u);
  if (cls !== null && EXACT_ONLY.has(cls)) return cls;
  if (self.check(u.address, u.family)) return 'self';
  if (cls === null || allowList.some((e) => !e.exact && covers(e, u))) return null;
  return cls;
}

/** Checks a resolved answer: ANY refused address refuses the host, so a mixed answer cannot be raced. */
export function checkAddresses(
  addresses: readonly string[],
  policy: Pick<HostPolicy, 'allowList' | 'selfAddresses'>,
): HostVerdict {
  if (addresses.length === 0) return { ok: false, phrase: 'does not resolve' };
  // This server's addresses, unmapped like every address checked against them, so only one spelling
  // per family is ever compared (::1 and 0:0::1 are one address to the list).
  const self = new BlockList();
  for (const ip of policy.selfAddresses.map(parseIp))
    if (ip !== null) self.addAddress(unmap(ip).address, unmap(ip).family);
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
    return checkAddresses([literal.family === 'ipv4' ? literal.address : host], policy);
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
