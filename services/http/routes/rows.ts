// The rows view (docs/operating.md "Rows one by one"): rows listed by state, queue and URL prefix in
// pages of bounded cost, and the three actions on them (render now, release the lease, delete), each
// super_user only and logged with who did it. The page rules are util/schedule/rowsQuery.ts.
import type { LeaseTable, LeaseView } from '../../../util/leases/table.js';
import type { Holder } from '../../../util/leases/holders.js';
import { failingPage, parseFailingQuery, type FailingEntry } from '../../../util/schedule/failing.js';
import { queueOf, type ScheduleRow } from '../../../util/schedule/rules.js';
import type { RouteConfig } from '../../../util/config/shape.js';
import { urlOfKey, deviceOfKey } from '../../../util/schedule/rowKey.js';
import {
  checkRowTargets,
  decodeKeyCursor,
  duePage,
  keyWalkPage,
  leasedPage,
  parseRowsQuery,
  prefixRange,
  rowStateOf,
  ROWS_SCAN_LIMIT,
  type RowTarget,
} from '../../../util/schedule/rowsQuery.js';
import { answerOf, orRefuse } from '../problems.js';
import { requestShape } from '../../../util/requests/shape.js';
import { reply, type ApiRequest, type ApiResponse, type Router, type RouteEntry } from '../router.js';

export interface RowsDeps {
  /** Schedule keys in key order from `start` (after it when `exclusive`) up to `end`, at most `limit`. */
  walkKeys: (range: { start?: string; end?: string; exclusive: boolean; limit: number }) => Iterable<string>;
  readRow: (key: string) => ScheduleRow | undefined;
  /** The failing list's entries (services/schedule/store.ts failingEntries). */
  failingEntries: () => Iterable<FailingEntry>;
  /** The stored keys of every row of a URL, whatever its device. */
  keysOfUrl: (url: string) => string[];
  leases: () => Pick<LeaseTable, 'lookup' | 'release'>;
  /** The names of the holders of these grants (key, token), noted by any worker of this node. */
  holdersOf: (pairs: ReadonlyArray<[string, string]>) => Promise<Map<string, Holder>>;
  /** The keeper's published ready set, best first, without taking from it (ReadySet.peek). */
  readyTop: () => Array<{ key: string; score: number }>;
  /** Every grant a worker of this node noted lately, with its holder (the `leased` list's candidates). */
  allNoted: () => Promise<Array<[string, Holder]>>;
  routes: () => readonly RouteConfig[];
  /** The rows due now and urgent (the schedule owner's revalidate by key); answers how many were. */
  renderNow: (keys: string[], now: number) => Promise<number>;
  /** Rewrites rows unchanged, so the keeper sees their released leases at once (ScheduleOwner.touchKeys). */
  touchRows: (keys: string[]) => Promise<number>;
  /** Deletes the rows and their pages; answers how many rows there were. */
  deleteRows: (keys: string[]) => Promise<number>;
  log: { info: (...args: unknown[]) => void };
}

/** A lease as the rows view shows it: its state and end (its holder is filled in by `named`). */
function leaseOf(lease: LeaseView) {
  if (lease.state === 'none' || lease.state === 'released' || lease.state === 'expired') return null;
  return {
    state: lease.state,
    expiresAt: lease.expiresAt,
    holder: null as { user: string; workerId: string } | null,
    token: lease.token,
  };
}

function rowEntry(deps: RowsDeps, key: string, row: ScheduleRow, now: number) {
  const shown = leaseOf(deps.leases().lookup(key, now));
  const url = urlOfKey(key);
  return {
    key,
    url,
    deviceType: deviceOfKey(key),
    queue: queueOf(url, deps.routes()),
    state: row.state === 'active' ? rowStateOf(row.nextRenderTime, shown !== null, now) : row.state,
    nextRenderTime: row.nextRenderTime,
    strikes: row.strikes,
    lastOutcome: row.lastOutcome,
    lastStatusCode: row.lastStatusCode,
    lastRenderedAt: row.lastRenderedAt,
    lease: shown,
  };
}

type RowEntry = ReturnType<typeof rowEntry>;

