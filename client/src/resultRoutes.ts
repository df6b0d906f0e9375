// Where a result goes: to the node that granted its lease. Each job a queue-keeper node grants carries
// `callbackOrigin`, that node's own origin, and a result is accepted only by the node whose lease it
// answers: sent through a balancer that spreads requests, it could land on another node and be refused
// as superseded. So each result goes to its job's `callbackOrigin`, with the same credentials as the
// claims. An origin is used only when it came on a job claimed from the configured server (never from
// a webhook or MQTT message), is a plain http(s) origin, and would not move the credentials from https
// to plain http; otherwise the result goes to the configured URL, as it does for a job without the field
// (a server that does not send it).

/** Where one result is sent: `origin` null is the configured URL; `socket` the channel it came on. */
export interface ResultRoute {
  origin: string | null;
  /** Channel mode: the socket the job was pushed on (its results ride that socket while it is open). */
  socket?: number;
}

export type OriginCheck = { origin: string | null } | { origin: null; problem: string };

/**
 * The origin a job's result goes to, given the configured base URL: null for the base itself (no
 * `callbackOrigin`, or the base's own origin), or a `problem` saying why the value is not used.
 */
export function resultOrigin(callbackOrigin: unknown, base: URL): OriginCheck {
  if (callbackOrigin === undefined || callbackOrigin === null) return { origin: null };
  if (typeof callbackOrigin !== 'string') return { origin: null, problem: 'is not a string' };
  const text = callbackOrigin.endsWith('/') ? callbackOrigin.slice(0, -1) : callbackOrigin;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { origin: null, problem: 'is not a URL' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return { origin: null, problem: `uses ${url.protocol} (only http and https are used)` };
  if (url.username !== '' || url.password !== '')
    return { origin: null, problem: 'carries credentials in the URL' };
  if (url.pathname !== '/' || url.search !== '' || url.hash !== '')
    return { origin: null, problem: 'is not an origin (it has a path, query or fragment)' };
  if (base.protocol === 'https:' && url.protocol === 'http:')
    return { origin: null, problem: 'is plain http while the configured URL is https' };
  if (url.origin === base.origin && base.pathname === '/') return { origin: null };
  return { origin: url.origin };
}
