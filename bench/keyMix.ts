// The keys the pure keeper benches hold (keeper-core.ts, keeper-heap.ts, publish-core.ts), chosen by the
// MIX environment variable:
//   - `fixture` (default): the flat ~100-character URLs of fixtures.ts, keyed by the bare URL;
//   - `scale`: the scale bench's URLs (scale-mix.ts: 60–200 bytes, 7 hosts, 20 queues), keyed
//     `<url>|<device>` for DEVICES devices (default 1), the devices of a URL on consecutive rows.
import type { Classify } from '../util/keeper/core.js';
import { DEVICE_NAMES, scaleUrl } from './scale-mix.js';
import { classify as fixtureClassify, DAY, urlOf } from './fixtures.js';

export const MIX = process.env.MIX === 'scale' ? 'scale' : 'fixture';
export const DEVICES = Math.max(1, Math.min(DEVICE_NAMES.length, Number(process.env.DEVICES ?? 1)));

/** Row i's key: flat (not a cons string of template parts), as a decoded record key would be. */
export function keyOf(i: number): string {
  if (MIX === 'fixture') return urlOf(i);
  const text = `${scaleUrl(Math.floor(i / DEVICES))}|${DEVICE_NAMES[i % DEVICES]}`;
  return Buffer.from(text, 'latin1').toString('latin1');
}

/** The index of the row `key` names (the inverse of keyOf). */
export function indexOfKey(key: string): number {
  if (MIX === 'fixture') return Number.parseInt(key.slice(key.indexOf('item-') + 5).split('-')[0]!, 36);
  const bar = key.lastIndexOf('|');
  const url = key.slice(0, bar);
  const p = url.indexOf('/p-');
  const i = Number.parseInt(url.slice(p + 3).split('/')[0]!, 36);
  return i * DEVICES + DEVICE_NAMES.indexOf(key.slice(bar + 1));
}

/** The scale mix's queues are its path's first segment (`/q07/`); fixture keys keep their routes. */
const scaleClassify: Classify = (key, own) => {
  const at = key.indexOf('/', 8);
  return { route: key.slice(at + 1, at + 4), cadenceMs: own ?? DAY };
};

export const classify: Classify = MIX === 'fixture' ? fixtureClassify : scaleClassify;
