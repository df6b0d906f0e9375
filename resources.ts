// Harper's entry point (loaded on every worker, never on the main thread) and the composition root: it
// builds the duty scheduler, the runtime config, the pause control, the keeper and the services with
// their dependencies, connects their events, installs the HTTP front, and on worker 0 starts the queue
// keeper and the maintenance tick. It is the only module that reaches the node's shared-memory
// structures (services/runtime/sharedStructures.ts) and the intervals every duty paces by: each service
// receives what it uses from here.
import { DutyScheduler, realTimer } from './util/duties/scheduler.js';
import { WarnedOnce } from './util/config/warnedOnce.js';
import { CONFIG_UPDATE_HOLD_ENV, parseConfigUpdateHold } from './util/config/updateHold.js';
import { registerAdmin } from './services/http/routes/admin.js';
import { registerChannel } from './services/http/routes/channel.js';
import { registerConsole } from './services/http/routes/console.js';
import { registerFeeding } from './services/http/routes/feeding.js';
import { registerNotify } from './services/http/routes/notify.js';
import { registerProbes } from './services/http/routes/probes.js';
import { registerQueue } from './services/http/routes/queue.js';
import { registerRows } from './services/http/routes/rows.js';
import { GrantHolders } from './util/leases/holders.js';
import { HolderDirectory } from './services/leases/holderAsks.js';
import { registerStall } from './services/http/routes/stall.js';
import { componentDir, RuntimeConfig } from './services/runtime/config.js';
import { registerSitemaps } from './services/http/routes/sitemaps.js';
import { registerServing } from './services/http/routes/serving.js';
import { log, server, table, transaction, workerIndex } from './services/runtime/harper.js';
import { HealthFigures } from './services/metrics/healthFigures.js';
import { nodeMetrics } from './services/metrics/values.js';
import { Router } from './services/http/router.js';
import { Filing } from './services/http/filing.js';
import { KeeperLeadership, type KeeperSeat } from './services/keeper/leadership.js';
import { KeeperService, type ScheduleSource } from './services/keeper/service.js';
import { NodeServing } from './services/keeper/servingView.js';
import { startMaintenance } from './util/duties/maintenance.js';
import { readiness } from './util/keeper/readiness.js';
import { harperConnections } from './services/cluster/connections.js';
import {
  advertisedHost,
  CALLBACK_ORIGIN_ENV,
  callbackOrigin,
  environmentOrigin,
} from './services/cluster/nodeName.js';
import { harperMembership, harperPeers } from './services/cluster/membership.js';
import { ReplicaRepair } from './services/cluster/repair.js';
import { repairWindowMs } from './util/cluster/repair.js';
import { peerWait } from './services/cluster/peerWait.js';
import { ClaimService } from './services/leases/claims.js';
import { readClaimMarks, writeClaimMarks } from './services/leases/claimMarks.js';
import { FleetScope } from './services/leases/fleetScope.js';
import { ResultService } from './services/results/service.js';
import { hookPolicy, pinnedSend, userAgent } from './services/notify/delivery.js';
import { Dispatcher } from './services/notify/dispatcher.js';
import {
  destroyExpiredSecrets,
  fleetViews,
  getFleet,
  getHook,
  hookViews,
  listFleets,
  listHooks,
  recordDelivery,
  signingSecrets,
} from './services/notify/fleets.js';
import { SealKey } from './services/notify/sealKey.js';
import { NotifyService } from './services/notify/wakes.js';
import {
  deletePages,
  moveBarePages,
  pageKeysAfter,
  pageKeysOfUrl,
  pageSweepDuty,
  readPage,
  storePages,
  subscribePage,
} from './services/pages/store.js';
import {
  dropExpiredRetired,
  failingEntries,
  GROUP_COMMIT_WAIT_MS,
  isRetired,
  keysOfUrl,
  moveBareRetired,
  moveBareRows,
  readRow,
  scheduleKeysAfter,
  scheduleKeysInRange,
  retiredEntries,
  readServingRow,
  ScheduleOwner,
  subscribeRow,
  subscribeSchedule,
} from './services/schedule/store.js';
import {
  GROUP_COMMIT_WAIT_ENV,
  MAX_GROUP_COMMIT_WAIT_MS,
  parseGroupCommitWait,
} from './util/schedule/groupCommit.js';
import {
  readClaimRow,
  readScheduleRow,
  scheduleRowEstimate,
  scheduleValueStored,
  walkScheduleHeld,
  walkScheduleRaw,
} from './services/schedule/rawRecords.js';
import { SharedBuffers } from './services/runtime/sharedBuffers.js';
import { SharedStructures } from './services/runtime/sharedStructures.js';
import { DUE_SUMMARY_TABLE, DueSummaryBoard } from './services/stall/dueSummaries.js';
import { chargePair, drainLedger, ledgerId, readLedger } from './services/stall/ledger.js';
import { StallSweep } from './services/stall/sweep.js';
import { NodeControl } from './services/status/control.js';
import { fetchSitemapFile, sitemapAgent, sitemapPolicy } from './services/sitemaps/fetcher.js';
import { SitemapService } from './services/sitemaps/service.js';
import { validateHookHost } from './util/notify/addressPolicy.js';
import { nodeName } from './services/cluster/nodeName.js';
import { OriginFetch } from './services/serving/origin.js';
import { RenderNowWaiters } from './services/serving/renderNow.js';
import { PageServing } from './services/serving/service.js';
import { MinuteBudget, NodeSlots } from './util/serving/nodeCounters.js';
import { keysOfUrlAmong, rowKeys, splitRowKey } from './util/schedule/rowKey.js';
import {
  DeviceDuties,
  deviceDutyViews,
  requestDeviceRemoval,
  upgradingTo,
} from './services/devices/duties.js';
import { upgradeDevice } from './util/schedule/deviceDuties.js';

