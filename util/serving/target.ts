// What a `/p/<absolute url>` request asks for: the URL as sent after `/p/`, checked as a filed target's URL
// is (util/http/input.ts urlProblem; no other normalisation, so the key is the one filing wrote), and
// whether its host is one this node serves (docs/serving.md "Sites served").
import { urlProblem } from '../schedule/targetChecks.js';

export const SERVING_PREFIX = '/p/';

export type ServedTarget =
  | { ok: true; url: string }
  /** `off`: no host is served; `host`: another host's URL; both answer 404 without reading anything. */
  | { ok: false; why: 'off' | 'host' }
  | { ok: false; why: 'invalid'; problem: string };

/**
 * The target of a request whose origin-form path and query (`requestTarget`) start with SERVING_PREFIX.
 * Percent-encoding is kept as sent.
 */
export function servedTarget(requestTarget: string, hosts: readonly string[]): ServedTarget {
  if (hosts.length === 0) return { ok: false, why: 'off' };
  const url = requestTarget.slice(SERVING_PREFIX.length);
  const problem = urlProblem(url);
  if (problem !== null) return { ok: false, why: 'invalid', problem };
  // urlProblem parsed it: an absolute http(s) URL with a host.
  const host = new URL(url).host;
  return hosts.includes(host) ? { ok: true, url } : { ok: false, why: 'host' };
}
