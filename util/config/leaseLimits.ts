// How long a lease may last: its length at grant, and how far extensions may take it
// (POST /render_queue/extend, docs/fleets.md "Longer leases"). Both limits default from
// queue.jobLeaseTime, so no configuration that sets only the lease length is refused.
import type { QueueKeeperConfig } from './shape.js';
import { ConfigError } from './schema.js';

/** A lease may always last this long from its grant when queue.maxLeaseTime is not set. */
export const DEFAULT_MAX_LEASE_MS = 3_600_000;

export interface LeaseLimits {
  /** The longest one extension reaches past its call (ms). */
  maxExtensionMs: number;
  /** The longest a lease lasts from its grant, extensions included (ms). */
  maxLeaseMs: number;
}

export function leaseLimits(queue: QueueKeeperConfig['queue']): LeaseLimits {
  return {
    maxExtensionMs: queue.maxLeaseExtension ?? queue.jobLeaseTime,
    maxLeaseMs: queue.maxLeaseTime ?? Math.max(DEFAULT_MAX_LEASE_MS, queue.jobLeaseTime),
  };
}

/**
 * The refusal of a configuration whose queue.maxLeaseTime is set below queue.jobLeaseTime (a grant
 * would already outlast it), naming both keys; null when the two agree.
 */
export function leaseLimitsProblem(queue: QueueKeeperConfig['queue']): ConfigError | null {
  if (queue.maxLeaseTime === null || queue.maxLeaseTime >= queue.jobLeaseTime) return null;
  return new ConfigError(
    'queue.maxLeaseTime',
    `queue.maxLeaseTime (${queue.maxLeaseTime} ms) must be at least queue.jobLeaseTime (${queue.jobLeaseTime} ms)`,
  );
}
