// Whether a node may take traffic, as a load balancer's or Kubernetes' readiness probe asks it
// (docs/operating.md "Probes"): its keeper serves claims from a published ready set (a load still under
// way counts: claims are served from its first chunk), the lease table is attached on this worker, and
// this worker has read the pause intent. A paused node stays ready: a pause stops claims only, and a
// cluster-wide pause would otherwise take every node out of the balancer at once, feeders and operators
// with it. The services/ side (services/http/routes/probes.ts) reads these from the keeper signal.
import type { KeeperPhase } from '../sharedMemory/keeperSignal.js';

/** The status word a probe answers: 200 `ready`, 503 `unready`. */
export type Readiness = 'ready' | 'unready';

export interface ReadinessInput {
  /** The keeper's phase, from the keeper signal. */
  phase: KeeperPhase;
  /** The serving view's `serving`: a published set claims may take from (services/keeper/servingView.ts). */
  serving: boolean;
  /** This worker has read the pause intent (claims answer `unready` until it has). */
  pauseKnown: boolean;
  /** The lease table is laid over its shared buffer on this worker. */
  leasesAttached: boolean;
}

/** Phases in which a keeper hands out claims: loading (from its first chunk) and live. */
const SERVING_PHASES: ReadonlySet<KeeperPhase> = new Set(['loading', 'live']);

export function readiness(i: ReadinessInput): Readiness {
  const ready = i.serving && SERVING_PHASES.has(i.phase) && i.pauseKnown && i.leasesAttached;
  return ready ? 'ready' : 'unready';
}