// Longer than any replication lag we expect between the page and schedule databases after a reconnect.
const PAGE_SWEEP_PEER_GRACE_MS = 60 * 60_000;

// Every timer of this worker is a duty on this scheduler; a `timers` config key re-arms the waiting ones.
/** The pause between a sliced pass's slices: one turn of the event loop. */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const duties = new DutyScheduler({ now: () => Date.now(), timer: realTimer, log, yieldLoop: nextTurn });
// A one-shot wait (unref'd, like every duty's timer): a delivery's retry backoff, a held ask's timeout, a
// result racing its first copy, a schedule commit's retry. What repeats is a duty on `duties` instead.
const sleep = (ms: number) =>
  new Promise<void>((r) => {
    realTimer.set(r, ms);
  });

// The config race test holds every config update open between its read and its write, so two updates
// overlap for certain; the environment asks for that hold (read once, here) and nothing else can.
const configHoldMs = parseConfigUpdateHold(process.env[CONFIG_UPDATE_HOLD_ENV]);
// This thread's handles on the node's shared buffers: every shared structure is laid over one of them.
const buffers = new SharedBuffers();
const sharedBuffer = (key: string, bytes: number) => buffers.get(key, bytes);
const settings = new RuntimeConfig({
  scheduler: duties,
  holdInsideUpdate: configHoldMs > 0 ? () => sleep(configHoldMs) : undefined,
  // A view over the node's shared buffer (obtained once per thread), so an unknown key logs once per node.
  firstWarning: (text) =>
    new WarnedOnce(sharedBuffer('config-warnings', WarnedOnce.byteLength()).buffer).first(text),
});
settings.onChange((_next, _prev, changed) => duties.configChanged(changed));
// This worker's effective configuration: every service and route module that reads a setting gets this
// getter (or a narrower one), never a module-level read.
const config = () => settings.current();
// The intervals the duties pace by, read here and handed to each service that paces by them: getters,
// as a config change applies at runtime (the scheduler re-arms what waits on them).
const publishInterval = () => config().queue.keeper.publishInterval;
const stateInterval = () => config().queue.keeper.stateInterval;
const tickInterval = () => config().maintenance.tickInterval;
// The node's shared-memory structures (this thread's views), sized from the config at first use.
const shared = new SharedStructures(() => config().queue, buffers);
const readySet = () => shared.readySet();
const keeperSignal = () => shared.keeperSignal();
const stateDoc = <T>() => shared.stateDoc<T>();
const leaseTable = () => shared.leaseTable();
const pokeKeeper = (at: number) => shared.pokeKeeper(at);
/** Where prerender fleets reach this node (services/cluster/nodeName.ts). */
const nodeOrigin = () => callbackOrigin(config().render.callbackOrigin);
// The cluster: Harper's replication peers, and (started on worker 0 only) the heartbeat membership.
const peers = harperPeers();
const membership = harperMembership({
  scheduler: duties,
  peers,
  connections: harperConnections(sleep),
  // Worker 0's beats hand over the leases on rows it gave away (util/cluster/handoff.ts).
  handoff: (at, newView) => leadership.handoffFor(at, newView),
  publishInterval,
});
const control = new NodeControl({
  scheduler: duties,
  peerNames: () => peers.names(),
  advertisedHost: () => advertisedHost(config().render.callbackOrigin),
});

