// How integration tests name a URL's schedule row and stored page: `<url>|<device>`
// (util/schedule/rowKey.ts), the device `desktop` unless render.deviceTypes says otherwise.
import { rowKey } from '../util/schedule/rowKey.js';

export { rowKey };

/** The device every URL is rendered for at the default render.deviceTypes. */
export const DEFAULT_DEVICE = 'desktop';

/** The key of `url`'s row and page for the default device. */
export function key(url: string): string {
  return rowKey(url, DEFAULT_DEVICE);
}
