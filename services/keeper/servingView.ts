// The serving view every worker derives from the keeper signal in shared memory, and the node status it
// gives with pause on top. One NodeServing per worker, built in resources.ts over the node's shared
// structures; the claims, the routes, the metrics and the keeper's status sync read it.
import {
  keeperStaleAfterMs,
  type KeeperPhase,
  type KeeperSignal,
} from '../../util/sharedMemory/keeperSignal.js';
import type { ReadySet } from '../../util/sharedMemory/readySet.js';
import { deriveStatus, type NodeStatus, type ServingView } from '../status/control.js';

export interface NodeServingDeps {
  /** The node's keeper signal and ready set (getters: sized at first use). */
  signal: () => Pick<KeeperSignal, 'read'>;
  ready: () => Pick<ReadySet, 'snapshot'>;
  /** `queue.keeper.publishInterval`: a keeper whose heartbeat is older than keeperStaleAfterMs of it is stale. */
  publishInterval: () => number;
  /** Whether this node is paused (NodeControl.isPaused). */
  isPaused: () => boolean;
}

/** What the signal says at one instant, as every worker reads it. */
export interface ServingNow extends ServingView {
  /** The heartbeat is too old: reported, not enforced (the last set drains first). */
  stale: boolean;
  phase: KeeperPhase;
  /** The last publish left due, unleased rows out of the set. */
  leftOut: boolean;
}

export class NodeServing {
  constructor(private readonly deps: NodeServingDeps) {}

  /** The serving view at `now`. */
  view(now: number): ServingNow {
    const s = this.deps.signal().read();
    const stale =
      s.heartbeatAt === null || now - s.heartbeatAt > keeperStaleAfterMs(this.deps.publishInterval());
    // A stale keeper's last set is drained first; only an empty set makes the node not serving.
    const serving = s.live && (!stale || this.deps.ready().snapshot().remaining > 0);
    return {
      serving,
      due: s.dueCount,
      complete: s.complete,
      stale,
      phase: s.phase,
      leftOut: s.leftOut === true,
    };
  }

  /** This node's status at `now`: the serving view, with pause on top. */
  status(now: number): NodeStatus {
    return deriveStatus(this.view(now), this.deps.isPaused());
  }
}
