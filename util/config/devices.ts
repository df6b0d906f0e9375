// The devices each URL is rendered for (render.deviceTypes, docs/configuration.md): one schedule row and
// one stored page per URL and device (util/schedule/rowKey.ts keys them).

/** What a device name is: a lower-case letter, then up to 31 lower-case letters, digits or `-`. */
export const DEVICE_NAME = /^[a-z][a-z0-9-]{0,31}$/;
/** Devices a node renders each URL for, at most: each one adds a row per URL. */
export const MAX_DEVICES = 8;

export function isDeviceName(name: unknown): name is string {
  return typeof name === 'string' && DEVICE_NAME.test(name);
}

/**
 * The problem with a device list, or null when it is one: 1 to MAX_DEVICES distinct device names. Order
 * matters only for serving, whose fallback device is the first.
 */
export function deviceListProblem(v: unknown): string | null {
  if (!Array.isArray(v) || v.length === 0 || v.length > MAX_DEVICES)
    return `must be a list of 1 to ${MAX_DEVICES} device names`;
  for (let i = 0; i < v.length; i++) {
    if (!isDeviceName(v[i]))
      return `[${i}] must be a device name: a lower-case letter, then up to 31 lower-case letters, digits or '-'`;
    if (v.indexOf(v[i]) !== i) return `[${i}] names ${JSON.stringify(v[i])} twice`;
  }
  return null;
}

/**
 * The device list a single render.deviceType stands for: itself, lower-cased (the key accepted any case).
 * Null when even that is no device name.
 */
export function deviceListOf(legacy: string): string[] | null {
  const name = legacy.toLowerCase();
  return isDeviceName(name) ? [name] : null;
}
