// Replica repair over Harper (docs/clusters.md, "Replica repair"), and the only module that names
// QueueRepair. Worker 0's keeper runs one round every `queue.keeper.repairInterval` while the node has
// peers; the decisions are util/cluster/repair.ts's. A round, in steps a beat apart:
//  1. the cutoff (a grid point at least min(60 s, interval) back, the same on every node) changes: walk the
//     table and write this node's digest of the live rows at or before it;
//  2. every peer's digest for the cutoff has arrived: if they all equal ours the round is clean; otherwise
//     walk again for the keys of the differing buckets and write their versions;
//  3. every peer's list has arrived: delete here the rows another node deleted later (under the deletion's
//     version), and write into this node's QueueRepair row the rows it holds at the newest version where
//     another node lacks them or holds an older one, each with its version;
//  4. every peer's rows have arrived: take the ones this node lacks or holds older, each written under its
//     own version (not the clock's), so all nodes end with the same versions and nothing newer is touched.
// Why carry the rows instead of writing them again under their version on the holder: Harper streams the
// change log to a peer in time order from where the connection stands, so a write stamped with an old
// version can land behind that point and never be sent; in the join test
// (test/integration/joinRepair.test.ts) such writes did not reach the peer. Carrying the row in this
// node's QueueRepair row, which replicates like any new write, does not depend on the log's order.
// A peer that never answers leaves the round unfinished (logged, `unfinished` in lastRepair); the next
// cutoff starts a new one.
import {
  bucketOf,
  MAX_REPAIR_ROWS,
  REPAIR_WINDOW_MS,
  decodeDetails,
  differingBuckets,
  encodeDetails,
  planRepair,
  RepairDigest,
  carriedRows,
  emptyRound,
  listedBuckets,
  type CarriedRow,
  type RepairRound,
  type VersionedKey,
} from '../../util/cluster/repair.js';
import { log as harperLog, table } from '../runtime/harper.js';
import { walkScheduleVersions } from '../schedule/rawRecords.js';
import { deleteScheduleRowAt, scheduleEntry, takeScheduleRow } from '../schedule/store.js';
import { nodeName } from './nodeName.js';

const repairTable = () => table('render_queue', 'QueueRepair');

/** The longest key a row can have: a URL of at most 1,900 bytes (docs/feeding.md). */
const MAX_KEY_BYTES = 1900;

/** Keys per walk chunk: the walk yields the event loop between chunks (worker 0 also publishes). */
const CHUNK = 5000;
/** The cutoff trails now by min(this, interval): rows older than it have had time to replicate. */
const SETTLE_MS = 60_000;

export interface ReplicaRepairDeps {
  /** `queue.keeper.repairInterval` (0 = off). */
  intervalMs: () => number;
  /** How old a difference may be and still be repaired (repairWindowMs of Harper's audit retention). */
  windowMs?: () => number;
  yieldLoop: () => Promise<void>;
  log?: Pick<typeof harperLog, 'info' | 'warn' | 'error'>;
  /** Counts the rows taken from peers and deleted (Prometheus). */
  count?: (name: 'replica_repair_rows', n: number) => void;
  onRound?: (r: RepairRound) => void;
}

type Phase = 'digested' | 'listed' | 'sent' | 'done';

export class ReplicaRepair {
  private round = 0;
  private phase: Phase = 'done';
  private digest: Uint32Array | null = null;
  private digestText = '';
  private details: string | null = null;
  private sent: string | null = null;
  /** What step 3 did, finished in step 4 (finish sets the round's own fields). */
  private outcome: RepairRound = emptyRound(0);
  private rows = 0;
  private buckets = { buckets: [] as number[], total: 0 };
  private mine: VersionedKey[] = [];
  private ms = 0;
  private running = false;
  /** This round's digests were all equal here (a peer may still list until watchUntil: step). */
  private listedClean = false;
  private watchUntil = 0;
  last: RepairRound | null = null;

  constructor(private readonly deps: ReplicaRepairDeps) {}