const metrics = nodeMetrics(buffers);
const count = metrics.count.bind(metrics);
const now = () => Date.now();

// ------------------------------------------------------------------ what every worker reads of the keeper
// The serving view and node status (from the keeper signal), and the readings queue-state, the overview
// and the metrics answer from.
const serving = new NodeServing({
  signal: keeperSignal,
  ready: readySet,
  publishInterval,
  isPaused: () => control.isPaused(),
});
const figures = new HealthFigures({
  leases: leaseTable,
  signal: keeperSignal,
  state: stateDoc,
  serving: (at) => serving.view(at),
  stateInterval,
  routes: () => config().render.routes,
  results: (queues) => metrics.resultReadings(queues),
});

// ------------------------------------------------------------------ the schedule's writes
// The group commit's wait: GROUP_COMMIT_WAIT_MS, or another the environment names (read once, here;
// empty is unset).
const groupCommitWaitText = process.env[GROUP_COMMIT_WAIT_ENV] ?? '';
const groupCommitWaitMs = groupCommitWaitText === '' ? null : parseGroupCommitWait(groupCommitWaitText);
const schedule = new ScheduleOwner({
  config,
  timer: realTimer,
  sleep,
  read: readScheduleRow,
  groupCommitWaitMs: groupCommitWaitMs ?? GROUP_COMMIT_WAIT_MS,
  upgradeDevice: () => upgradingTo(upgradeDevice(config())),
});

// ------------------------------------------------------------------ notify (the keeper's events go here)
const sealKey = new SealKey({ read: () => process.env.QUEUE_KEEPER_SECRET_KEY, log });
const notify = new NotifyService({
  config,
  sealKey: () => sealKey.key(),
  // Worker 0's dispatcher, bound to the hook tables, the sealing key and the pinned HTTP transport.
  createDispatcher: () =>
    new Dispatcher({
      now,
      random: Math.random,
      // The wait between attempts of a delivery (a one-shot backoff, not a periodic duty).
      sleep,
      config,
      key: () => sealKey.key(),
      fleets: listFleets,
      hooks: () => listHooks(),
      getFleet,
      getHook,
      secrets: signingSecrets,
      send: pinnedSend(config),
      recordDelivery,
      count: (name, n) => count(name, n),
      log,
      userAgent: userAgent(componentDir),
    }),
  keeper: () => leadership.keeper(),
  leases: leaseTable,
  ownership: () => leadership.clusterOwnership(),
  destroyExpiredSecrets,
  log,
});