/** The page as answered: each lease's holder named where a worker of this node noted it, no token shown. */
async function named(deps: RowsDeps, rows: RowEntry[]) {
  const pairs: Array<[string, string]> = [];
  for (const r of rows) if (r.lease?.token) pairs.push([r.key, r.lease.token]);
  const names = pairs.length > 0 ? await deps.holdersOf(pairs) : new Map<string, Holder>();
  return rows.map((r) => {
    if (r.lease === null) return r;
    const { token: _token, ...lease } = r.lease;
    const h = names.get(r.key);
    return { ...r, lease: { ...lease, holder: h ? { user: h.user, workerId: h.workerId } : null } };
  });
}

/** Whether a row entry is in the state asked for. */
function inState(e: RowEntry, state: string): boolean {
  if (state === 'all') return true;
  if (state === 'suppressed' || state === 'gone' || state === 'due') return e.state === state;
  if (state === 'leased') return e.lease !== null;
  return e.strikes > 0;
}

/**
 * `GET /prerender_admin/rows`: the failing state from the failing list (most strikes first, its own
 * cursor); every other state from a walk of the schedule in key order, of at most ROWS_SCAN_LIMIT rows
 * per page, from the prefix's first key.
 */
async function listRows(deps: RowsDeps, req: ApiRequest): Promise<ApiResponse> {
  const q = orRefuse(parseRowsQuery(req.query));
  const now = Date.now();
  const routes = deps.routes();
  const fits = (url: string) =>
    (q.prefix === null || url.startsWith(q.prefix)) && (q.queue === null || queueOf(url, routes) === q.queue);
  if (q.state === 'failing') {
    const fq = new URLSearchParams({ limit: String(q.limit) });
    if (q.cursor !== null) fq.set('cursor', q.cursor);
    const query = orRefuse(parseFailingQuery(fq));
    const { page, next } = failingPage(
      () =>
        (function* () {
          for (const e of deps.failingEntries()) if (fits(e.url)) yield e;
        })(),
      { ...query, queue: q.queue },
      (url) => queueOf(url, routes),
      (e) => {
        const row = deps.readRow(e.key);
        return row && row.strikes > 0 ? rowEntry(deps, e.key, row, now) : undefined;
      },
    );
    return reply({ rows: await named(deps, page), next });
  }
  if (q.state === 'due' && q.prefix === null) {
    // The keeper's best due rows, best score first; a prefix walks the schedule instead (below).
    const { page, next } = orRefuse(
      duePage(deps.readyTop(), q.limit, q.cursor, (c) => {
        if (!fits(urlOfKey(c.key))) return undefined;
        const row = deps.readRow(c.key);
        if (!row) return undefined;
        const e = rowEntry(deps, c.key, row, now);
        return e.state === 'due' ? { ...e, score: c.score } : undefined;
      }),
    );
    return reply({ rows: await named(deps, page), next });
  }
  if (q.state === 'leased') {
    // The node's noted grants, soonest end first: a page costs a sort of the leases, not a schedule walk.
    const leases = deps.leases();
    const live = new Map<string, { key: string; expiresAt: number; holder: Holder }>();
    for (const [key, holder] of await deps.allNoted()) {
      if (live.has(key) || !fits(urlOfKey(key))) continue;
      const lease = leases.lookup(key, now);
      if (lease.token !== holder.token || lease.expiresAt === null) continue;
      if (lease.state !== 'leased' && lease.state !== 'grace' && lease.state !== 'held') continue;
      live.set(key, { key, expiresAt: lease.expiresAt, holder });
    }
    const { page, next } = orRefuse(
      leasedPage([...live.values()], q.limit, q.cursor, (c) => {
        const row = deps.readRow(c.key);
        if (!row) return undefined;
        const e = rowEntry(deps, c.key, row, now);
        return e.lease === null ? undefined : e;
      }),
    );
    return reply({ rows: await named(deps, page), next });
  }
  const range = prefixRange(q.prefix);
  const after = q.cursor === null ? null : orRefuse(decodeKeyCursor(q.cursor));
  if (after !== null && q.prefix !== null && !after.startsWith(q.prefix))
    return reply({ error: 'cursor is not a page of this prefix', code: 'invalid_cursor' }, 400);
  const walk = deps.walkKeys({
    start: after ?? range.start,
    end: range.end,
    exclusive: after !== null,
    limit: ROWS_SCAN_LIMIT,
  });
  const { page, next } = keyWalkPage(walk, q.limit, ROWS_SCAN_LIMIT, (key) => {
    const url = urlOfKey(key);
    if (!fits(url)) return undefined;
    const row = deps.readRow(key);
    if (!row) return undefined;
    const e = rowEntry(deps, key, row, now);
    return inState(e, q.state) ? e : undefined;
  });
  return reply({ rows: await named(deps, page), next });
}