  /** One step of the round (a duty every beat); `nodes` is the membership the keeper holds rows by. */
  async step(now: number, nodes: readonly string[]): Promise<void> {
    const interval = this.deps.intervalMs();
    const self = nodeName();
    const peers = nodes.filter((n) => n !== self);
    if (interval <= 0 || peers.length === 0 || this.running) return;
    this.running = true;
    try {
      const cutoff = Math.floor((now - Math.min(SETTLE_MS, interval)) / interval) * interval;
      if (cutoff > this.round) {
        if (this.phase !== 'done' && this.round > 0) await this.unfinished(now, peers);
        return await this.digestStep(cutoff);
      }
      if (cutoff !== this.round) return;
      // A finished round reads nothing more, except that a node that found every digest equal to its own
      // still lists when a peer does (their views of the cluster differ: a peer compared with a node this
      // one does not hold by yet), so it watches the peers' rows for a while after its clean finish.
      if (this.phase === 'done' && (!this.listedClean || now > this.watchUntil)) return;
      const theirs = await this.peerRows(peers);
      if (this.phase === 'done') {
        if (theirs.some((r) => r?.round === this.round && r.listedRound === this.round))
          return await this.listStep(theirs, true);
        return;
      }
      if (this.phase === 'digested') return await this.listStep(theirs, false);
      if (this.phase === 'listed') return await this.sendStep(theirs, now);
      return await this.takeStep(theirs, now);
    } catch (e) {
      // A walk or write that throws ends the round here; the next cutoff starts a new one.
      this.phase = 'done';
      this.listedClean = false;
      this.mine = [];
      this.deps.log?.error(
        `replica repair: round ${new Date(this.round).toISOString()} failed: ${(e as Error)?.message ?? e}`,
      );
    } finally {
      this.running = false;
    }
  }

  private windowMs(): number {
    return this.deps.windowMs?.() ?? REPAIR_WINDOW_MS;
  }

  /** The round was still open when the next cutoff came: say which peers it waited for. */
  private async unfinished(now: number, peers: readonly string[]): Promise<void> {
    const theirs = await this.peerRows(peers).catch(() => peers.map(() => undefined));
    const need = this.phase === 'digested' ? 'round' : this.phase === 'listed' ? 'listedRound' : 'sentRound';
    const waitingOn = peers.filter((_, i) => theirs[i]?.[need] !== this.round);
    this.last = {
      ...(this.last ?? emptyRound(this.round)),
      round: this.round,
      at: now,
      unfinished: true,
      waitingOn,
    };
    this.deps.onRound?.(this.last);
    this.deps.log?.warn(
      `replica repair: round ${new Date(this.round).toISOString()} did not finish: waited for ` +
        `${waitingOn.join(', ') || 'nobody'} (a peer with repair off, another repairInterval, an older build, or ` +
        'a different view of the cluster)',
    );
  }

  private async digestStep(cutoff: number): Promise<void> {
    const t0 = performance.now();
    this.round = cutoff;
    this.phase = 'done';
    this.listedClean = false;
    this.mine = [];
    this.digest = null;
    this.digestText = '';
    this.details = null;
    this.sent = null;
    this.buckets = { buckets: [], total: 0 };
    const digest = new RepairDigest();
    await this.walk((key, version, deleted) => {
      if (!deleted && version <= cutoff) digest.add(key, version);
    });
    this.digest = digest.words;
    this.digestText = digest.encode();
    this.rows = digest.rows();
    await this.writeRow();
    this.phase = 'digested';
    this.ms = performance.now() - t0;
  }

  private async listStep(theirs: Array<Record<string, unknown> | undefined>, anyway: boolean): Promise<void> {
    if (!theirs.every((r) => r?.round === this.round)) return;
    const digests = theirs.map((r) => RepairDigest.decode(r?.digest));
    if (digests.some((d) => d === null) || this.digest === null) {
      this.deps.log?.warn(
        `replica repair: a peer's digest for round ${this.round} is unreadable; skipping it`,
      );
      this.phase = 'done';
      return;
    }
    this.buckets = differingBuckets(this.digest, digests as Uint32Array[], this.round);
    if (anyway) {
      // The listing peers compared against every digest; take their bucket list.
      const theirsListed = theirs.find((r) => r?.listedRound === this.round);
      this.buckets = listedBuckets(theirsListed?.buckets) ?? this.buckets;
    }
    if (this.buckets.total === 0 && !anyway) {
      this.listedClean = true;
      this.watchUntil = Date.now() + SETTLE_MS;
      return this.finish(Date.now(), null);
    }
    this.listedClean = false;
    const t0 = performance.now();
    const wanted = new Set(this.buckets.buckets);
    const mine: VersionedKey[] = [];
    await this.walk((key, version, deleted) => {
      if (wanted.has(bucketOf(key))) mine.push({ key, version, deleted });
    });
    this.mine = mine;
    this.details = encodeDetails(mine);
    await this.writeRow();
    this.phase = 'listed';
    this.ms += performance.now() - t0;
  }