// ------------------------------------------------------------------ the keeper (runs on worker 0)
// The schedule as the keeper reads it: the subscription, the load's raw walks, point reads.
const scheduleSource: ScheduleSource = {
  subscribe: () => subscribeSchedule(),
  walk: (opts) => walkScheduleRaw(opts),
  walkHeld: (opts, visit) => void walkScheduleHeld(opts, visit),
  read: (key) => readRow(key),
  present: (key) => scheduleValueStored(key),
  estimateRows: () => scheduleRowEstimate(),
};
// Leadership builds the keeper through this once it holds the leader slot, handing in what only it knows
// (the rows this node holds, the slot, the passes around each publish and state document). Its events:
// a due summary may raise `created` edges, an expired lease a `requeued` one (alone; clustered the stall
// sweep's look decides them once for the cluster, NotifyService.judgeCluster).
const buildKeeper = (seat: KeeperSeat): KeeperService => {
  const leases = leaseTable();
  return new KeeperService({
    ...seat,
    source: scheduleSource,
    ready: readySet(),
    signal: keeperSignal(),
    state: stateDoc(),
    config,
    publishInterval,
    stateInterval,
    isLeased: (k, at) => leases.isLeased(k, at),
    leasedUntilHash: (hi, lo, at) => leases.leasedUntilHash(hi, lo, at),
    // The gauge (drifts only high) is cheap; the state timer reconciles it before each document.
    inFlight: () => leases.occupancy(),
    nodeView: () => ({ paused: control.isPaused(), status: serving.status(Date.now()) }),
    log,
    metric: (name, v) => metrics.record(name, v),
    countRepaired: (n) => count('keeper_repaired', n),
    countRecovered: (cause, n) => count('keeper_recovered', n, { cause }),
    onDue: (summary, at) => notify.onDueSummary(summary, at),
    scheduler: duties,
    onConfigChange: (l) => settings.onChange(l),
  });
};
const leadership = new KeeperLeadership({
  scheduler: duties,
  config,
  control,
  keeper: buildKeeper,
  onRequeued: (queue, at) => notify.onRequeued(queue, at),
  // A claim on any worker that finds the set used up pokes worker 0 through the keeper signal.
  onPoke: (fn) => shared.onKeeperPoke(fn),
  sleep,
  signal: keeperSignal,
  leases: leaseTable,
  nodeStatus: (at) => serving.status(at),
  publishInterval,
  tickInterval,
  currentOwnership: () => membership.currentOwnership(),
  viewApplied: (nodes, at) => membership.viewApplied(nodes, at),
  // Replica repair: nodes compare digests of their rows and re-send what a peer lacks (a write Harper's
  // join copy skipped); worker 0's keeper steps it every beat while the node has peers.
  repair: new ReplicaRepair({
    intervalMs: () => config().queue.keeper.repairInterval,
    // Half Harper's audit retention, at most 3 h: a deletion's marker must outlive what repair may carry.
    windowMs: () =>
      repairWindowMs(
        (server.config as { logging?: { auditRetention?: unknown } } | undefined)?.logging?.auditRetention,
      ),
    yieldLoop: nextTurn,
    log,
    count: (name, n) => count(name, n),
  }),
});

// ------------------------------------------------------------------ leases: claims and results
const fleetScope = new FleetScope({
  listFleets,
  // process-wide: the node's count of fleet changes, one word every worker reads before trusting its copy.
  versionWord: () => new Int32Array(sharedBuffer('fleet-version', 8).buffer, 0, 1),
  now,
});
// The names of this worker's lease holders, for the rows view (the lease slot keeps only their hashes).
const grantHolders = new GrantHolders(2 * config().queue.maxLeases);
const holderDirectory = new HolderDirectory(grantHolders, sleep);
const claims = new ClaimService({
  holders: grantHolders,
  readySet,
  leases: leaseTable,
  readRow: readClaimRow,
  writeClaimMarks,
  timer: realTimer,
  isPaused: () => control.isPaused(),
  pauseKnown: () => control.pauseKnown(),
  servingView: (at) => serving.view(at),
  nodeStatus: (at) => serving.status(at),
  pokeKeeper,
  config,
  jobTarget: () => ({ callbackOrigin: nodeOrigin() }),
  count,
  log,
});
const results = new ResultService({
  leases: leaseTable,
  applyResults: (list) => schedule.applyResults(list),
  storePages,
  deletePages,
  countRetired: (reason) => count('retired', 1, { reason }),
  config,
  now,
  sleep,
  count,
  countResult: (queue, outcome, renderMs) => metrics.countResult(queue, outcome, renderMs),
  log,
});

