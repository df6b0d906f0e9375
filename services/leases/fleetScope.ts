// Which queues a user may claim from (docs/fleets.md): a user named as the `username` of an
// active fleet claims only from that fleet's queues; the user of a revoked fleet claims nothing (403
// fleet_revoked); a user bound to no fleet claims from every queue. Fleets change rarely and a claim
// must not read a table, so each worker keeps the bindings for a second.
import { HttpError } from '../runtime/httpError.js';
import type { FleetRecord } from '../notify/fleets.js';

/** How long a worker trusts its copy of the fleet bindings: a revoke takes effect within this. */
const BINDINGS_TTL_MS = 1000;

/** null: every queue. */
export type QueueScope = ReadonlySet<string> | null;

interface Binding {
  active: FleetRecord[];
  revoked: boolean;
}

export interface FleetScopeDeps {
  listFleets: () => Promise<FleetRecord[]>;
  /**
   * A process-wide count of fleet changes made on this node (one Int32 in a shared buffer): a create or
   * revoke on any worker is seen by every worker's next claim at once. Changes replicated from other
   * nodes wait out the TTL.
   */
  versionWord: () => Int32Array;
  now: () => number;
}

/** One worker's copy of the fleet bindings, and the scope checks of claims and results. */
export class FleetScope {
  private cached: { at: number; version: number; byUser: Map<string, Binding> } | null = null;
  private loading: Promise<Map<string, Binding>> | null = null;

  constructor(private readonly deps: FleetScopeDeps) {}

  private async bindings(now: number): Promise<Map<string, Binding>> {
    const version = Atomics.load(this.deps.versionWord(), 0);
    const c = this.cached;
    if (c && c.version === version && now - c.at < BINDINGS_TTL_MS) return c.byUser;
    this.loading ??= this.deps
      .listFleets()
      .then((fleets) => {
        const byUser = new Map<string, Binding>();
        for (const f of fleets) {
          if (!f.username) continue;
          const b = byUser.get(f.username) ?? { active: [], revoked: false };
          if (f.state === 'active') b.active.push(f);
          else b.revoked = true;
          byUser.set(f.username, b);
        }
        this.cached = { at: this.deps.now(), version, byUser };
        return byUser;
      })
      .finally(() => {
        this.loading = null;
      });
    return this.loading;
  }

  /** A fleet was created or revoked here: every worker of this node reloads its bindings on its next claim. */
  fleetsChanged(): void {
    Atomics.add(this.deps.versionWord(), 0, 1);
    this.cached = null;
  }

  /**
   * The queues `username` may claim from, narrowed by the body's `queues`. Throws 403 fleet_revoked for
   * the user of a revoked fleet (and no active one), 400 invalid_queues for a queue outside the scope.
   */
  async claimScope(
    username: string | undefined,
    narrow: string[] | undefined,
    now = this.deps.now(),
  ): Promise<QueueScope> {
    const b = username ? (await this.bindings(now)).get(username) : undefined;
    if (b && b.active.length === 0 && b.revoked)
      throw new HttpError(403, 'fleet_revoked', 'the fleet this user claims for has been revoked');
    let allowed: Set<string> | null = null;
    if (b && b.active.length > 0 && b.active.every((f) => f.queues.length > 0)) {
      allowed = new Set(b.active.flatMap((f) => f.queues));
    }
    if (!narrow) return allowed;
    if (allowed) {
      const outside = narrow.filter((q) => !allowed.has(q));
      if (outside.length > 0)
        throw new HttpError(
          400,
          'invalid_queues',
          `queue ${JSON.stringify(outside[0]!.slice(0, 200))} is outside this fleet's queues`,
        );
    }
    return new Set(narrow);
  }

  /** Results: the user of a revoked fleet reports nothing (403 fleet_revoked). */
  async checkReporter(username: string | undefined, now = this.deps.now()): Promise<void> {
    await this.claimScope(username, undefined, now);
  }
}
