// The origin a prerender fleet reaches this node at (docs/prerender-fleet.md). Every job carries it as
// `callbackOrigin`, and its host is the `hostname` of the node's `queue_status` message, so a fleet
// claims from and reports to the node that granted the lease. Pure: the node name and port come in.
// The configured origin's form is util/config/origin.ts's (the configuration checks it).

/**
 * The fleet's own rule for reaching a host it learnt from `queue_status`: https, except plain http for
 * `localhost` and `127.0.0.1` (a local Harper). Deriving the same origin keeps results and claims on one
 * address when `render.callbackOrigin` is unset. The port is Harper's listener for that scheme: an https
 * origin takes `securePort` when Harper has one.
 */
export function derivedOrigin(host: string, http: unknown): string {
  const secure = !(host === 'localhost' || host === '127.0.0.1');
  const section = (typeof http === 'object' && http !== null ? http : {}) as Record<string, unknown>;
  const order = secure ? [section.securePort, section.port] : [section.port, section.securePort];
  const shown = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return `${secure ? 'https' : 'http'}://${shown}:${firstPort(order) ?? DEFAULT_HTTP_PORT}`;
}

/** Harper's default HTTP port. */
const DEFAULT_HTTP_PORT = 9926;

/** The first of Harper's port settings that names a port: a number, or "host:port" for a bound listener. */
function firstPort(values: readonly unknown[]): number | undefined {
  for (const v of values) {
    const text = typeof v === 'number' ? String(v) : typeof v === 'string' ? v : '';
    const m = /(\d{1,5})$/.exec(text);
    if (m) {
      const port = Number(m[1]);
      if (port > 0 && port < 65536) return port;
    }
  }
  return undefined;
}

/** The host part of an origin, as the fleet puts it between the scheme and `:<queuePort>`. */
export function originHost(origin: string): string {
  return new URL(origin).hostname;
}