// ------------------------------------------------------------------ the stall sweep
const stallSweep = new StallSweep({
  keeper: () => leadership.keeper(),
  ownership: () => leadership.clusterOwnership(),
  leases: leaseTable,
  ledger: { read: readLedger, charge: chargePair, drain: drainLedger, idOf: ledgerId },
  dueBoard: new DueSummaryBoard({ table: () => table(...DUE_SUMMARY_TABLE), transaction }),
  claimMarks: readClaimMarks,
  fleets: fleetViews,
  hooks: hookViews,
  notifyAvailable: () => notify.available(),
  fireStalled: (fleetId, queue, job, at) => notify.fireStalled(fleetId, queue, job, at),
  requeueMarks: (since) => notify.requeueMarks(since),
  judgeEdges: (look) => notify.judgeCluster(look),
  config,
  tickInterval,
  count,
  log,
});

// ------------------------------------------------------------------ retired rows (docs/feeding.md)
/** Whether a verdict retired the row `key` within render.retiredRetention: discovery files no row for it. */
const retiredRow = (key: string, at: number): boolean => isRetired(key, at, config().render.retiredRetention);
/** Whether a verdict retired every configured device's row of `url`: discovery refuses the URL. */
const retiredUrl = (url: string, at: number): boolean =>
  rowKeys(url, config().render.deviceTypes).every((key) => retiredRow(key, at));

// ------------------------------------------------------------------ filing, over HTTP and in process
// The feeding routes and the in-process API (api.ts, docs/in-process.md) answer through one Filing.
const filing = new Filing({
  fileTargets: (targets, at) => schedule.fileTargets(targets, at),
  deleteTargets: (urls) => schedule.deleteTargets(urls),
  revalidate: (url, at) => schedule.revalidate(url, at),
  deletePages,
  pageKeysOfUrl,
});
/**
 * The in-process API this worker serves to the host app's own resources, reached through api.ts (a
 * function is no resource, so Harper registers no path for it).
 */
export const inProcessApi = {
  fileTargets: (input: unknown) => filing.fileTargets(input),
  deleteTargets: (input: unknown) => filing.deleteTargets(input),
  revalidate: (input: unknown) => filing.revalidate(input),
};

// ------------------------------------------------------------------ sitemaps (docs/sitemaps.md)
// Walks run on the worker that starts them (a registration or refresh) or on worker 0 (the cron refresh
// and the resume of a walk whose holder stopped); each files through this worker's schedule owner.
const sitemapFetcher = {
  config,
  agent: sitemapAgent(config),
  timer: realTimer,
  userAgent: userAgent(componentDir),
};
const sitemaps = new SitemapService({
  config,
  now,
  holder: `${nodeName()}/${process.pid}/${workerIndex() ?? 'main'}`,
  walk: {
    config,
    now,
    fetch: (url, rootHost, validators) => fetchSitemapFile(url, rootHost, validators, sitemapFetcher),
    fileFromSitemap: (items, id, at) =>
      schedule.fileFromSitemap(items, id, at, (key) => !retiredRow(key, at)),
    unlinkFromSitemap: (urls, id) => schedule.unlinkFromSitemap(urls, id),
    deleteSitemapRows: (urls, id) => schedule.deleteSitemapRows(urls, id),
    deletePages,
    isRetired: (url) => retiredUrl(url, now()),
    yieldLoop: nextTurn,
    count: (metric, result, n) => count(metric, n, { result }),
  },
  checkHost: (host) => validateHookHost(host, sitemapPolicy(config())),
  // Clustered, each sitemap is refreshed by the one node that owns it (rendezvous over the nodes).
  ownsSitemap: (id) => leadership.clusterOwnership()?.owns(`sitemap:${id}`) ?? true,
  recordWalk: (figures) => metrics.observe('sitemap_walk_ms', figures.durationMs),
  log,
});

