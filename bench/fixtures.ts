// Shared fixtures of the pure keeper benchmarks: the route layout, its classifier, a deterministic PRNG
// (so runs compare) and flat ~100-character URLs as a decoded record key would be.
import type { Classify } from '../util/keeper/core.js';
import { MINUTE_MS } from '../util/time.js';

export const HOUR = 60 * MINUTE_MS;
export const DAY = 24 * HOUR;

export const ROUTES = [
  { prefix: '/catalog/products/', route: 'products', cadenceMs: 6 * HOUR },
  { prefix: '/news/', route: 'news', cadenceMs: HOUR },
  { prefix: '/blog/', route: 'blog', cadenceMs: null },
  { prefix: '/help/articles/', route: 'unrouted', cadenceMs: null },
] as const;

export const classify: Classify = (url, own) => {
  const path = url.slice(url.indexOf('/', 8));
  for (const r of ROUTES) {
    if (path.startsWith(r.prefix)) return { route: r.route, cadenceMs: r.cadenceMs ?? own ?? DAY };
  }
  return { route: 'unrouted', cadenceMs: own ?? DAY };
};

/** A seeded PRNG in [0, 1). */
export function seededRandom(seed = 0x9e3779b9): () => number {
  let s = seed;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A flat ~100-char URL, as a decoded record key would be (not a cons string of the template parts). */
export function urlOf(i: number): string {
  const r = ROUTES[i % ROUTES.length]!;
  const text =
    `https://www.example-shop.com${r.prefix}item-${i.toString(36)}-${'abcdefghij'.repeat(10)}`.slice(0, 100);
  return Buffer.from(text, 'latin1').toString('latin1');
}

/** ROUTES as the `render.routes` of a Harper-backed bench's config (`/help/articles/` stays unrouted). */
export const CONFIG_ROUTES = [
  { name: 'products', match: 'prefix', path: '/catalog/products/', renderInterval: 6 * HOUR },
  { name: 'news', match: 'prefix', path: '/news/', renderInterval: HOUR },
  { name: 'blog', match: 'prefix', path: '/blog/' },
];

/** The seed of the Harper-backed keeper benches' targets (keeper-scale.ts, keeper-load.ts). */
export const SCALE_SEED = 0x2545f491;

/**
 * The keeper benches' rows, filed through `POST /render_queue/targets`: URL i of urlOf, every other one
 * from a sitemap, 10 % with their own 7-day cadence, ~30 % due (a past dueAt within two cadences).
 */
export function scaleTargets(
  rows: number,
  now: number,
  random: () => number,
): Array<Record<string, unknown>> {
  return Array.from({ length: rows }, (_, i) => {
    const t: Record<string, unknown> = { url: urlOf(i), fromSitemap: i % 2 === 0 };
    if (random() < 0.1) t.cadenceMs = 7 * DAY;
    const cadence = ROUTES[i % ROUTES.length]!.cadenceMs ?? DAY;
    if (random() < 0.3) t.dueAt = now - Math.floor(random() * 2 * cadence) - 60_000;
    return t;
  });
}
