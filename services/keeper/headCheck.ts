// The head check: after each publish the keeper point-reads the head of the published set
// (each key at most once a minute) and repairs what it holds wrongly; it also reports, once per batch,
// rows refused as unclaimable.
import type { RowCheckDeps } from './deps.js';

export const HEAD_CHECK_ROWS = 64;
const HEAD_CHECK_EVERY_MS = 60_000;

export class HeadCheck {
  private readonly checkedAt = new Map<string, number>();
  private unclaimableLogged = 0;

  constructor(private readonly deps: RowCheckDeps) {}

  /**
   * Point-reads the head of the published set (each key at most once a minute) and repairs what the
   * keeper holds wrongly. Reads are synchronous, so no event can land between the read and the repair;
   * the read snapshot is refreshed first so it is never older than the events already applied.
   */
  check(now: number, keys: string[]): number {
    this.reportUnclaimable();
    this.deps.source.refreshReads?.();
    let checked = 0;
    let repaired = 0;
    for (const key of keys) {
      const last = this.checkedAt.get(key);
      if (last !== undefined && now - last < HEAD_CHECK_EVERY_MS) continue;
      this.checkedAt.set(key, now);
      checked++;
      const row = this.deps.source.read(key);
      if (row === undefined && this.deps.unreadable(key, now)) continue;
      const want = row && this.deps.owns(key) ? row : null;
      if (!this.deps.core.matches(key, want)) {
        this.deps.repair(key, want, now);
        repaired++;
      }
    }
    if (this.checkedAt.size > 10_000) {
      for (const [k, at] of this.checkedAt) if (now - at >= HEAD_CHECK_EVERY_MS) this.checkedAt.delete(k);
    }
    if (checked > 0) this.deps.stats.headCheck = { at: now, checked, repaired };
    if (repaired > 0) {
      this.deps.stats.repairedTotal += repaired;
      this.deps.countRepaired?.(repaired);
      this.deps.log.warn(`keeper head check repaired ${repaired} of ${checked} rows`);
    }
    return repaired;
  }

  /** Says once per batch, at error level, that rows were refused as unclaimable (they need a fix by hand). */
  private reportUnclaimable(): void {
    const n = this.deps.core.unclaimable;
    if (n === this.unclaimableLogged) return;
    this.deps.log.error(
      `keeper: ${n - this.unclaimableLogged} row(s) not held because their key is not well-formed Unicode ` +
        `(a lone surrogate) and can never be claimed; delete or re-file them. Last: ${JSON.stringify(
          (this.deps.core.lastUnclaimable ?? '').slice(0, 200),
        )}`,
    );
    this.unclaimableLogged = n;
  }
}
