// The device duties (docs/feeding.md "Devices", docs/operating.md "Upgrading"), run on worker 0: the upgrade that
// moves rows and pages keyed by a bare URL to `<url>|<device>`, the filing of a device added to
// render.deviceTypes, and the deletion of a device's rows and pages (DELETE /prerender_admin/devices/{name}).
// Each walks the table in slices that yield (no hold of the event loop), keeps its cursor in the node's
// own table so a restart resumes where it stopped, and shows in queue-state while it runs. This module is
// the one owner of QueueDeviceDuty.
import { table } from '../runtime/harper.js';
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import type { Counts } from '../../util/duties/scheduler.js';
import type { ScheduleRow } from '../../util/schedule/rules.js';
import { rowKey, splitRowKey } from '../../util/schedule/rowKey.js';
import { SLICE_KEYS, upgradeDevice, type DeviceDutyView } from '../../util/schedule/deviceDuties.js';

/** What a duty record holds (one per duty; `filed` lists the devices whose rows are complete). */
interface DutyRecord {
  id: string;
  kind: 'upgrade' | 'add' | 'remove' | 'filed';
  device?: string;
  phase?: 'rows' | 'pages' | 'retired' | 'done' | 'cancelled';
  cursor?: string | null;
  rows?: number;
  pages?: number;
  startedAt?: number;
  finishedAt?: number | null;
  devices?: string[];
}

const duties = () => table('queue_local', 'QueueDeviceDuty');

function dutyRecord(id: string): DutyRecord | undefined {
  const v = duties().primaryStore.get(id) as DutyRecord | null | undefined;
  return v && typeof v === 'object' ? { ...v, id } : undefined;
}

async function save(r: DutyRecord): Promise<void> {
  await duties().put(r.id, { ...r });
}

/** Every duty record of this node, the `filed` list aside, as queue-state shows them. */
export function deviceDutyViews(): DeviceDutyView[] {
  const out: DeviceDutyView[] = [];
  for (const { key, value } of duties().primaryStore.getRange({})) {
    if (typeof key !== 'string' || !value || typeof value !== 'object') continue;
    const r = value as DutyRecord;
    if (r.kind === 'filed') continue;
    out.push({
      kind: r.kind,
      device: r.device ?? null,
      phase: r.phase ?? 'rows',
      rows: r.rows ?? 0,
      pages: r.pages ?? 0,
      startedAt: r.startedAt ?? null,
      finishedAt: r.finishedAt ?? null,
    });
  }
  return out;
}

/**
 * The device the upgrade moves bare-URL rows to while it still walks the rows on this node (`device`, the
 * one it will use, before it has started); null once the rows are moved.
 */
export function upgradingTo(device: string): string | null {
  const r = dutyRecord('upgrade');
  if (r === undefined) return device;
  return r.phase === 'rows' ? (r.device ?? device) : null;
}

/** A duty about to start: its record at the first row, nothing done yet. */
function freshDuty(kind: 'upgrade' | 'add' | 'remove', device: string, now: number): DutyRecord {
  const id = kind === 'upgrade' ? 'upgrade' : `${kind}:${device}`;
  return {
    id,
    kind,
    device,
    phase: 'rows',
    cursor: null,
    rows: 0,
    pages: 0,
    startedAt: now,
    finishedAt: null,
  };
}

/** Asks this node's worker 0 to delete every row and page of `device` (the route checks the name first). */
export async function requestDeviceRemoval(device: string, now: number): Promise<DeviceDutyView> {
  await save(freshDuty('remove', device, now));
  return { kind: 'remove', device, phase: 'rows', rows: 0, pages: 0, startedAt: now, finishedAt: null };
}

export interface DeviceDutyDeps {
  config: () => QueueKeeperConfig;
  /** Whether this node owns a URL (cluster rendezvous; always true alone): it upgrades and files those. */
  ownsUrl: (url: string) => boolean;
  /** A verdict retired this row within the retention: an added device files no row for it. */
  retired: (key: string, now: number) => boolean;
  schedule: {
    keysAfter: (after: string | undefined, limit: number) => string[];
    readRow: (key: string) => ScheduleRow | undefined;
    exists: (key: string) => boolean;
    moveBareRows: (keys: readonly string[], device: string) => Promise<number>;
    moveBareRetired: (device: string) => Promise<number>;
    fileDeviceRows: (pairs: ReadonlyArray<{ key: string; source: ScheduleRow }>) => Promise<number>;
    deleteKeys: (keys: readonly string[]) => Promise<number>;
  };
  pages: {
    keysAfter: (after: string | undefined, limit: number) => Array<{ key: string; bare: boolean }>;
    moveBarePages: (keys: readonly string[], device: string) => Promise<number>;
    deletePages: (keys: string[]) => Promise<number>;
  };
  yieldLoop: () => Promise<void>;
  /** Wall clock (ms) for a run's budget. */
  clock: () => number;
  log: { info: (...a: unknown[]) => void; warn: (...a: unknown[]) => void };
}

