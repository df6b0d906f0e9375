// Who claims or reports: a lease is bound to its grantee, the Harper user and the request's `x-worker-id`
// (docs/fleets.md, docs/prerender-fleet.md). The claim path (claims.ts) records it with each grant; the
// result path (services/results/service.ts) checks it.
import { nameHash } from '../../util/leases/token.js';
import type { HarperUser } from '../runtime/harper.js';

/**
 * Who is claiming or reporting: a lease is bound to its grantee, the user and the `x-worker-id` the
 * claim came with (docs/fleets.md, docs/prerender-fleet.md).
 */
export interface Caller {
  user: number;
  /** nameHash of the request's `x-worker-id` ("" when it has none). */
  worker: number;
  superUser: boolean;
  /** The names the hashes come from, when known (the rows view shows a lease's holder by them). */
  userName?: string;
  workerId?: string;
}

export function callerOf(user: HarperUser | undefined, workerId?: string | null): Caller {
  return {
    user: nameHash(user?.username ?? ''),
    worker: nameHash(workerId ?? ''),
    superUser: user?.role?.permission?.super_user === true,
    userName: user?.username ?? '',
    workerId: workerId ?? '',
  };
}
