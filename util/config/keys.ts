// The one configuration schema: every key with its default, range, effect and description.
// Validation, defaults, the README table and the "unknown key" warning (util/config/schema.ts) all come
// from this list; adding a key is adding an entry here.

/** What a change to the key does at runtime. */
export type ConfigEffect = 'live' | 'timers' | 'reclassify' | 'restart';

export type Kind =
  'int' | 'number' | 'boolean' | 'roles' | 'durations' | 'routes' | 'cidrs' | 'origin' | 'name';

export interface ConfigKey {
  path: string;
  kind: Kind;
  default: unknown;
  min?: number;
  max?: number;
  /** 0 is allowed besides the range (e.g. verifyInterval: 0 = off). */
  zeroAllowed?: boolean;
  effect: ConfigEffect;
  description: string;
}

export interface RouteConfig {
  name: string;
  match: 'exact' | 'prefix';
  path: string;
  renderInterval?: number;
}

export interface QueueKeeperConfig {
  queue: {
    keeper: {
      publishInterval: number;
      stateInterval: number;
      verifyInterval: number;
      repairInterval: number;
    };
    ready: { capacity: number; sitemapBoost: number; urgentHeadStart: number; changedHeadStart: number };
    jobLeaseTime: number;
    maxClaimLimit: number;
    maxLeases: number;
    statusSyncInterval: number;
    fleetRoles: string[];
    feederRoles: string[];
    discoverRoles: string[];
    observerRoles: string[];
  };
  render: {
    /** The origin fleets post results to; null derives it (docs/prerender-fleet.md). */
    callbackOrigin: string | null;
    deviceType: string;
    defaultInterval: number;
    routes: RouteConfig[];
    failureRetry: {
      fastRetries: number;
      backoffFactor: number;
      maxBackoff: number;
      nonSitemapPenalty: number;
    };
    maxBodyBytes: number;
    maxBatchBytes: number;
  };
  notify: {
    allowHttp: boolean;
    allowCidrs: string[];
    attemptTimeout: number;
    maxAttempts: number;
    maxHooksPerFleet: number;
    disableAfterFailures: number;
    ratePerMinute: number;
    edgeCooldown: number;
  };
  stall: { after: number; backoff: number[]; maxNudges: number; sweepLimit: number };
  maintenance: { tickInterval: number };
}

export const MINUTE = 60_000;
export const DAY = 86_400_000;

