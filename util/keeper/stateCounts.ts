// The counting parts of the queue-state document (docs/monitoring.md), computed from the keeper's buckets.
// Every row in one bucket shares class and minute, so each figure is one addition per bucket: the
// cost follows the number of (class, minute) pairs, never the number of rows.
import type { KeeperClass } from './keeperClass.js';
import type { FlowLedger, FlowMinute } from './flow.js';
import { MINUTE_MS, minuteOf } from '../time.js';
import type { RowState } from '../schedule/rowState.js';

/** Lateness bin edges, in cadences: [0,.25) [.25,1) [1,2) [2,4) [4,∞). */
const LATENESS_EDGES: readonly number[] = [0.25, 1, 2, 4];
/** Route and class lists stop here so a misconfigured feeder cannot grow the shared document unbounded. */
export const STATE_LIST_CAP = 200;

const HOUR_MS = 60 * MINUTE_MS;
const DAY_MS = 24 * HOUR_MS;

export interface DueNow {
  due: number;
  dueSitemap: number;
  /** Due rows not from a sitemap. */
  dueDiscovered: number;
  /** Due rows carrying either mark, urgent or changed: both jumped the queue by a head start. */
  dueUrgent: number;
  /** Every held row by its verdict state, due or not (docs/feeding.md). */
  rowsByState: Record<RowState, number>;
}

export interface Coming {
  /** Rows not yet due whose due instant is within 15 minutes of now. */
  next15m: number;
  next60m: number;
  /** byHour[i]: rows due in [now + i h, now + (i+1) h); only rows not yet due are counted. */
  byHour: number[];
  /** The sum of byHour. */
  next24h: number;
}

export interface RouteLateness {
  route: string;
  due: number;
  sitemap: number[];
  discovered: number[];
}

export interface ClassLateness {
  route: string;
  cadenceMs: number;
  fromSitemap: boolean;
  rows: number;
  due: number;
  /** Due instant (ms) of the oldest due row; null when nothing in the class is due. */
  oldestDueAt: number | null;
  /** How late that row is, in cadences (raw ms when the cadence is not positive, as in the score). */
  oldestLatenessCadences: number | null;
}

export interface Lateness {
  edges: readonly number[];
  sitemap: number[];
  discovered: number[];
  byRoute: RouteLateness[];
  /** Worst first: by oldest lateness in cadences, then by due rows. */
  classes: ClassLateness[];
  listsTruncated: boolean;
}

export interface QueueStateCounts {
  now: DueNow;
  coming: Coming;
  lateness: Lateness;
  flow: FlowMinute[];
}

export function latenessBin(cadences: number): number {
  let bin = 0;
  while (bin < LATENESS_EDGES.length && !(cadences < LATENESS_EDGES[bin]!)) bin++;
  return bin;
}

function latenessInCadences(lateMs: number, cadenceMs: number): number {
  return cadenceMs > 0 ? lateMs / cadenceMs : lateMs;
}

const bins = (): number[] => [0, 0, 0, 0, 0];

/**
 * The report groups the keeper's classes by route × cadence × sitemap flag; the verified flag, the
 * mark and the row's own interval split classes inside the keeper but not on the operator's page.
 */
export function queueState(classes: readonly KeeperClass[], now: number, flow: FlowLedger): QueueStateCounts {
  const dueNow: DueNow = {
    due: 0,
    dueSitemap: 0,
    dueDiscovered: 0,
    dueUrgent: 0,
    rowsByState: { active: 0, suppressed: 0, gone: 0 },
  };
  const coming: Coming = { next15m: 0, next60m: 0, byHour: new Array<number>(24).fill(0), next24h: 0 };
  const sitemap = bins();
  const discovered = bins();
  const routes = new Map<string, RouteLateness>();
  const groups = new Map<string, ClassLateness>();

  for (const cls of classes) {
    dueNow.rowsByState[cls.state] += cls.rows;
    let route = routes.get(cls.route);
    if (route === undefined) {
      route = { route: cls.route, due: 0, sitemap: bins(), discovered: bins() };
      routes.set(cls.route, route);
    }
    const groupKey = `${cls.route}\u0000${cls.cadenceMs}\u0000${cls.fromSitemap ? 1 : 0}`;
    let group = groups.get(groupKey);
    if (group === undefined) {
      group = {
        route: cls.route,
        cadenceMs: cls.cadenceMs,
        fromSitemap: cls.fromSitemap,
        rows: 0,
        due: 0,
        oldestDueAt: null,
        oldestLatenessCadences: null,
      };
      groups.set(groupKey, group);
    }
    group.rows += cls.rows;

    // Buckets are in minute order: due ones first (oldest first), then the coming ones, and nothing
    // past the 24 h horizon is counted, so the walk stops there.
    const order = cls.ensureOrder();
    const classBins = bins();
    let due = 0;
    let oldestDueAt: number | null = null;
    for (let i = 0; i < order.length; i++) {
      const bucket = order[i]!;
      const rows = bucket.count;
      if (rows === 0) continue;
      const dueMs = bucket.minute * MINUTE_MS;
      if (dueMs <= now) {
        due += rows;
        oldestDueAt ??= dueMs;
        classBins[latenessBin(latenessInCadences(now - dueMs, cls.cadenceMs))]! += rows;
        continue;
      }
      const ahead = dueMs - now;
      if (ahead >= DAY_MS) break;
      if (ahead < 15 * MINUTE_MS) coming.next15m += rows;
      if (ahead < HOUR_MS) coming.next60m += rows;
      coming.byHour[Math.floor(ahead / HOUR_MS)]! += rows;
      coming.next24h += rows;
    }
    if (due === 0) continue;
    dueNow.due += due;
    if (cls.fromSitemap) dueNow.dueSitemap += due;
    else dueNow.dueDiscovered += due;
    if (cls.mark !== 'none') dueNow.dueUrgent += due;
    const allBins = cls.fromSitemap ? sitemap : discovered;
    const routeBins = cls.fromSitemap ? route.sitemap : route.discovered;
    for (let bin = 0; bin < classBins.length; bin++) {
      allBins[bin]! += classBins[bin]!;
      routeBins[bin]! += classBins[bin]!;
    }
    route.due += due;
    group.due += due;
    if (group.oldestDueAt === null || oldestDueAt! < group.oldestDueAt) group.oldestDueAt = oldestDueAt;
  }

  for (const group of groups.values()) {
    if (group.oldestDueAt !== null) {
      group.oldestLatenessCadences = latenessInCadences(now - group.oldestDueAt, group.cadenceMs);
    }
  }
  const byRoute = [...routes.values()].sort((a, b) => b.due - a.due || (a.route < b.route ? -1 : 1));
  const classList = [...groups.values()].sort(
    (a, b) =>
      (b.oldestLatenessCadences ?? -1) - (a.oldestLatenessCadences ?? -1) || b.due - a.due || b.rows - a.rows,
  );
  return {
    now: dueNow,
    coming,
    lateness: {
      edges: LATENESS_EDGES,
      sitemap,
      discovered,
      byRoute: byRoute.slice(0, STATE_LIST_CAP),
      classes: classList.slice(0, STATE_LIST_CAP),
      listsTruncated: byRoute.length > STATE_LIST_CAP || classList.length > STATE_LIST_CAP,
    },
    flow: flow.window(minuteOf(now)),
  };
}
