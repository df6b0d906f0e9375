// The shapes of the configuration: a key of the schema (util/config/keys.ts lists them all) and the
// whole configuration as the code reads it once validated (util/config/schema.ts).

/** What a change to the key does at runtime. */
export type ConfigEffect = 'live' | 'timers' | 'reclassify' | 'restart';

export type Kind =
  | 'int'
  | 'number'
  | 'boolean'
  | 'roles'
  | 'durations'
  // render.deviceTypes: a list of device names (util/config/devices.ts)
  | 'devices'
  | 'routes'
  | 'cidrs'
  | 'origin'
  | 'name'
  | 'hosts'
  | 'cron'
  | 'timezone'
  // serving (docs/serving.md): one of `choices`, a string the config answer hides
  | 'choice'
  | 'secret';

export interface ConfigKey {
  path: string;
  kind: Kind;
  default: unknown;
  min?: number;
  max?: number;
  /** 0 is allowed besides the range (e.g. verifyInterval: 0 = off). */
  zeroAllowed?: boolean;
  /** The values a `choice` key takes. */
  choices?: readonly string[];
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
    /** Longest one extension reaches past its call (ms); null is jobLeaseTime (util/config/leaseLimits.ts). */
    maxLeaseExtension: number | null;
    /** Longest a lease lasts from its grant (ms); null is max(1 h, jobLeaseTime). */
    maxLeaseTime: number | null;
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
    /** The devices each URL is rendered for, one row and page each (util/config/devices.ts). */
    deviceTypes: string[];
    /** Deprecated: a one-device render.deviceTypes; null when not set. */
    deviceType: string | null;
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
    redirects: { maxStrikes: number; allowHosts: string[] };
    gone: { recheckInterval: number; maxStrikes: number };
    suppression: { recheckInterval: number; maxStrikes: number };
    retiredRetention: number;
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
  sitemaps: {
    allowHttp: boolean;
    allowCidrs: string[];
    allowHosts: string[];
    maxPerUser: number;
    maxFileBytes: number;
    maxUrlsPerFile: number;
    maxDepth: number;
    maxFilesPerRoot: number;
    maxUrlsPerRoot: number;
    requestTimeout: number;
    maxRedirects: number;
    minCadence: number;
    maxRemovalShare: number;
    refresh: string;
    timezone: string;
  };
  maintenance: { tickInterval: number };
  serving: ServingConfig;
}

export type OnMiss = 'origin' | 'notFound' | 'stale';

export interface ServingConfig {
  hosts: string[];
  /** null: the first configured device. */
  defaultDevice: string | null;
  staleWhileRevalidate: number;
  onMiss: OnMiss;
  allowHttp: boolean;
  allowCidrs: string[];
  originMaxConcurrent: number;
  originTimeout: number;
  discoverPerMinute: number;
  inlineMaxBytes: number;
  renderNow: { enabled: boolean; token: string; timeoutMs: number; maxWaiting: number };
}
