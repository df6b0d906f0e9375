// Operator endpoints for fleets and notify hooks. Bodies are closed: an unknown field
// is a 400. A hook secret leaves the server only in the answers of create and rotate.
import { redactUrl, validateHookUrl, type HookUrlPolicy } from '../../../util/notify/addressPolicy.js';
import { HttpError, badRequest } from '../../runtime/httpError.js';
import { requestShape, type RequestShape } from '../../../util/requests/shape.js';
import { answerOf } from '../problems.js';
import { echo, isWellFormed } from '../../../util/text.js';
import { MAX_QUEUE_NAME_CHARS, fleetNameProblem } from '../../../util/notify/wakeBody.js';
import {
  CeilingExceeded,
  FleetNotActive,
  createFleet,
  createHook,
  deleteHook,
  getFleet,
  getHook,
  hookSecretOpens,
  listFleets,
  listHooks,
  revokeFleet,
  rotateHook,
  setHookEnabled,
  type FleetRecord,
  type HookRecord,
} from '../../notify/fleets.js';
import type { SealKey } from '../../notify/sealKey.js';
import { type ApiRequest, type ApiResponse, reply, type Router, type RouteEntry } from '../router.js';

/** Ids are UUIDs; anything much longer cannot name a row (and would exceed the store's key limit). */
const MAX_ID_CHARS = 200;

/** The fleet and hook bodies as docs/openapi.yaml describes them; each field has its own code. */
const FLEET_BODY = requestShape('createFleet', 'body', {
  name: 'invalid_name',
  queues: 'invalid_queues',
  username: 'invalid_username',
});
const HOOK_BODY = requestShape('createHook', 'body', {
  fleetId: 'invalid_fleetId',
  url: 'invalid_url',
  queues: 'invalid_queues',
});
/** rotate, enable and disable: each its own operation's body (no body, or an empty object). */
const ACTION_BODIES: ReadonlyMap<string, RequestShape> = new Map([
  ['rotate', requestShape('rotateHookSecret', 'body')],
  ['enable', requestShape('enableHook', 'body')],
  ['disable', requestShape('disableHook', 'body')],
]);

function fleetView(f: FleetRecord) {
  return {
    id: f.id,
    name: f.name,
    queues: f.queues,
    state: f.state,
    username: f.username,
    createdAt: f.createdAt,
    revokedAt: f.revokedAt,
  };
}

/** What any answer may show of a hook: never a secret, and the URL's query redacted. */
/**
 * A hook as operators see it. `secretOpens` false: its secret does not open under the current
 * QUEUE_KEEPER_SECRET_KEY (the key changed), so nothing is sent to it until it is rotated, while its
 * delivery health, which only receivers' answers move, still reads as before.
 */
function hookView(h: HookRecord, key: Buffer) {
  return {
    id: h.id,
    fleetId: h.fleetId,
    url: redactUrl(h.url),
    queues: h.queues,
    enabled: h.enabled,
    disabledReason: h.disabledReason,
    consecutiveFailures: h.consecutiveFailures,
    lastStatus: h.lastStatus,
    lastError: h.lastError,
    lastAttemptAt: h.lastAttemptAt,
    createdAt: h.createdAt,
    previousSecretValidUntil: h.previousValidUntil,
    secretOpens: hookSecretOpens(h, key),
  };
}

// After the document's shape (FLEET_BODY, HOOK_BODY), which has vouched for each field's type and
// length, what a schema cannot say: a name of spaces only, a lone surrogate, a name's bytes in a wake.

/** A fleet's name is sent in every wake body, so it obeys the wake's byte budget (util/notify/wakeBody.ts). */
function checkFleetName(name: string): string {
  const problem = fleetNameProblem(name);
  if (problem) throw badRequest('invalid_name', `name ${problem}`);
  return name;
}

function checkUsername(v: string): string {
  if (v.trim() === '') throw badRequest('invalid_username', 'username must not be empty');
  if (!isWellFormed(v)) throw badRequest('invalid_username', 'username must be well-formed Unicode');
  return v;
}

