// A RenderSchedule row for unit tests: never rendered, verified, active, due at `nextRenderTime`; `over`
// sets the fields a test is about.
import { newRow, type ScheduleRow } from '../util/schedule/rules.js';

export function scheduleRow(
  cacheKey: string,
  nextRenderTime: number,
  over: Partial<ScheduleRow> = {},
): ScheduleRow {
  return {
    ...newRow(cacheKey, nextRenderTime, { fromSitemap: false, effectiveInterval: null, verified: true }),
    ...over,
  };
}
