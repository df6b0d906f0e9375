// The serving view every worker derives from the keeper signal in shared memory, and the node status it
// gives with pause on top. Reads only process-wide shared structures and the config cell.
import { keeperStaleAfterMs } from '../../util/handoff/keeperSignal.js';
import { config } from '../runtime/config.js';
import { keeperSignal, readySet } from '../runtime/sharedStructures.js';
import { deriveStatus, type NodeStatus } from '../status/control.js';

/** The serving view every worker derives from the signal (stale keepers are reported, not enforced). */
export function servingView(now: number) {
  const s = keeperSignal().read();
  const stale =
    s.heartbeatAt === null || now - s.heartbeatAt > keeperStaleAfterMs(config().queue.keeper.publishInterval);
  // A stale keeper's last set is drained first; only an empty set makes the node not serving.
  const serving = s.live && (!stale || readySet().snapshot().remaining > 0);
  return { serving, due: s.dueCount, complete: s.complete, stale, phase: s.phase };
}

/** This node's status now: the serving view, with pause (NodeControl.isPaused()) on top. */
export function nodeStatusNow(paused: boolean, now = Date.now()): NodeStatus {
  return deriveStatus(servingView(now), paused);
}
