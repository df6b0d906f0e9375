// Operator endpoints of the foundation: config, revalidate, explain, the failing and retired lists, health,
// pause and resume.
import {
  ConfigError,
  configWarnings,
  withSecretsHidden,
  type QueueKeeperConfig,
} from '../../../util/config/schema.js';
import { HttpError } from '../../runtime/httpError.js';
import { queueOf } from '../../../util/schedule/rules.js';
import { failingPage, parseFailingQuery, type FailingEntry } from '../../../util/schedule/failing.js';
import { retiredPage } from '../../../util/schedule/retired.js';
import type { RetiredEntry } from '../../../util/schedule/writes.js';
import { checkSingleUrl } from '../../../util/schedule/targetChecks.js';
import { deviceOfKey } from '../../../util/schedule/rowKey.js';
import { isDeviceName } from '../../../util/config/devices.js';
import type { DeviceDutyView } from '../../../util/schedule/deviceDuties.js';
import { echo } from '../../../util/text.js';
import { requestShape } from '../../../util/requests/shape.js';
import { answerOf, orRefuse } from '../problems.js';
import type { Filing } from '../filing.js';
import { wellFormed } from '../../../util/text.js';
import type { LeaseTable } from '../../../util/leases/table.js';
import type { RuntimeConfig } from '../../runtime/config.js';
import { type ApiRequest, type ApiResponse, reply, type Router, type RouteEntry } from '../router.js';
import { server } from '../../runtime/harper.js';
import type { KeeperLeadership } from '../../keeper/leadership.js';
import { nodeName } from '../../cluster/nodeName.js';
import type { ScheduleRow } from '../../../util/schedule/rules.js';
import type { NodeControl, NodeStatus } from '../../status/control.js';

/**
 * The config update's body as docs/openapi.yaml describes it (ConfigPatch): an object. Its keys are the
 * configuration's key list's to check (RuntimeConfig.update), so a bad one is `invalid_config` naming it.
 */
const CONFIG_BODY = requestShape('updateConfig', 'body');
/** The pause bodies as docs/openapi.yaml describes them; a bad `scope` has its own code. */
const PAUSE_BODY = requestShape('pause', 'body', { scope: 'invalid_scope' });
const RESUME_BODY = requestShape('resume', 'body', { scope: 'invalid_scope' });
/** A device's removal takes no body, or an empty object. */
const DEVICE_REMOVAL_BODY = requestShape('deleteDevice', 'body');

/** An ignored-keys header stays this small whatever the request held (clients cap headers at 16 KiB). */
const MAX_IGNORED_HEADER_BYTES = 1024;
const MAX_IGNORED_KEY_CHARS = 100;

/**
 * The `x-ignored-keys` header: each unknown key made well-formed, cut to 100 characters and
 * percent-encoded (so a newline, a `,` or a `✓` is plain ASCII and cannot break or split the header),
 * comma-separated, and cut at 1 KiB. `x-ignored-count` always says how many there were.
 */
export function ignoredKeysHeader(keys: readonly string[]): string {
  const parts: string[] = [];
  let bytes = 0;
  for (const k of keys) {
    const cut = wellFormed(k).slice(0, MAX_IGNORED_KEY_CHARS);
    const enc = encodeURIComponent(cut);
    if (bytes + enc.length + 1 > MAX_IGNORED_HEADER_BYTES) break;
    parts.push(enc);
    bytes += enc.length + 1;
  }
  return parts.join(',');
}

/** What the keeper holds for a row (asked of worker 0 from any worker), its score and its lease. */
async function explainExtras(
  keeper: KeeperLeadership,
  leases: () => Pick<LeaseTable, 'lookup'>,
  key: string,
  now: number,
) {
  const held = await keeper.describeHeld(key, now);
  const lease = leases().lookup(key, now);
  return { held, score: held?.score ?? null, lease: lease.state === 'none' ? null : lease };
}