// ------------------------------------------------------------------ serving stored pages (/p/<url>)
// Four words of the node's shared memory: origin fetches running, render-now waiters, and the discover
// budget's minute and count, so each bound holds per node whichever worker a crawler reaches.
const servingCells = () => new Int32Array(sharedBuffer('serving-counters', 16).buffer, 0, 4);
const pageServing = new PageServing({
  config,
  now,
  readRow: readServingRow,
  readPage,
  markUrgent: (key, at) => schedule.revalidateKey(key, at),
  discover: (urls, at) => schedule.discoverUrls(urls, at, (key) => !retiredRow(key, at)),
  discoverBudget: new MinuteBudget(servingCells, 2),
  origin: new OriginFetch({
    config: () => config().serving,
    slots: new NodeSlots(servingCells, 0),
    timer: realTimer,
  }),
  renderNow: new RenderNowWaiters({
    subscribe: subscribePage,
    subscribeRow,
    now,
    slots: new NodeSlots(servingCells, 1),
    timer: realTimer,
    log,
  }),
  log,
});

// ------------------------------------------------------------------ the HTTP front
// This worker's route table; each route module registers on it, then it goes on Harper's middleware chain.
const router = new Router({ http: (fn, opts) => server.http(fn, opts), config, log, workerIndex });
registerFeeding(router, {
  filing,
  discoverUrls: (urls, at) => schedule.discoverUrls(urls, at, (key) => !retiredRow(key, at)),
  isRetired: (url, at) => retiredUrl(url, at),
});
registerAdmin(router, {
  keeper: leadership,
  control,
  settings,
  readRow,
  rowKeysOf: (url) => keysOfUrlAmong(url, config().render.deviceTypes, keysOfUrl(url)),
  removeDevice: requestDeviceRemoval,
  filing,
  failingEntries,
  retiredEntries,
  leases: leaseTable,
  nodeStatus: (at) => serving.status(at),
  workersReady: () => buffers.workersReady(),
});
registerRows(router, {
  walkKeys: (range) => scheduleKeysInRange(range),
  readRow,
  failingEntries,
  keysOfUrl,
  leases: leaseTable,
  holdersOf: (pairs) => holderDirectory.holdersOf(pairs),
  allNoted: () => holderDirectory.allNoted(),
  readyTop: () => readySet().peek(0, Infinity)?.entries ?? [],
  routes: () => config().render.routes,
  renderNow: async (keys, at) => (await schedule.revalidateKeys(keys, at)).length,
  touchRows: (keys) => schedule.touchKeys(keys),
  deleteRows: async (keys) => {
    const deleted = await schedule.deleteKeys(keys);
    await deletePages(keys);
    return deleted;
  },
  log,
});
registerQueue(router, {
  render: () => config().render,
  claims,
  results,
  scope: fleetScope,
  metrics,
  control,
  serving,
  figures,
  leases: leaseTable,
  ready: readySet,
  signal: keeperSignal,
  state: stateDoc,
  sitemaps: () => sitemaps.summary(),
  devices: () => ({ configured: config().render.deviceTypes, duties: deviceDutyViews() }),
});
registerChannel(router, {
  claims,
  results,
  scope: fleetScope,
  scheduler: duties,
  ready: readySet,
  count,
  config,
});
registerNotify(router, {
  sealKey,
  fleetsChanged: () => fleetScope.fleetsChanged(),
  hookPolicy: () => hookPolicy(config()),
  maxHooksPerFleet: () => config().notify.maxHooksPerFleet,
});
registerStall(router, { readLedger });
registerSitemaps(router, { sitemaps });
registerConsole(router);
// The balancer's probes: ready once the keeper serves claims here (util/keeper/readiness.ts).
registerProbes(router, {
  readiness: (at) => {
    const view = serving.view(at);
    return readiness({
      phase: view.phase,
      serving: view.serving,
      pauseKnown: control.pauseKnown(),
      leasesAttached: leasesAttached(),
    });
  },
});
registerServing(router, {
  serving: pageServing,
  count: (name, n, labels) => metrics.count(name, n, labels),
  observe: (name, ms, labels) => metrics.observe(name, ms, labels),
});
router.install();

