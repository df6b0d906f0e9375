// Per-minute flow counters for the queue-state document (docs/monitoring.md): how rows entered, moved and
// left the keeper over the last hour. A ring of 60 slots, each tagged with its minute, so a quiet minute
// reads as zeros without anyone having to clear it.

const FLOW_MINUTES = 60;

export interface FlowMinute {
  /** Minute number (ms / 60000). */
  minute: number;
  /** Rows whose due minute passed during this minute (counted from buckets, not rows). */
  cameDue: number;
  /** Rows the keeper did not hold before. */
  added: number;
  /** Held rows that gained a stronger mark, or went from not due to due. */
  triggered: number;
  /** Held rows whose due minute moved later (and were not triggered). */
  rescheduled: number;
  /** Rows deleted from the table. */
  removed: number;
}

export type FlowCounter = Exclude<keyof FlowMinute, 'minute'>;

export class FlowLedger {
  private readonly slots: FlowMinute[] = [];

  count(minute: number, counter: FlowCounter, amount = 1): void {
    if (!Number.isFinite(minute) || amount === 0) return;
    const index = ((minute % FLOW_MINUTES) + FLOW_MINUTES) % FLOW_MINUTES;
    let slot = this.slots[index];
    if (slot === undefined || slot.minute < minute) {
      slot = { minute, cameDue: 0, added: 0, triggered: 0, rescheduled: 0, removed: 0 };
      this.slots[index] = slot;
    } else if (slot.minute > minute) {
      return; // an hour older than what the slot already holds: outside the window anyway
    }
    slot[counter] += amount;
  }

  /** The last hour ending at `nowMinute`, oldest first, one entry per minute (zeros when quiet). */
  window(nowMinute: number): FlowMinute[] {
    const out: FlowMinute[] = [];
    if (!Number.isFinite(nowMinute)) return out;
    for (let minute = nowMinute - FLOW_MINUTES + 1; minute <= nowMinute; minute++) {
      const slot = this.slots[((minute % FLOW_MINUTES) + FLOW_MINUTES) % FLOW_MINUTES];
      out.push(
        slot !== undefined && slot.minute === minute
          ? { ...slot }
          : { minute, cameDue: 0, added: 0, triggered: 0, rescheduled: 0, removed: 0 },
      );
    }
    return out;
  }
}