/** What the admin routes act on (built in resources.ts). */
export interface AdminDeps {
  keeper: KeeperLeadership;
  control: NodeControl;
  settings: RuntimeConfig;
  /** The schedule owner's point read by key (services/schedule/store.ts). */
  readRow: (key: string) => ScheduleRow | undefined;
  /** The keys of a URL's rows: the configured devices', then any other device's stored row. */
  rowKeysOf: (url: string) => string[];
  /** Asks worker 0 to delete a device's rows and pages (services/devices/duties.ts). */
  removeDevice: (device: string, now: number) => Promise<DeviceDutyView>;
  /** Revalidate, as the in-process API answers it too (../filing.ts). */
  filing: Pick<Filing, 'revalidate'>;
  /** The failing list's entries (services/schedule/store.ts failingEntries). */
  failingEntries: () => Iterable<FailingEntry>;
  /** The retired list's entries (services/schedule/store.ts retiredEntries). */
  retiredEntries: () => Iterable<RetiredEntry>;
  /** The node's lease table (a getter: sized at first use). */
  leases: () => Pick<LeaseTable, 'lookup'>;
  /** This node's status at an instant (services/keeper/servingView.ts). */
  nodeStatus: (now: number) => NodeStatus;
  /** How many of the node's workers have loaded the component (services/runtime/sharedBuffers.ts). */
  workersReady: () => number;
}

/** The effective config, with `warnings` naming settings that are valid but likely to surprise. */
function configAnswer(cfg: QueueKeeperConfig): QueueKeeperConfig & { warnings?: string[] } {
  const warnings = configWarnings(cfg);
  const shown = withSecretsHidden(cfg);
  return warnings.length > 0 ? { ...shown, warnings } : shown;
}

/** `GET /prerender_admin/health`: this worker serves; how many of the node's workers have loaded. */
async function health(deps: AdminDeps): Promise<ApiResponse> {
  return reply({ ok: true, workersReady: deps.workersReady(), workerCount: server.workerCount ?? null });
}

/** `GET /prerender_admin/config`: the effective configuration. */
async function readConfig(deps: AdminDeps): Promise<ApiResponse> {
  return reply(configAnswer(deps.settings.current()));
}

/** `POST /prerender_admin/config`: a partial update, stored and applied on every worker. */
async function updateConfig(deps: AdminDeps, req: ApiRequest): Promise<ApiResponse> {
  const problem = CONFIG_BODY.check(req.body);
  if (problem) throw answerOf(problem);
  try {
    const r = await deps.settings.update(req.body);
    // Built only from bounded ASCII, so nothing here can throw after the row was committed.
    const headers: Record<string, string> = {};
    if (r.ignoredCount > 0) {
      headers['x-ignored-keys'] = ignoredKeysHeader(r.ignored);
      headers['x-ignored-count'] = String(r.ignoredCount);
    }
    if (r.restartRequired.length) headers['x-restart-required'] = r.restartRequired.join(',');
    return reply(configAnswer(r.config), 200, headers);
  } catch (e) {
    if (e instanceof ConfigError) throw new HttpError(400, 'invalid_config', e.message, { key: e.key });
    throw e;
  }
}

/** Pause or resume a scope; published at once, not at the next status sync, when it concerns this node. */
async function setPause(deps: AdminDeps, req: ApiRequest, paused: boolean): Promise<ApiResponse> {
  const { control } = deps;
  const problem = (paused ? PAUSE_BODY : RESUME_BODY).check(req.body ?? {});
  if (problem) throw answerOf(problem);
  const scope = await control.checkScope((req.body as { scope: string }).scope);
  await control.setPause(scope, paused);
  if (scope === 'all' || scope === nodeName()) await control.publishStatus(deps.nodeStatus(Date.now()));
  return reply({ scope, paused });
}

/** `POST /prerender_admin/pause`. */
async function pause(deps: AdminDeps, req: ApiRequest): Promise<ApiResponse> {
  return setPause(deps, req, true);
}

/** `POST /prerender_admin/resume`. */
async function resume(deps: AdminDeps, req: ApiRequest): Promise<ApiResponse> {
  return setPause(deps, req, false);
}

/** `POST /prerender_admin/revalidate`: the row due now and urgent; 404 without a row. */
async function revalidate(deps: AdminDeps, req: ApiRequest): Promise<ApiResponse> {
  return reply(await deps.filing.revalidate(req.body));
}

/**
 * `GET /prerender_admin/failing`: the rows that keep failing, worst first (docs/operating.md "Failing
 * rows"): a walk of the failing list, then one point read per row shown.
 */
