// Which device a served request is for, and which stored page and schedule row that names. Pure; the
// serving service (services/serving/service.ts) reads with these keys.
import type { QueueKeeperConfig } from '../config/schema.js';
import { rowKey } from '../schedule/rowKey.js';

/** The key of the page and the schedule row of `url` rendered for `device` (util/schedule/rowKey.ts). */
export function servingKey(url: string, device: string): string {
  return rowKey(url, device);
}

/** The devices pages are rendered for, the fallback first (render.deviceTypes). */
export function deviceTypes(cfg: QueueKeeperConfig): readonly string[] {
  return cfg.render.deviceTypes;
}

/**
 * The device a request is served: its `x-device-type` when that is a rendered device, else
 * `serving.defaultDevice` when that is one, else the first rendered device. A crawler that names an
 * unknown device still gets a page, never a miss caused by the header.
 */
export function chooseDevice(
  header: string | null | undefined,
  devices: readonly string[],
  configuredDefault: string | null,
): string {
  const fallback =
    configuredDefault !== null && devices.includes(configuredDefault) ? configuredDefault : devices[0]!;
  if (header === null || header === undefined) return fallback;
  const asked = header.trim().toLowerCase();
  return devices.find((d) => d.toLowerCase() === asked) ?? fallback;
}