// ------------------------------------------------------------------ devices (docs/feeding.md "Devices")
/** How often worker 0 looks for device work when it has none (a removal asked for, a device added). */
const DEVICE_DUTY_IDLE_MS = 5000;
const deviceDuties = new DeviceDuties({
  config,
  ownsUrl: (url) => leadership.clusterOwnership()?.owns(url) ?? true,
  retired: (key, at) => retiredRow(key, at),
  schedule: {
    keysAfter: scheduleKeysAfter,
    // The raw point read (the whole row from its stored bytes), as the schedule's writes use.
    readRow: readScheduleRow,
    exists: (key) => readScheduleRow(key) !== undefined,
    moveBareRows,
    moveBareRetired,
    fileDeviceRows: (pairs) => schedule.fileDeviceRows(pairs),
    deleteKeys: (keys) => schedule.deleteKeys(keys),
  },
  pages: { keysAfter: pageKeysAfter, moveBarePages, deletePages },
  yieldLoop: nextTurn,
  clock: () => performance.now(),
  log,
});

/** Retired entries dropped per maintenance tick at most: a backlog drains over ticks, never in one hold. */
const RETIRED_EXPIRY_BATCH = 1000;

/** Whether this worker has the lease table laid over its shared buffer (it throws on a foreign one). */
function leasesAttached(): boolean {
  try {
    leaseTable();
    return true;
  } catch {
    return false;
  }
}

async function start(): Promise<void> {
  await settings.start();
  // Pauses are followed before anything is served — on worker 0 too, before it waits for leadership.
  await control.start();
  leadership.listenForHeldAsks();
  holderDirectory.listen();
  if (workerIndex() === 0) {
    const envOrigin = process.env[CALLBACK_ORIGIN_ENV];
    if (envOrigin !== undefined && envOrigin !== '' && environmentOrigin() === null)
      log.error(
        `${CALLBACK_ORIGIN_ENV} is not an origin (scheme://host[:port]); prerender fleets are sent to ${nodeOrigin()} instead`,
      );
    if (groupCommitWaitText !== '' && groupCommitWaitMs === null)
      log.error(
        `${GROUP_COMMIT_WAIT_ENV} is not a whole number of ms from 0 to ${MAX_GROUP_COMMIT_WAIT_MS}; result writes wait ${GROUP_COMMIT_WAIT_MS} ms`,
      );
    notify.start();
    startMaintenance(duties, tickInterval, [
      stallSweep.duty(),
      notify.secretCleanupDuty(),
      figures.recordDuty(metrics),
      sitemaps.resumeDuty(),
      pageSweepDuty({
        // A page under a bare URL waits for the upgrade to move it (services/devices/duties.ts).
        hasRow: (key) => splitRowKey(key) === null || readRow(key) !== undefined,
        // Clustered, a page can arrive before its row (util/pages/sweep.ts): leave it alone for a while.
        graceMs: async () => ((await peers.names()).length > 0 ? PAGE_SWEEP_PEER_GRACE_MS : 0),
        yieldLoop: nextTurn,
      }),
      {
        // Retired entries past render.retiredRetention, a bounded batch a tick.
        name: 'retired list expiry',
        runOnce: async (now) => ({
          dropped: await dropExpiredRetired(now, config().render.retiredRetention, RETIRED_EXPIRY_BATCH),
        }),
      },
    ]);
    const refresh = sitemaps.refreshDuty();
    duties.add(refresh.duty, { next: refresh.next });
    // The upgrade to device keys, an added device's rows, a device's removal: at once while one has work,
    // else a look every DEVICE_DUTY_IDLE_MS (a removal is asked for on any worker, a device added by config).
    duties.add(
      { name: 'devices', runOnce: (at) => deviceDuties.runOnce(at) },
      { next: () => (deviceDuties.busy ? 0 : DEVICE_DUTY_IDLE_MS) },
    );
    // Clustered, wait (capped) to see the peers before loading, so ownership is decided over them.
    void peerWait({ membership, scheduler: duties, signal: keeperSignal })
      .then(() => leadership.start())
      .catch((e: unknown) => log.error('queue keeper failed to start', e));
  }
  buffers.registerWorker();
}

start().catch((e: unknown) => log.error('queue-keeper failed to start', e));
