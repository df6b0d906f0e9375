// What the device duties (services/devices/duties.ts) decide without the table: which device the upgrade
// moves bare-URL rows to, how large a slice is, and how a duty shows in queue-state.
import type { QueueKeeperConfig } from '../config/schema.js';

/**
 * Keys a slice of a duty's walk reads: a slice is a key range read, a point read per key and one
 * chunked write, a few milliseconds at most. bench/devices.ts measures worker 0's holds while the duties
 * run; 250-key slices there held it no shorter and filed 30 % slower.
 */
export const SLICE_KEYS = 500;

/**
 * The device rows keyed by a bare URL were rendered for: the deprecated render.deviceType when it is set
 * (lower-cased, as it reads as a list), else `desktop`, the default every job carried before devices.
 * A device not in render.deviceTypes is kept (its rows are orphaned, not lost).
 */
export function upgradeDevice(cfg: QueueKeeperConfig): string {
  return cfg.render.deviceType?.toLowerCase() ?? 'desktop';
}

/** A device duty as queue-state shows it (docs/monitoring.md, `devices.duties`). */
export interface DeviceDutyView {
  kind: 'upgrade' | 'add' | 'remove';
  device: string | null;
  /** rows, pages (the upgrade and a removal), retired (the upgrade), then done or cancelled. */
  phase: string;
  /** Rows moved (upgrade), filed (add) or deleted (remove) so far. */
  rows: number;
  /** Pages moved (upgrade) or deleted (remove) so far. */
  pages: number;
  startedAt: number | null;
  finishedAt: number | null;
}