async function failing(deps: AdminDeps, req: ApiRequest): Promise<ApiResponse> {
  const query = orRefuse(parseFailingQuery(req.query));
  const routes = deps.settings.current().render.routes;
  const { page: rows, next } = failingPage(
    deps.failingEntries,
    query,
    (url) => queueOf(url, routes),
    (e) => {
      // An entry whose row no longer fails (deleted, or healed by a write the list missed) is passed over.
      const row = deps.readRow(e.key);
      if (!row || row.strikes === 0) return undefined;
      return {
        url: e.url,
        deviceType: e.deviceType,
        queue: queueOf(e.url, routes),
        strikes: row.strikes,
        lastStatusCode: row.lastStatusCode,
        lastError: row.lastError,
        failingSince: row.failingSince,
        nextRenderTime: row.nextRenderTime,
      };
    },
  );
  return reply({ rows, next });
}

/**
 * `GET /prerender_admin/retired`: rows a render verdict retired, newest first (docs/operating.md "Retired
 * rows"): a walk of the retired list only; entries past render.retiredRetention are passed over until the
 * maintenance tick drops them.
 */
async function retired(deps: AdminDeps, req: ApiRequest): Promise<ApiResponse> {
  const now = Date.now();
  const retention = deps.settings.current().render.retiredRetention;
  return reply(orRefuse(retiredPage(deps.retiredEntries, req.query, (e) => now - e.retiredAt < retention)));
}

/**
 * `POST /prerender_admin/explain`: why a URL is or is not being handed out, one entry per device in
 * `devices`; the top-level row, held entry, score and lease are the first configured device's.
 */
async function explain(deps: AdminDeps, req: ApiRequest): Promise<ApiResponse> {
  const url = orRefuse(checkSingleUrl(req.body));
  const now = Date.now();
  const devices = [];
  for (const key of deps.rowKeysOf(url)) {
    const extras = await explainExtras(deps.keeper, deps.leases, key, now);
    devices.push({ deviceType: deviceOfKey(key), row: deps.readRow(key) ?? null, ...extras });
  }
  const { deviceType: _first, ...primary } = devices[0]!;
  return reply({ url, queue: queueOf(url, deps.settings.current().render.routes), ...primary, devices });
}

/**
 * `DELETE /prerender_admin/devices/{name}`: deletes every row and page of a device taken out of
 * render.deviceTypes, as a duty on this node's worker 0 (202; progress in queue-state's `devices`). Refused
 * while the name is still in the list: a replicated config change alone never erases a device.
 */
async function removeDevice(deps: AdminDeps, req: ApiRequest): Promise<ApiResponse> {
  if (req.params.length !== 1) throw new HttpError(404, 'not_found', `no endpoint at ${echo(req.path)}`);
  if (req.body !== undefined) {
    const problem = DEVICE_REMOVAL_BODY.check(req.body);
    if (problem) throw answerOf(problem);
  }
  const name = req.params[0]!;
  if (!isDeviceName(name))
    throw new HttpError(
      400,
      'invalid_device',
      `${echo(name)} is no device name: a lower-case letter, then up to 31 lower-case letters, digits or '-'`,
    );
  const listed = deps.settings.current().render.deviceTypes;
  if (listed.includes(name))
    throw new HttpError(
      409,
      'device_listed',
      `${name} is in render.deviceTypes (${listed.join(', ')}); take it out of the list first (POST /prerender_admin/config)`,
    );
  return reply({ device: name, duty: await deps.removeDevice(name, Date.now()) }, 202);
}

const ADMIN_ROUTES: readonly RouteEntry<AdminDeps>[] = [
  { method: 'GET', path: '/prerender_admin/health', caller: 'admin', handler: health },
  { method: 'GET', path: '/prerender_admin/config', caller: 'admin', handler: readConfig },
  { method: 'POST', path: '/prerender_admin/config', caller: 'admin', handler: updateConfig },
  { method: 'POST', path: '/prerender_admin/pause', caller: 'admin', handler: pause },
  { method: 'POST', path: '/prerender_admin/resume', caller: 'admin', handler: resume },
  { method: 'POST', path: '/prerender_admin/revalidate', caller: 'admin', handler: revalidate },
  { method: 'GET', path: '/prerender_admin/failing', caller: 'admin', handler: failing },
  { method: 'GET', path: '/prerender_admin/retired', caller: 'admin', handler: retired },
  {
    method: 'POST',
    path: '/prerender_admin/explain',
    caller: 'admin',
    handler: explain,
    options: () => ({ observerRead: true }),
  },
  { method: 'DELETE', path: '/prerender_admin/devices/*', caller: 'admin', handler: removeDevice },
];

export function registerAdmin(router: Router, deps: AdminDeps): void {
  router.register(ADMIN_ROUTES, deps);
}