/** A queue list: absent = [] (all); otherwise distinct names, none of spaces only or ill-formed. */
function checkQueues(v: readonly string[] | null | undefined): string[] {
  const out: string[] = [];
  (v ?? []).forEach((q, i) => {
    if (q.trim() === '' || !isWellFormed(q))
      throw badRequest(
        'invalid_queues',
        `queues[${i}] must be a non-empty queue name of at most ${MAX_QUEUE_NAME_CHARS} characters`,
      );
    if (!out.includes(q)) out.push(q);
  });
  return out;
}

function requireKeyOf(sealKey: SealKey): Buffer {
  const key = sealKey.key();
  if (!key)
    throw new HttpError(
      503,
      'unavailable',
      `notify hooks are unavailable: ${sealKey.problem() ?? 'no sealing key'}`,
    );
  return key;
}

function oneParam(req: ApiRequest, what: string): string {
  const id = req.params[0] ?? '';
  if (id === '' || req.params.length !== 1 || id.length > MAX_ID_CHARS)
    throw new HttpError(404, 'not_found', `no ${what} at ${echo(req.path)}`);
  return id;
}

async function existingHook(req: ApiRequest): Promise<HookRecord> {
  const id = req.params[0] ?? '';
  const hook = id && id.length <= MAX_ID_CHARS ? await getHook(id) : undefined;
  if (!hook) throw new HttpError(404, 'not_found', `no hook with id ${echo(id)}`);
  return hook;
}

export interface NotifyRouteDeps {
  sealKey: SealKey;
  /** A fleet was created or revoked here (services/leases/fleetScope.ts reloads its bindings). */
  fleetsChanged: () => void;
  /** The hook address policy as configured now (services/notify/delivery.ts). */
  hookPolicy: () => HookUrlPolicy;
  /** notify.maxHooksPerFleet as configured now. */
  maxHooksPerFleet: () => number;
}

/** `POST /prerender_admin/fleets`: registers a fleet, bound to a user when one is named. */
async function addFleet(deps: NotifyRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const problem = FLEET_BODY.check(req.body);
  if (problem) throw answerOf(problem);
  const body = req.body as { name: string; queues?: string[] | null; username?: string | null };
  const name = checkFleetName(body.name);
  const queues = checkQueues(body.queues);
  const username =
    body.username === undefined || body.username === null ? null : checkUsername(body.username);
  const created = await createFleet({ name, queues, username }, Date.now());
  deps.fleetsChanged();
  return reply(fleetView(created));
}

/** `GET /prerender_admin/fleets`. */
async function listAllFleets(): Promise<ApiResponse> {
  return reply((await listFleets()).map(fleetView));
}

/** `DELETE /prerender_admin/fleets/<id>`: revokes the fleet. */
async function revokeFleetById(deps: NotifyRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const id = oneParam(req, 'fleet');
  const fleet = await revokeFleet(id, Date.now());
  deps.fleetsChanged();
  if (!fleet) throw new HttpError(404, 'not_found', `no fleet with id ${echo(id)}`);
  return reply(fleetView(fleet));
}

/** `POST /prerender_admin/hooks`: a hook for an active fleet, its URL checked against the address policy. */
async function addHook(deps: NotifyRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const key = requireKeyOf(deps.sealKey);
  const problem = HOOK_BODY.check(req.body);
  if (problem) throw answerOf(problem);
  const body = req.body as { fleetId: string; url: string; queues?: string[] | null };
  const queues = checkQueues(body.queues);
  const fleet = body.fleetId.length <= MAX_ID_CHARS ? await getFleet(body.fleetId) : undefined;
  if (!fleet) throw new HttpError(404, 'not_found', `no fleet with id ${echo(body.fleetId)}`);
  if (fleet.state !== 'active') throw new HttpError(409, 'fleet_revoked', `fleet ${fleet.id} is revoked`);
  if (fleet.queues.length > 0) {
    const outside = queues.find((q) => !fleet.queues.includes(q));
    if (outside !== undefined)
      throw badRequest('invalid_queues', `queue ${echo(outside)} is not served by fleet ${echo(fleet.name)}`);
  }
  const verdict = await validateHookUrl(body.url, deps.hookPolicy());
  // A resolver that cannot answer now is our trouble, not a verdict on the URL: retry later.
  if (!verdict.ok && verdict.transient)
    throw new HttpError(503, 'unavailable', `url ${verdict.phrase}; try again`, undefined, {
      'retry-after': '5',
    });
  // The phrase names a class ("resolves to a private address"), never the address or the query.
  if (!verdict.ok) throw badRequest('invalid_url', `url ${verdict.phrase}`);
  const ceiling = deps.maxHooksPerFleet();
  try {
    const { hook, secret } = await createHook(
      { fleetId: fleet.id, url: verdict.url.href, queues },
      ceiling,
      key,
      Date.now(),
    );
    return reply({ ...hookView(hook, key), secret });
  } catch (e) {
    if (e instanceof FleetNotActive)
      throw new HttpError(409, 'fleet_revoked', `fleet ${fleet.id} is revoked`);
    if (e instanceof CeilingExceeded)
      throw new HttpError(
        409,
        'ceiling_exceeded',
        ceiling === 0
          ? 'notify hooks are switched off (notify.maxHooksPerFleet is 0)'
          : `fleet ${JSON.stringify(fleet.name)} already has ${ceiling} hooks (notify.maxHooksPerFleet)`,
      );
    throw e;
  }
}