/** The row keys an action's entries name: a row key as it is, a URL as every stored row of it. */
function keysOf(deps: RowsDeps, targets: RowTarget[]): string[] {
  const keys = new Set<string>();
  for (const t of targets) {
    if (t.kind === 'key') keys.add(t.key);
    else for (const k of deps.keysOfUrl(t.url)) keys.add(k);
  }
  return [...keys];
}

/** The actions' bodies as docs/openapi.yaml describes them (RowTargets); each entry is checked after. */
const ACTION_BODIES = {
  renderNow: requestShape('renderRowsNow', 'body'),
  release: requestShape('releaseRows', 'body'),
  delete: requestShape('deleteRows', 'body'),
};

function actionKeys(deps: RowsDeps, req: ApiRequest, action: keyof typeof ACTION_BODIES): string[] {
  const problem = ACTION_BODIES[action].check(req.body);
  if (problem) throw answerOf(problem);
  return keysOf(deps, orRefuse(checkRowTargets(req.body)));
}

const who = (req: ApiRequest) => req.user?.username ?? '(unknown)';

/** `POST /prerender_admin/rows/render-now`: every named row due now and urgent. */
async function renderNow(deps: RowsDeps, req: ApiRequest): Promise<ApiResponse> {
  const keys = actionKeys(deps, req, 'renderNow');
  const rows = keys.length === 0 ? 0 : await deps.renderNow(keys, Date.now());
  deps.log.info(`rows: ${who(req)} asked to render ${rows} row(s) now (${keys.length} named)`);
  return reply({ rows });
}

/**
 * `POST /prerender_admin/rows/release`: frees each named row's live lease on this node; the holder's
 * result is then superseded (its token is no longer a live grant's), and the row is granted again once
 * the release grace is over.
 */
async function release(deps: RowsDeps, req: ApiRequest): Promise<ApiResponse> {
  const keys = actionKeys(deps, req, 'release');
  const now = Date.now();
  const leases = deps.leases();
  const released: string[] = [];
  for (const key of keys) {
    const lease = leases.lookup(key, now);
    if (lease.state === 'leased' && lease.token !== null && leases.release(key, lease.token, now))
      released.push(key);
  }
  // The keeper set each leased row aside until its lease's end; a write of the row has it look again.
  if (released.length > 0) await deps.touchRows(released);
  deps.log.info(`rows: ${who(req)} released ${released.length} lease(s) (${keys.length} row(s) named)`);
  return reply({ released: released.length });
}

/** `DELETE /prerender_admin/rows`: the named rows and their pages. */
async function deleteRows(deps: RowsDeps, req: ApiRequest): Promise<ApiResponse> {
  const keys = actionKeys(deps, req, 'delete');
  const deleted = keys.length === 0 ? 0 : await deps.deleteRows(keys);
  deps.log.info(`rows: ${who(req)} deleted ${deleted} row(s) (${keys.length} named)`);
  return reply({ deleted });
}

const ROWS_ROUTES: readonly RouteEntry<RowsDeps>[] = [
  { method: 'GET', path: '/prerender_admin/rows', caller: 'admin', handler: listRows },
  { method: 'POST', path: '/prerender_admin/rows/render-now', caller: 'admin', handler: renderNow },
  { method: 'POST', path: '/prerender_admin/rows/release', caller: 'admin', handler: release },
  { method: 'DELETE', path: '/prerender_admin/rows', caller: 'admin', handler: deleteRows },
];

export function registerRows(router: Router, deps: RowsDeps): void {
  router.register(ROWS_ROUTES, deps);
}
