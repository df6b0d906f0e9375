// What worker 0's dispatcher (services/notify/dispatcher.ts, built in resources.ts) delivers through: the
// hook address policy as configured now, one pinned HTTP agent for every delivery, and the User-Agent.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Agent } from 'undici';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { parseAllowList, validateHookHost, type HookUrlPolicy } from '../../util/notify/addressPolicy.js';
import type { DispatcherDeps } from './dispatcher.js';
import { createPinnedAgent, deliver, localAddresses, systemResolve } from './transport.js';

/** The address policy as configured now (read per use, so a config change applies to the next attempt). */
export function hookPolicy(cfg: QueueKeeperConfig): HookUrlPolicy {
  const n = cfg.notify;
  return {
    allowHttp: n.allowHttp,
    allowList: parseAllowList(n.allowCidrs),
    selfAddresses: localAddresses(),
    resolve: systemResolve,
  };
}

/** `queue-keeper/<version>` from the component's package.json (`/0` when it cannot be read). */
export function userAgent(componentDir: string): string {
  try {
    const pkg = JSON.parse(readFileSync(join(componentDir, 'package.json'), 'utf8')) as { version?: string };
    return `queue-keeper/${pkg.version ?? '0'}`;
  } catch {
    return 'queue-keeper/0';
  }
}

/**
 * The dispatcher's `send`: every delivery goes through one agent, made at the first one. Each new
 * connection resolves and checks the host against the policy as configured then, and dials only that.
 */
export function pinnedSend(config: () => QueueKeeperConfig): DispatcherDeps['send'] {
  let agent: Agent | undefined;
  const pinnedAgent = (): Agent =>
    (agent ??= createPinnedAgent({
      validate: (host) => validateHookHost(host, hookPolicy(config())),
      connectTimeoutMs: () => config().notify.attemptTimeout,
    }));
  return (url, headers, body, timeoutMs) => deliver({ url, headers, body, timeoutMs, agent: pinnedAgent() });
}
