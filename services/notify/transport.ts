// The socket side of notify delivery (SSRF; docs/wakes.md, "Where a hook may point"). An undici Agent whose
// every new connection first asks the address policy about the host and then dials only the addresses it
// vouched for, so a DNS answer that changes between the check and the dial (rebinding) cannot move the
// request.
import dns from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { networkInterfaces } from 'node:os';
import { Agent, buildConnector, errors } from 'undici';
import type { HostVerdict } from '../../util/notify/addressPolicy.js';

/** The connect callback's error when the resolver could not answer now; retried like the network. */
export class TransientResolveError extends Error {
  override name = 'TransientResolveError';
  constructor(readonly phrase: string) {
    super(phrase);
  }
}

/** The connect callback's error when the policy refuses a host; it carries the class phrase only. */
export class AddressRefusedError extends Error {
  override name = 'AddressRefusedError';
  constructor(readonly phrase: string) {
    super(phrase);
  }
}

export interface PinnedAgentOptions {
  /** Resolve-and-check for one host, run on EVERY new connection (e.g. `validateHookHost` with the policy). */
  validate: (host: string) => Promise<HostVerdict>;
  /** Read on every new connection, so a config change applies to the next attempt. */
  connectTimeoutMs: number | (() => number);
  /** Trust roots that REPLACE Node's defaults, for receivers behind a private CA (private deployments, tests). */
  ca?: string | Buffer | (string | Buffer)[];
}

function unbracket(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

function wantedFamily(family: dns.LookupOptions['family']): 0 | 4 | 6 {
  if (family === 4 || family === 'IPv4') return 4;
  if (family === 6 || family === 'IPv6') return 6;
  return 0;
}

/** A lookup that answers only `host`, only with the validated addresses; anything else is an error. */
function pinnedLookup(host: string, addresses: readonly string[]): LookupFunction {
  const answers = addresses.map((address) => ({ address, family: isIP(address) }));
  return (hostname, options, callback) => {
    const family = wantedFamily(options.family);
    const list = hostname === host ? answers.filter((a) => family === 0 || a.family === family) : [];
    if (list.length === 0) {
      const err: NodeJS.ErrnoException = new Error('no validated address for this host');
      err.code = 'ENOTFOUND';
      callback(err, '', 0);
    } else if (options.all) callback(null, list);
    else callback(null, list[0]!.address, list[0]!.family);
  };
}

/** Validates the host, then dials only what the validation returned; every path ends in `callback`. */
async function pinnedConnect(
  opts: PinnedAgentOptions,
  options: buildConnector.Options,
  callback: buildConnector.Callback,
): Promise<void> {
  const host = unbracket(options.hostname);
  let verdict: HostVerdict;
  try {
    verdict = await opts.validate(host);
  } catch {
    verdict = { ok: false, phrase: 'does not resolve' };
  }
  if (!verdict.ok)
    return callback(
      verdict.transient ? new TransientResolveError(verdict.phrase) : new AddressRefusedError(verdict.phrase),
      null,
    );
  // A literal IP is dialed as written (sockets skip the lookup), so the validator must have vouched for
  // exactly that literal.
  if (isIP(host) !== 0 && !verdict.addresses.includes(host)) {
    return callback(new AddressRefusedError('does not resolve'), null);
  }
  try {
    const dial = buildConnector({
      timeout: typeof opts.connectTimeoutMs === 'function' ? opts.connectTimeoutMs() : opts.connectTimeoutMs,
      lookup: pinnedLookup(host, verdict.addresses),
      // SNI and certificate checks use the hook's host name, never the pinned address.
      servername: isIP(host) === 0 ? host : undefined,
      ca: opts.ca,
      maxCachedSessions: 0,
    });
    dial(options, callback);
  } catch (err) {
    callback(err instanceof Error ? err : new Error(String(err)), null);
  }
}

/**
 * An Agent for hook deliveries. No proxy (a plain Agent never reads HTTP(S)_PROXY), no redirect
 * interceptor (undici follows nothing without one), and no keep-alive: `pipelining: 0` closes each
 * connection after its response, so every attempt opens a new one and is validated again.
 */
export function createPinnedAgent(opts: PinnedAgentOptions): Agent {
  return new Agent({
    connect: (options, callback) => void pinnedConnect(opts, options, callback),
    pipelining: 0,
  });
}

/** The platform resolver, every address of the answer (the policy refuses the host if ANY is refused). */
export async function systemResolve(host: string): Promise<string[]> {
  const answers = await dns.promises.lookup(host, { all: true });
  return answers.map((a) => a.address);
}

/** This server's interface addresses, for the "resolves to this server" refusal. */
export function localAddresses(): string[] {
  return Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address));
}

export type DeliveryOutcome =
  { status: number } | { error: 'timeout' | 'network' | 'dns' | 'refused'; phrase: string };

export interface DeliveryRequest {
  url: URL | string;
  headers: Record<string, string>;
  body: string;
  /** The whole attempt — connect, send, response head and body — must finish within this. */
  timeoutMs: number;
  agent: Agent;
}

const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH)/;

/** Maps a failure to an outcome whose phrase never contains an address (node's messages do). */
function failure(err: unknown, timedOut: boolean): DeliveryOutcome {
  if (err instanceof AddressRefusedError) return { error: 'refused', phrase: err.phrase };
  if (err instanceof TransientResolveError) return { error: 'dns', phrase: err.phrase };
  if (
    timedOut ||
    err instanceof errors.ConnectTimeoutError ||
    err instanceof errors.HeadersTimeoutError ||
    err instanceof errors.BodyTimeoutError
  ) {
    return { error: 'timeout', phrase: 'timed out' };
  }
  const code = (err as NodeJS.ErrnoException | null)?.code ?? '';
  if (code === 'ECONNREFUSED') return { error: 'network', phrase: 'connection refused' };
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET' || code === 'EPIPE') {
    return { error: 'network', phrase: 'connection reset' };
  }
  if (code === 'EAI_AGAIN')
    return { error: 'dns', phrase: 'could not be resolved just now (temporary DNS failure)' };
  if (code === 'ENOTFOUND') return { error: 'network', phrase: 'does not resolve' };
  if (TLS_CODE.test(code)) return { error: 'network', phrase: 'TLS handshake failed' };
  return { error: 'network', phrase: 'network error' };
}

/** How much of a receiver's reply body we read before closing; we never need it. */
const REPLY_DRAIN_BYTES = 64 * 1024;

/** One POST attempt. Never throws: every failure is an outcome for `classifyResponse`. */
export async function deliver(req: DeliveryRequest): Promise<DeliveryOutcome> {
  let url: URL;
  try {
    url = typeof req.url === 'string' ? new URL(req.url) : req.url;
  } catch {
    return { error: 'refused', phrase: 'is not a valid URL' };
  }
  const abort = new AbortController();
  // The deadline of this one attempt, cleared in `finally`: per request, so it stays local (not a duty).
  const timer = setTimeout(() => abort.abort(), req.timeoutMs);
  try {
    const res = await req.agent.request({
      origin: url.origin,
      path: url.pathname + url.search,
      method: 'POST',
      headers: req.headers,
      body: req.body,
      signal: abort.signal,
      headersTimeout: req.timeoutMs,
      bodyTimeout: req.timeoutMs,
    });
    // The status is the answer; a reply body that stalls or breaks does not undo it.
    await res.body.dump({ limit: REPLY_DRAIN_BYTES, signal: abort.signal }).catch(() => undefined);
    return { status: res.statusCode };
  } catch (err) {
    return failure(err, abort.signal.aborted);
  } finally {
    clearTimeout(timer);
  }
}
