// The row mix of the scale bench (scale.ts): row i of a run is a pure function of (i, now), so the bench
// client (filing through the API) and the seed probe inside Harper (scale-probe.ts) make the same rows
// without passing them around, and a restart can say which rows must exist.
//   - 20 queues: routes /q00/ … /q19/ (no renderInterval, so each row's own cadence counts);
//   - cadences 1 h (10 %), 6 h (20 %), 1 d (40 %), 7 d (20 %), 30 d (10 %);
//   - 10 % due: dueAt up to one cadence in the past (so they carry the urgent mark); the rest come due
//     between 6 h and 6 h + one cadence from now, so none turn due while a run measures;
//   - URLs of 60–200 bytes (uniform), every other row from a sitemap.
import { MINUTE_MS } from '../util/time.js';

const HOUR = 60 * MINUTE_MS;
const DAY = 24 * HOUR;

export const SCALE_QUEUES = 20;
/** The devices a run lists, in order (render.deviceTypes): a run with N devices takes the first N. */
export const DEVICE_NAMES = ['desktop', 'mobile', 'tablet', 'd4', 'd5', 'd6', 'd7', 'd8'];
export const DUE_SHARE = 0.1;
export const URL_MIN = 60;
export const URL_MAX = 200;

/** The cadences and their shares (cumulative upper bounds of a uniform draw). */
const CADENCES: ReadonlyArray<readonly [number, number]> = [
  [0.1, HOUR],
  [0.3, 6 * HOUR],
  [0.7, DAY],
  [0.9, 7 * DAY],
  [1, 30 * DAY],
];

/** The routes that make the 20 queues, as `render.routes` takes them. */
export function scaleRoutes(): Array<Record<string, unknown>> {
  return Array.from({ length: SCALE_QUEUES }, (_, q) => ({
    name: queueName(q),
    match: 'prefix',
    path: `/${queueName(q)}/`,
  }));
}

export function queueName(q: number): string {
  return `q${String(q).padStart(2, '0')}`;
}

/** Four independent draws in [0, 1) for row i (a 32-bit integer hash, splitmix-like). */
function draws(i: number, salt: number): number {
  let x = (i * 0x9e3779b1 + salt * 0x85ebca6b) | 0;
  x = Math.imul(x ^ (x >>> 16), 0x7feb352d);
  x = Math.imul(x ^ (x >>> 15), 0x846ca68b);
  x ^= x >>> 16;
  return (x >>> 0) / 4294967296;
}

const FILL = 'abcdefghijklmnopqrstuvwxyz0123456789';

/**
 * Row i's URL: 60–200 bytes, in queue i % 20. Built flat (one join), as a URL parsed from JSON or XML
 * is: appended a character at a time it would be a rope of ~140 pieces, and whatever first reads its
 * bytes (a length check, a key write) would pay ~4 µs to flatten it, a cost no feeder's input carries.
 */
export function scaleUrl(i: number): string {
  const q = i % SCALE_QUEUES;
  const want = URL_MIN + Math.floor(draws(i, 1) * (URL_MAX - URL_MIN + 1));
  const head = `https://www.shop-${i % 7}.example.com/${queueName(q)}/p-${i.toString(36)}`;
  const tail: string[] = [];
  for (let k = 0; head.length + tail.length + 1 < want; k++) tail.push(FILL[(i + k * 7) % FILL.length]!);
  const url = tail.length > 0 ? [head, '/', ...tail].join('') : head;
  return url.slice(0, Math.max(want, head.length));
}

export interface ScaleTarget {
  url: string;
  cadenceMs: number;
  dueAt: number;
  fromSitemap: boolean;
}

export function isDue(i: number): boolean {
  return draws(i, 3) < DUE_SHARE;
}

/** Row i as filed at `now`. */
export function scaleTarget(i: number, now: number): ScaleTarget {
  const c = draws(i, 2);
  const cadenceMs = CADENCES.find(([upTo]) => c < upTo)![1];
  const spread = draws(i, 4);
  const dueAt = isDue(i)
    ? now - 60_000 - Math.floor(spread * cadenceMs)
    : now + 6 * HOUR + Math.floor(spread * cadenceMs);
  return { url: scaleUrl(i), cadenceMs, dueAt, fromSitemap: i % 2 === 0 };
}

/** Rows [from, to) as filed at `now`. */
export function scaleTargets(from: number, to: number, now: number): ScaleTarget[] {
  const out: ScaleTarget[] = [];
  for (let i = from; i < to; i++) out.push(scaleTarget(i, now));
  return out;
}
