// The real dispatcher of worker 0: every dependency of services/notify/dispatcher.ts bound to the hook
// tables (fleets.ts), the sealing key and the pinned HTTP transport. Built once, by the NotifyService.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Agent } from 'undici';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { parseAllowList, validateHookHost, type HookUrlPolicy } from '../../util/notify/addressPolicy.js';
import { Dispatcher, type DispatcherDeps } from './dispatcher.js';
import { getFleet, getHook, listFleets, listHooks, recordDelivery, signingSecrets } from './fleets.js';
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

function userAgent(componentDir: string): string {
  try {
    const pkg = JSON.parse(readFileSync(join(componentDir, 'package.json'), 'utf8')) as { version?: string };
    return `queue-keeper/${pkg.version ?? '0'}`;
  } catch {
    return 'queue-keeper/0';
  }
}

export interface DeliveryDeps {
  config: () => QueueKeeperConfig;
  sealKey: () => Buffer | null;
  count: DispatcherDeps['count'];
  log: DispatcherDeps['log'];
  componentDir: string;
  /** The wait between attempts of a delivery (a one-shot backoff, not a periodic duty). */
  sleep: DispatcherDeps['sleep'];
}

export function createDispatcher(deps: DeliveryDeps): Dispatcher {
  // One agent for every delivery: each new connection resolves and checks the host, then dials only that.
  let agent: Agent | undefined;
  const pinnedAgent = (): Agent =>
    (agent ??= createPinnedAgent({
      validate: (host) => validateHookHost(host, hookPolicy(deps.config())),
      connectTimeoutMs: () => deps.config().notify.attemptTimeout,
    }));
  return new Dispatcher({
    now: () => Date.now(),
    random: Math.random,
    sleep: deps.sleep,
    config: deps.config,
    key: deps.sealKey,
    fleets: listFleets,
    hooks: () => listHooks(),
    getFleet,
    getHook,
    secrets: signingSecrets,
    send: (url, headers, body, timeoutMs) => deliver({ url, headers, body, timeoutMs, agent: pinnedAgent() }),
    recordDelivery,
    count: deps.count,
    log: deps.log,
    userAgent: userAgent(deps.componentDir),
  });
}