/** A run works this long at most (in slices that yield), then lets the scheduler run it again at once. */
const RUN_BUDGET_MS = 1000;
/** Rows a device duty writes in one commit (see inCommits). */
const COMMIT_ROWS = 125;
/** Pages per slice: each is read and written whole (bodies up to render.maxBodyBytes). */
const PAGE_SLICE = 20;

/**
 * The duties as one scheduler duty: `runOnce` advances the upgrade first, then any removal, then any added
 * device, for at most RUN_BUDGET_MS; `busy` says whether it has work left (the cadence runs it again at once).
 */
export class DeviceDuties {
  busy = true;

  constructor(private readonly deps: DeviceDutyDeps) {}

  async runOnce(now: number): Promise<Counts> {
    const until = this.deps.clock() + RUN_BUDGET_MS;
    await this.forgetUnlisted();
    const counts: Counts = { moved: 0, pagesMoved: 0, filed: 0, deleted: 0, pagesDeleted: 0 };
    for (;;) {
      const r = this.nextDuty(now);
      if (r === null) {
        this.busy = false;
        return counts;
      }
      this.busy = true;
      const finished = await this.step(r, now, counts);
      if (finished) await this.finish(r, now);
      if (this.deps.clock() >= until) return counts;
      await this.deps.yieldLoop();
    }
  }

  /**
   * A device taken out of render.deviceTypes leaves the filed list, so putting it back files its rows
   * again (URLs filed meanwhile have none for it).
   */
  private async forgetUnlisted(): Promise<void> {
    const filed = dutyRecord('filed')?.devices;
    if (filed === undefined) return;
    const listed = this.deps.config().render.deviceTypes;
    const kept = filed.filter((d) => listed.includes(d));
    if (kept.length !== filed.length) await save({ id: 'filed', kind: 'filed', devices: kept });
  }

  /** The duty to advance: the upgrade before anything, then removals, then devices still to file. */
  private nextDuty(now: number): DutyRecord | null {
    const cfg = this.deps.config();
    const upgrade = dutyRecord('upgrade');
    if (upgrade === undefined) return freshDuty('upgrade', upgradeDevice(cfg), now);
    if (upgrade.phase !== 'done') return upgrade;
    for (const { key, value } of duties().primaryStore.getRange({})) {
      const r = value as DutyRecord | null;
      if (
        typeof key !== 'string' ||
        !r ||
        r.kind !== 'remove' ||
        r.phase === 'done' ||
        r.phase === 'cancelled'
      )
        continue;
      return { ...r, id: key };
    }
    const filed = dutyRecord('filed')?.devices ?? [];
    for (const device of cfg.render.deviceTypes) {
      if (filed.includes(device)) continue;
      const r = dutyRecord(`add:${device}`);
      if (r !== undefined && r.phase !== 'done' && r.phase !== 'cancelled') return r;
      return freshDuty('add', device, now);
    }
    return null;
  }