export const CONFIG_KEYS: readonly ConfigKey[] = [
  {
    path: 'queue.keeper.publishInterval',
    kind: 'int',
    default: 1000,
    min: 100,
    max: 60000,
    effect: 'timers',
    description: 'How often worker 0 publishes the ready set and heartbeat (ms).',
  },
  {
    path: 'queue.keeper.stateInterval',
    kind: 'int',
    default: 5000,
    min: 1000,
    max: 600000,
    effect: 'timers',
    description: 'How often the queue-state document is recomputed (ms).',
  },
  {
    path: 'queue.keeper.verifyInterval',
    kind: 'int',
    default: 3600000,
    min: 10000,
    max: 7 * DAY,
    zeroAllowed: true,
    effect: 'timers',
    description: 'Verification walk period (ms); 0 turns it off.',
  },
  {
    path: 'queue.keeper.repairInterval',
    kind: 'int',
    default: 300000,
    min: 10000,
    max: 3_600_000,
    zeroAllowed: true,
    effect: 'timers',
    description:
      'Replica repair round period (ms) while the node has peers: nodes compare digests of their rows and ' +
      're-send rows a peer lacks (a write a join copy skipped); 0 turns it off.',
  },
  {
    path: 'queue.ready.capacity',
    kind: 'int',
    default: 5000,
    min: 1,
    max: 100000,
    effect: 'restart',
    description:
      'Rows in the global top of one published ready set. The keeper publishes up to capacity/2 more rows ' +
      'for the per-queue sections, so the set holds ~1.5 × capacity entries. Fixed at first allocation.',
  },
  {
    path: 'queue.ready.sitemapBoost',
    kind: 'number',
    default: 2,
    min: 1,
    max: 1000,
    effect: 'reclassify',
    description: 'Score multiplier for sitemap rows.',
  },
  {
    path: 'queue.ready.urgentHeadStart',
    kind: 'number',
    default: 1,
    min: 0,
    max: 1000,
    effect: 'reclassify',
    description: 'Score head start (in cadences) of an urgent row.',
  },
  {
    path: 'queue.ready.changedHeadStart',
    kind: 'number',
    default: 1,
    min: 0,
    max: 1000,
    effect: 'reclassify',
    description: 'Score head start (in cadences) of a changed row.',
  },
  {
    path: 'queue.jobLeaseTime',
    kind: 'int',
    default: 600000,
    min: 5000,
    max: DAY,
    effect: 'live',
    description: 'Lease length of a claimed job (ms).',
  },
  {
    path: 'queue.maxClaimLimit',
    kind: 'int',
    default: 25,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Largest claim; bigger limits are clamped.',
  },
  {
    path: 'queue.maxLeases',
    kind: 'int',
    default: 4096,
    min: 64,
    max: 1048576,
    effect: 'restart',
    description: 'Lease table slots; fixed at first allocation.',
  },
  {
    path: 'queue.statusSyncInterval',
    kind: 'int',
    default: 60000,
    min: 250,
    max: 600000,
    effect: 'timers',
    description: 'Status sync and lease-gauge reconcile period (ms).',
  },
  {
    path: 'queue.fleetRoles',
    kind: 'roles',
    default: ['render_fleet'],
    effect: 'live',
    description: 'Roles that may claim and report.',
  },
  {
    path: 'queue.feederRoles',
    kind: 'roles',
    default: ['render_feeder'],
    effect: 'live',
    description: 'Roles that may file and delete targets.',
  },
  {
    path: 'queue.discoverRoles',
    kind: 'roles',
    default: ['render_discover'],
    effect: 'live',
    description: 'Roles that may file unverified URLs.',
  },
  {
    path: 'queue.observerRoles',
    kind: 'roles',
    default: ['render_observer'],
    effect: 'live',
    description:
      'Roles that may read everything an operator reads (every GET under /prerender_admin/ and explain) and change nothing.',
  },
  {
    path: 'render.callbackOrigin',
    kind: 'origin',
    default: null,
    effect: 'live',
    description:
      "The origin (scheme://host[:port], no path) jobs carry as callbackOrigin and whose host is queue_status's " +
      'hostname: where prerender fleets reach this node. null derives it: QUEUE_KEEPER_CALLBACK_ORIGIN, else ' +
      "https://<node name>:<HTTP port> (http for localhost and 127.0.0.1). Per node: set it in each node's config.yaml.",
  },
  {
    path: 'render.deviceType',
    kind: 'name',
    default: 'desktop',
    effect: 'live',
    description: 'The deviceType every job carries: the device profile a prerender fleet renders with.',
  },
  {
    path: 'render.defaultInterval',
    kind: 'int',
    default: DAY,
    min: MINUTE,
    max: 365 * DAY,
    effect: 'reclassify',
    description: 'Cadence when neither a route nor the row gives one (ms).',
  },
  {
    path: 'render.routes',
    kind: 'routes',
    default: [],
    effect: 'reclassify',
    description:
      'Routes `{name, match: exact|prefix, path, renderInterval?}`, first match wins; the name is the queue.',
  },
  {
    path: 'render.failureRetry.fastRetries',
    kind: 'int',
    default: 2,
    min: 0,
    max: 100,
    effect: 'live',
    description: 'Failures retried on the lease alone before backoff.',
  },
  {
    path: 'render.failureRetry.backoffFactor',
    kind: 'number',
    default: 2,
    min: 1,
    max: 100,
    effect: 'live',
    description: 'Backoff growth per failure.',
  },
  {
    path: 'render.failureRetry.maxBackoff',
    kind: 'int',
    default: 7 * DAY,
    min: MINUTE,
    max: 365 * DAY,
    effect: 'live',
    description: 'Longest backoff (ms); never below the cadence.',
  },
  {
    path: 'render.failureRetry.nonSitemapPenalty',
    kind: 'number',
    default: 4,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Extra backoff factor for non-sitemap rows once k > 0.',
  },
  {
    path: 'render.maxBodyBytes',
    kind: 'int',
    default: 5242880,
    min: 1024,
    max: 64 * 1048576,
    effect: 'live',
    description: 'Largest stored page body (bytes); larger results are 413.',
  },
  {
    path: 'render.maxBatchBytes',
    kind: 'int',
    default: 64 * 1048576,
    min: 1048576,
    max: 256 * 1048576,
    effect: 'live',
    description:
      'Largest whole request body of `job_results` and `next` (bytes), checked before buffering; larger is 413.',
  },
  {
    path: 'notify.allowHttp',
    kind: 'boolean',
    default: false,
    effect: 'live',
    description: 'Allow plain-http hook URLs.',
  },
  {
    path: 'notify.allowCidrs',
    kind: 'cidrs',
    default: [],
    effect: 'live',
    description:
      'Addresses or CIDRs hooks may reach; only exact entries open loopback, link-local or this server.',
  },
  {
    path: 'notify.attemptTimeout',
    kind: 'int',
    default: 5000,
    min: 100,
    max: 60000,
    effect: 'live',
    description: 'Time limit of one delivery attempt (ms).',
  },
  {
    path: 'notify.maxAttempts',
    kind: 'int',
    default: 3,
    min: 1,
    max: 10,
    effect: 'live',
    description: 'Attempts per delivery.',
  },
  {
    path: 'notify.maxHooksPerFleet',
    kind: 'int',
    default: 5,
    min: 0,
    max: 100,
    effect: 'live',
    description: 'Hooks per fleet; 0 is a kill switch: no hooks created, nothing sent.',
  },
  {
    path: 'notify.disableAfterFailures',
    kind: 'int',
    default: 10,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Failed deliveries in a row that auto-disable a hook.',
  },
  {
    path: 'notify.ratePerMinute',
    kind: 'int',
    default: 120,
    min: 1,
    max: 100000,
    effect: 'live',
    description: 'Deliveries per minute per hook.',
  },
  {
    path: 'notify.edgeCooldown',
    kind: 'int',
    default: 60000,
    min: 1000,
    max: 3600000,
    effect: 'live',
    description: 'Pacing of created/requeued wakes per queue (ms).',
  },
  {
    path: 'stall.after',
    kind: 'int',
    default: 120000,
    min: 1000,
    max: 7 * DAY,
    effect: 'live',
    description: 'Age of the oldest due row before a queue counts as stalled (ms).',
  },
  {
    path: 'stall.backoff',
    kind: 'durations',
    default: [300000, 1200000, 3600000, 21600000],
    min: 1000,
    max: 7 * DAY,
    effect: 'live',
    description: 'Waits between nudges of one pair (ms); the last step repeats.',
  },
  {
    path: 'stall.maxNudges',
    kind: 'int',
    default: 5,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Nudges without progress before a pair goes quiet.',
  },
  {
    path: 'stall.sweepLimit',
    kind: 'int',
    default: 4,
    min: 1,
    max: 1000,
    effect: 'live',
    description: 'Pairs nudged per tick at most, least-nudged first.',
  },
  {
    path: 'maintenance.tickInterval',
    kind: 'int',
    default: 30000,
    min: 250,
    max: 600000,
    effect: 'timers',
    description: "Worker 0's maintenance tick (stall sweep, secret cleanup, page sweep) (ms).",
  },
];