  private async sendStep(theirs: Array<Record<string, unknown> | undefined>, now: number): Promise<void> {
    if (!theirs.every((r) => r?.listedRound === this.round)) return;
    const details = theirs.map((r) => decodeDetails(r?.details));
    if (details.some((d) => d === null)) {
      this.deps.log?.warn(
        `replica repair: a peer's key list for round ${this.round} is unreadable; skipping it`,
      );
      this.phase = 'done';
      return;
    }
    const t0 = performance.now();
    const plan = planRepair(this.mine, details as Array<NonNullable<(typeof details)[number]>>, {
      cutoff: this.round,
      now,
      windowMs: this.windowMs(),
    });
    const carried: CarriedRow[] = [];
    for (const e of plan.send) {
      const record = scheduleEntry(e.key, e.version);
      if (record) carried.push({ key: e.key, version: e.version, record });
    }
    let deleted = 0;
    for (const e of plan.deleteAt) if (await deleteScheduleRowAt(e.key, e.version)) deleted++;
    this.sent = JSON.stringify(carried);
    await this.writeRow();
    this.phase = 'sent';
    this.outcome = {
      ...emptyRound(this.round),
      sent: carried.length,
      received: 0,
      deleted,
      tooOld: plan.tooOld,
      recent: plan.recent,
      conflicting: plan.conflicting,
      deferred: plan.deferred,
    };
    this.ms += performance.now() - t0;
  }

  private async takeStep(theirs: Array<Record<string, unknown> | undefined>, now: number): Promise<void> {
    if (!theirs.every((r) => r?.sentRound === this.round)) return;
    const t0 = performance.now();
    const listed = new Set(this.buckets.buckets);
    let received = 0;
    let refused = 0;
    for (const r of theirs) {
      // A peer's rows are taken only where this round could have asked for them: a listed bucket, a
      // version at or before the cutoff and inside the window (on this node's clock), a URL-sized key.
      const rows = carriedRows(r?.sent).slice(0, MAX_REPAIR_ROWS);
      for (const row of rows) {
        if (
          !listed.has(bucketOf(row.key)) ||
          row.version > this.round ||
          now - row.version > this.windowMs() ||
          Buffer.byteLength(row.key) > MAX_KEY_BYTES
        ) {
          refused++;
          continue;
        }
        try {
          if (await takeScheduleRow(row.key, row.version, row.record)) received++;
        } catch (e) {
          refused++;
          this.deps.log?.warn(
            `replica repair: taking a row from a peer failed: ${(e as Error)?.message ?? e}`,
          );
        }
      }
    }
    if (refused > 0) this.deps.log?.warn(`replica repair: refused ${refused} rows peers carried (see above)`);
    this.ms += performance.now() - t0;
    this.finish(now, { ...this.outcome, received });
  }

  /** This node's QueueRepair row as the round stands (a put replaces the row: every field, every time). */
  private async writeRow(): Promise<void> {
    await repairTable().put(nodeName(), {
      id: nodeName(),
      round: this.round,
      // The digest stays through the round: a peer still at step 2 reads it from this row.
      digest: this.digestText,
      listedRound: this.details === null ? null : this.round,
      details: this.details,
      buckets: this.details === null ? null : JSON.stringify(this.buckets),
      sentRound: this.sent === null ? null : this.round,
      sent: this.sent,
    });
  }

  /** Ends the round with what steps 3 and 4 did (`done`; null for a clean round). */
  private finish(now: number, done: RepairRound | null): void {
    this.phase = 'done';
    this.mine = [];
    const r: RepairRound = {
      ...(done ?? emptyRound(this.round)),
      round: this.round,
      at: now,
      rows: this.rows,
      buckets: this.buckets.total,
      listed: this.buckets.buckets.length,
      ms: Math.round(this.ms),
      unfinished: false,
      waitingOn: [],
    };
    this.last = r;
    this.deps.onRound?.(r);
    const fixed = r.received + r.deleted;
    if (fixed > 0) this.deps.count?.('replica_repair_rows', fixed);
    if (fixed > 0 || r.sent > 0 || r.tooOld > 0 || r.conflicting > 0)
      this.deps.log?.warn(
        `replica repair, round ${new Date(r.round).toISOString()}: ${r.buckets} of the digest's buckets ` +
          `differed from a peer; sent ${r.sent} rows to peers, took ${r.received}, deleted ${r.deleted}, left ${r.tooOld} ` +
          `older than the repair window and ${r.conflicting} in conflict (docs/clusters.md, "Replica repair")`,
      );
  }

  /** The peers' QueueRepair rows, in order (undefined where a peer has none yet). */
  private async peerRows(peers: readonly string[]): Promise<Array<Record<string, unknown> | undefined>> {
    return Promise.all(peers.map((p) => repairTable().get(p)));
  }

  private async walk(visit: (key: string, version: number, deleted: boolean) => void): Promise<void> {
    let last: string | undefined;
    for (;;) {
      let seen = 0;
      let lastKey: string | undefined;
      walkScheduleVersions(
        { start: last, exclusiveStart: last !== undefined, limit: CHUNK },
        (key, version, deleted) => {
          seen++;
          lastKey = key;
          visit(key, version, deleted);
        },
      );
      if (seen === 0 || lastKey === undefined) return;
      last = lastKey;
      await this.deps.yieldLoop();
    }
  }
}