  /** One slice of `r`; true when the duty has finished. The record is saved with its new cursor. */
  private async step(r: DutyRecord, now: number, counts: Counts): Promise<boolean> {
    const device = r.device!;
    if (r.kind === 'remove' && this.deps.config().render.deviceTypes.includes(device)) {
      r.phase = 'cancelled';
      r.finishedAt = now;
      await save(r);
      this.deps.log.warn(`devices: removing ${device} stopped: it is in render.deviceTypes again`);
      return false;
    }
    if (r.kind === 'add' && !this.deps.config().render.deviceTypes.includes(device)) {
      r.phase = 'cancelled';
      r.finishedAt = now;
      await save(r);
      return false;
    }
    const phase = r.phase ?? 'rows';
    if (phase === 'rows') {
      const keys = this.deps.schedule.keysAfter(r.cursor ?? undefined, SLICE_KEYS);
      if (keys.length === 0) {
        r.phase = r.kind === 'add' ? 'done' : 'pages';
        r.cursor = null;
      } else {
        r.cursor = keys[keys.length - 1]!;
        const n = await this.rowSlice(r.kind, device, keys, now);
        r.rows = (r.rows ?? 0) + n;
        if (r.kind === 'upgrade') counts.moved! += n;
        else if (r.kind === 'add') counts.filed! += n;
        else counts.deleted! += n;
      }
    } else if (phase === 'pages') {
      const entries = this.deps.pages.keysAfter(r.cursor ?? undefined, PAGE_SLICE);
      if (entries.length === 0) {
        r.phase = r.kind === 'upgrade' ? 'retired' : 'done';
        r.cursor = null;
      } else {
        r.cursor = entries[entries.length - 1]!.key;
        if (r.kind === 'upgrade') {
          const bare = entries.filter((e) => e.bare && this.deps.ownsUrl(e.key)).map((e) => e.key);
          const n = bare.length > 0 ? await this.deps.pages.moveBarePages(bare, device) : 0;
          r.pages = (r.pages ?? 0) + n;
          counts.pagesMoved! += n;
        } else {
          const mine = entries.filter((e) => splitRowKey(e.key)?.device === device).map((e) => e.key);
          const n = mine.length > 0 ? await this.deps.pages.deletePages(mine) : 0;
          r.pages = (r.pages ?? 0) + n;
          counts.pagesDeleted! += n;
        }
      }
    } else if (phase === 'retired') {
      await this.deps.schedule.moveBareRetired(device);
      r.phase = 'done';
    }
    await save(r);
    return r.phase === 'done';
  }

  /** What one slice of the row walk does to `keys`; answers the rows moved, filed or deleted. */
  private async rowSlice(
    kind: DutyRecord['kind'],
    device: string,
    keys: string[],
    now: number,
  ): Promise<number> {
    const { schedule } = this.deps;
    if (kind === 'upgrade') {
      // A key without a device is a row of the layout before devices; each node moves the URLs it owns.
      const bare = keys.filter((k) => splitRowKey(k) === null && this.deps.ownsUrl(k));
      return bare.length > 0 ? schedule.moveBareRows(bare, device) : 0;
    }
    if (kind === 'remove') {
      // Every row of the device, whichever node owns its URL: the deletes replicate.
      const mine = keys.filter((k) => splitRowKey(k)?.device === device);
      return this.inCommits(mine, (part) => schedule.deleteKeys(part));
    }
    // add: a row of any other device names a URL; its row for `device` is filed from it where missing.
    const pairs = new Map<string, ScheduleRow>();
    for (const k of keys) {
      const parts = splitRowKey(k);
      if (parts === null || parts.device === device || !this.deps.ownsUrl(parts.url)) continue;
      const target = rowKey(parts.url, device);
      if (pairs.has(target) || schedule.exists(target) || this.deps.retired(target, now)) continue;
      const source = schedule.readRow(k);
      if (source !== undefined) pairs.set(target, source);
    }
    if (pairs.size === 0) return 0;
    return this.inCommits(
      [...pairs].map(([key, source]) => ({ key, source })),
      (part) => schedule.fileDeviceRows(part),
    );
  }

  /**
   * Writes `items` in commits of COMMIT_ROWS with a turn of the event loop between them: each commit's
   * rows come back to worker 0 as table events the keeper applies in one go, so a slice's 500 rows in one
   * commit made one long burst (bench/README "Devices").
   */
  private async inCommits<T>(items: T[], write: (part: T[]) => Promise<number>): Promise<number> {
    let n = 0;
    for (let i = 0; i < items.length; i += COMMIT_ROWS) {
      if (i > 0) await this.deps.yieldLoop();
      n += await write(items.slice(i, i + COMMIT_ROWS));
    }
    return n;
  }

  private async finish(r: DutyRecord, now: number): Promise<void> {
    r.finishedAt = now;
    await save(r);
    const filed = new Set(dutyRecord('filed')?.devices ?? []);
    if (r.kind === 'upgrade') {
      this.deps.log.info(
        `devices: upgrade done: ${r.rows ?? 0} rows and ${r.pages ?? 0} pages moved to |${r.device}`,
      );
      if ((r.rows ?? 0) > 0) filed.add(r.device!);
    } else if (r.kind === 'add') {
      this.deps.log.info(`devices: filed ${r.rows ?? 0} rows for the added device ${r.device}`);
      filed.add(r.device!);
    } else {
      this.deps.log.info(`devices: deleted ${r.rows ?? 0} rows and ${r.pages ?? 0} pages of ${r.device}`);
      filed.delete(r.device!);
    }
    await save({ id: 'filed', kind: 'filed', devices: [...filed] });
  }
}
