// A schedule row, and the stored page it renders, is keyed `<url>|<device>` (docs/feeding.md "Devices"):
// one row per URL and configured device. A device name never holds `|`, so the last `|` of a key always
// splits it; the URL before it may hold `|` of its own. Cluster ownership and the lease table hash the
// key through rowHash, which takes its high half from the URL alone, so every device's row of a URL lives
// on the same node (util/cluster/ownership.ts decides by that half).
import { keyHash, mix32, type KeyHash } from '../keyHash.js';
import { DEVICE_NAME } from '../config/devices.js';

/** The longest device suffix (`|` and 32 characters): a key is at most the URL's limit plus this. */
export const MAX_DEVICE_SUFFIX_BYTES = 33;

/** The key of `url`'s row (and page) for `device`. */
export function rowKey(url: string, device: string): string {
  return `${url}|${device}`;
}

/** The keys of `url`'s rows for each of `devices`, in their order. */
export function rowKeys(url: string, devices: readonly string[]): string[] {
  return devices.map((d) => `${url}|${d}`);
}

/**
 * A key's URL and device, or null when the key carries no device (a row of the layout before devices,
 * keyed by the bare URL, which the upgrade moves: services/devices/duties.ts).
 */
export function splitRowKey(key: string): { url: string; device: string } | null {
  const bar = key.lastIndexOf('|');
  if (bar <= 0) return null;
  const device = key.slice(bar + 1);
  return DEVICE_NAME.test(device) ? { url: key.slice(0, bar), device } : null;
}

/** The URL a key renders: the part before its device, or the whole key when it carries none. */
export function urlOfKey(key: string): string {
  return splitRowKey(key)?.url ?? key;
}

/** The device a key renders for, or null when it carries none. */
export function deviceOfKey(key: string): string | null {
  return splitRowKey(key)?.device ?? null;
}

/**
 * Every key a URL-wide act (delete, revalidate, explain, unlink) covers: the configured devices' keys in
 * their order, then the other devices' keys stored for the URL (`stored`), each once.
 */
export function keysOfUrlAmong(url: string, devices: readonly string[], stored: Iterable<string>): string[] {
  return [...new Set([...rowKeys(url, devices), ...stored])];
}

/** Whether `key` is one of `devices`' rows (no allocation: the keeper asks it of every row it loads). */
export function keyOfDevices(key: string, suffixes: readonly string[]): boolean {
  for (const s of suffixes) if (key.endsWith(s)) return true;
  return false;
}

/** The suffixes keyOfDevices matches for `devices` (`|desktop`, …). */
export function deviceSuffixes(devices: readonly string[]): string[] {
  return devices.map((d) => `|${d}`);
}

/**
 * The 64-bit hash that names a row in the lease table and decides its cluster owner. The high half is
 * the URL's own (ownership reads only that half, so a URL's rows share an owner); the low half mixes in
 * the device, so two devices' rows of one URL are two leases. A key without a device hashes whole.
 */
export function rowHash(key: string): KeyHash {
  const parts = splitRowKey(key);
  if (parts === null) return keyHash(key);
  const u = keyHash(parts.url);
  const lo = (u.lo ^ mix32(keyHash(parts.device).lo)) | 0;
  return u.hi === 0 && lo === 0 ? { hi: 0, lo: 1 } : { hi: u.hi, lo };
}