/** `GET /prerender_admin/hooks` (`?fleetId=` narrows to one fleet's). */
async function listAllHooks(deps: NotifyRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const key = requireKeyOf(deps.sealKey);
  const fleetId = req.query.get('fleetId');
  const list = await listHooks(fleetId === null || fleetId === '' ? undefined : fleetId);
  return reply(list.map((h) => hookView(h, key)));
}

/** `POST /prerender_admin/hooks/<id>/rotate|enable|disable`. */
async function changeHook(deps: NotifyRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  const key = requireKeyOf(deps.sealKey);
  const action = req.params[1] ?? '';
  // A Map, not an object: a path segment such as `constructor` must name no action.
  const shape = ACTION_BODIES.get(action);
  if (req.params.length !== 2 || shape === undefined)
    throw new HttpError(404, 'not_found', `no endpoint at ${echo(req.path)}`);
  if (req.body !== undefined) {
    const problem = shape.check(req.body);
    if (problem) throw answerOf(problem);
  }
  const hook = await existingHook(req);
  if (action === 'rotate') {
    const r = await rotateHook(hook.id, key, Date.now());
    if (!r) throw new HttpError(404, 'not_found', `no hook with id ${echo(hook.id)}`);
    return reply({
      secret: r.secret,
      previousSecretValidUntil: r.hook.previousValidUntil,
      enabled: r.hook.enabled,
    });
  }
  const next = await setHookEnabled(hook.id, action === 'enable');
  if (!next) throw new HttpError(404, 'not_found', `no hook with id ${echo(hook.id)}`);
  return reply(hookView(next, key));
}

/** `DELETE /prerender_admin/hooks/<id>`. */
async function removeHook(deps: NotifyRouteDeps, req: ApiRequest): Promise<ApiResponse> {
  requireKeyOf(deps.sealKey);
  const id = oneParam(req, 'hook');
  if (!(await deleteHook(id))) throw new HttpError(404, 'not_found', `no hook with id ${echo(id)}`);
  return reply({ deleted: true });
}

const NOTIFY_ROUTES: readonly RouteEntry<NotifyRouteDeps>[] = [
  { method: 'POST', path: '/prerender_admin/fleets', caller: 'admin', handler: addFleet },
  { method: 'GET', path: '/prerender_admin/fleets', caller: 'admin', handler: listAllFleets },
  { method: 'DELETE', path: '/prerender_admin/fleets/*', caller: 'admin', handler: revokeFleetById },
  { method: 'POST', path: '/prerender_admin/hooks', caller: 'admin', handler: addHook },
  { method: 'GET', path: '/prerender_admin/hooks', caller: 'admin', handler: listAllHooks },
  { method: 'POST', path: '/prerender_admin/hooks/*', caller: 'admin', handler: changeHook },
  { method: 'DELETE', path: '/prerender_admin/hooks/*', caller: 'admin', handler: removeHook },
];

export function registerNotify(router: Router, deps: NotifyRouteDeps): void {
  router.register(NOTIFY_ROUTES, deps);
}
