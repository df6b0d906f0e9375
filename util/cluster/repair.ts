// Replica repair between the nodes of a cluster (docs/clusters.md, "Replica repair"): the pure
// part. Harper 4.7.29 can skip, on a node that joins, a write committed while the joining copy ran, and
// the skipped row never arrives. So each node's keeper digests its RenderSchedule table by the Harper
// record version of every key (the origin transaction's time, the same on every node once replicated),
// the nodes compare digests through a replicated table, look at the keys of the buckets that differ, and
// the node holding the newest version of a key another node lacks sends it again
// (services/cluster/repair.ts does the reading and writing).
//
// A round has a cutoff on a grid every node computes alike. The digest covers live rows whose version is at
// or before the cutoff, walked well after it, so rows written since do not count and two nodes in step give
// equal digests. Buckets whose digests differ are listed in detail: every version of every key in them,
// deleted-row markers included. If nodes P and Q differ in a bucket, every node differs from P or from Q
// there, so every node lists the same buckets from the same digests.
import { keyHash, mix32 } from '../keyHash.js';

/** Digest buckets (by the key's hash); at a million rows about a thousand keys each. */
export const REPAIR_BUCKETS = 1024;
/**
 * Differing buckets are listed in detail, lowest first, until they hold about this many keys (by the
 * largest count any node's digest gives the bucket; ~1 MB of list); the rest wait for the next round.
 * At 20,000 rows that is every bucket, at a million about fifty.
 */
export const MAX_DETAIL_KEYS = 50_000;
/**
 * A difference whose newest version is older than this is left alone and counted as `tooOld`: a
 * deleted row's marker lasts only as long as Harper's audit retention (3 days by default; docs/operating.md
 * on choosing it), after which "never had it" and "deleted long ago" look the
 * same, and carrying the row could bring back one deleted long ago. A join's skipped writes are minutes
 * old when the next rounds (at most an hour apart) find them.
 */
export const REPAIR_WINDOW_MS = 3 * 3_600_000;
const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};
/** Harper's default `logging.auditRetention` (3 days). */
const DEFAULT_AUDIT_RETENTION_MS = 3 * 86_400_000;

/**
 * The repair window for Harper's `logging.auditRetention` (a number of ms, or e.g. "6h", "3d"): half the
 * retention, at most REPAIR_WINDOW_MS, so a deletion's marker always outlives the window. Anything
 * unreadable counts as Harper's default.
 */
export function repairWindowMs(auditRetention: unknown): number {
  let ms = DEFAULT_AUDIT_RETENTION_MS;
  if (typeof auditRetention === 'number' && Number.isFinite(auditRetention) && auditRetention > 0)
    ms = auditRetention;
  else if (typeof auditRetention === 'string') {
    const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$/i.exec(auditRetention);
    if (m) ms = Number(m[1]) * UNIT_MS[(m[2] ?? 'ms').toLowerCase()]!;
  }
  return Math.min(REPAIR_WINDOW_MS, ms / 2);
}

/**
 * At most this many rows are sent again or deleted by one node in one round; the rest wait for the next.
 * A join skips tens of rows; a node still catching up on its replication backlog can differ by many more,
 * and its stream delivers those anyway.
 */
export const MAX_REPAIR_ROWS = 2000;

const WORDS = 3;

/** The bucket of a key. */
export function bucketOf(key: string): number {
  return keyHash(key).lo & (REPAIR_BUCKETS - 1);
}

/**
 * A digest of (key, version) pairs: per bucket a count and the XOR of a 64-bit hash of each pair, so two
 * nodes holding the same versions of the same keys hold equal digests, whatever order they were added in.
 */
export class RepairDigest {
  readonly words = new Uint32Array(REPAIR_BUCKETS * WORDS);
  private readonly version = new Float64Array(1);
  private readonly versionWords = new Uint32Array(this.version.buffer);

  add(key: string, version: number): void {
    const h = keyHash(key);
    this.version[0] = version;
    const a = mix32(h.hi ^ this.versionWords[0]! ^ 0x9e3779b9);
    const b = mix32(h.lo ^ this.versionWords[1]! ^ a);
    const at = (h.lo & (REPAIR_BUCKETS - 1)) * WORDS;
    this.words[at] = (this.words[at]! + 1) >>> 0;
    this.words[at + 1] = (this.words[at + 1]! ^ a) >>> 0;
    this.words[at + 2] = (this.words[at + 2]! ^ b) >>> 0;
  }

  /** Rows counted. */
  rows(): number {
    let n = 0;
    for (let i = 0; i < REPAIR_BUCKETS; i++) n += this.words[i * WORDS]!;
    return n;
  }

  encode(): string {
    return Buffer.from(this.words.buffer, this.words.byteOffset, this.words.byteLength).toString('base64');
  }

  /** A digest as another node wrote it, or null when it is not one (wrong type or size). */
  static decode(text: unknown): Uint32Array | null {
    if (typeof text !== 'string') return null;
    const bytes = Buffer.from(text, 'base64');
    if (bytes.length !== REPAIR_BUCKETS * WORDS * 4) return null;
    const words = new Uint32Array(REPAIR_BUCKETS * WORDS);
    new Uint8Array(words.buffer).set(bytes);
    return words;
  }
}

/**
 * The buckets where `mine` differs from any of `peers`, from a start that turns with the round, as many
 * as hold at most `maxKeys` keys by the largest count any of the digests gives each (at least one), and
 * how many differ in all. Every node computes the same list from the same digests and round.
 */
export function differingBuckets(
  mine: Uint32Array,
  peers: readonly Uint32Array[],
  round = 0,
  maxKeys = MAX_DETAIL_KEYS,
): { buckets: number[]; total: number } {
  const buckets: number[] = [];
  let total = 0;
  let keys = 0;
  let full = false;
  // Each round starts at another bucket (the same on every node), so differences that never resolve
  // (too old, in conflict) in low buckets cannot keep the budget from the others.
  const start = mix32(Math.floor(round / 1000)) % REPAIR_BUCKETS;
  for (let i = 0; i < REPAIR_BUCKETS; i++) {
    const b = (start + i) % REPAIR_BUCKETS;
    const at = b * WORDS;
    const differs = peers.some(
      (p) => p[at] !== mine[at] || p[at + 1] !== mine[at + 1] || p[at + 2] !== mine[at + 2],
    );
    if (!differs) continue;
    total++;
    if (full) continue;
    const weight = Math.max(mine[at]!, ...peers.map((p) => p[at]!));
    if (buckets.length > 0 && keys + weight > maxKeys) {
      full = true;
      continue;
    }
    buckets.push(b);
    keys += weight;
  }
  return { buckets, total };
}

/** One key of a listed bucket on one node: its latest version, and whether that is a deletion. */
export interface VersionedKey {
  key: string;
  version: number;
  deleted: boolean;
}

/** A peer's listed key: the key's hash stands for the key (details carry no keys, only hashes). */
export interface DetailEntry {
  hash: string;
  version: number;
  deleted: boolean;
}

const DETAIL_BYTES = 20;

const hashText = (hi: number, lo: number): string => `${hi >>> 0}:${lo >>> 0}`;

export function encodeDetails(entries: readonly VersionedKey[]): string {
  const buf = Buffer.alloc(entries.length * DETAIL_BYTES);
  entries.forEach((e, i) => {
    const h = keyHash(e.key);
    const at = i * DETAIL_BYTES;
    buf.writeUInt32LE(h.hi >>> 0, at);
    buf.writeUInt32LE(h.lo >>> 0, at + 4);
    buf.writeDoubleLE(e.version, at + 8);
    buf.writeUInt32LE(e.deleted ? 1 : 0, at + 16);
  });
  return buf.toString('base64');
}

/** A peer's details, keyed by hash; null when the text is not details. */
export function decodeDetails(text: unknown): Map<string, DetailEntry> | null {
  if (typeof text !== 'string') return null;
  const buf = Buffer.from(text, 'base64');
  if (buf.length % DETAIL_BYTES !== 0) return null;
  const out = new Map<string, DetailEntry>();
  for (let at = 0; at < buf.length; at += DETAIL_BYTES) {
    const hash = hashText(buf.readUInt32LE(at), buf.readUInt32LE(at + 4));
    const version = buf.readDoubleLE(at + 8);
    if (!Number.isFinite(version)) return null;
    out.set(hash, { hash, version, deleted: buf.readUInt32LE(at + 16) === 1 });
  }
  return out;
}

export interface RepairPlan {
  /** Live rows this node holds at the newest version while another node lacks it or holds an older one. */
  send: VersionedKey[];
  /** Rows this node holds live that another node deleted later: delete them at that deletion's version. */
  deleteAt: VersionedKey[];
  /** Differences left alone because their newest version is older than the repair window. */
  tooOld: number;
  /** Differences newer than the round's cutoff (in flight): the next round looks again. */
  recent: number;
  /** Keys whose newest version is held live on one node and deleted on another: left alone. */
  conflicting: number;
  /** Repairs beyond MAX_REPAIR_ROWS this round: the next round looks again. */
  deferred: number;
}

/**
 * What this node does about the listed buckets, from its own keys and every peer's details. A key is
 * repaired only toward its newest version anywhere, so no node is ever handed an older one; the newest
 * must be at or before `cutoff` (older ones are in flight) and within `windowMs` of `now`.
 */
export function planRepair(
  mine: readonly VersionedKey[],
  peers: ReadonlyArray<ReadonlyMap<string, DetailEntry>>,
  opts: { cutoff: number; now: number; windowMs?: number; maxRows?: number },
): RepairPlan {
  const windowMs = opts.windowMs ?? REPAIR_WINDOW_MS;
  const plan: RepairPlan = { send: [], deleteAt: [], tooOld: 0, recent: 0, conflicting: 0, deferred: 0 };
  const maxRows = opts.maxRows ?? MAX_REPAIR_ROWS;
  const own = new Map<string, VersionedKey>();
  for (const e of mine) {
    const h = keyHash(e.key);
    own.set(hashText(h.hi, h.lo), e);
  }
  const hashes = new Set<string>(own.keys());
  for (const p of peers) for (const h of p.keys()) hashes.add(h);
  for (const hash of hashes) {
    const m = own.get(hash);
    const theirs = peers.map((p) => p.get(hash));
    const all = [m, ...theirs];
    let newest = -Infinity;
    for (const e of all) if (e && e.version > newest) newest = e.version;
    const atNewest = all.filter((e) => e !== undefined && e.version === newest);
    if (atNewest.some((e) => e!.deleted) && atNewest.some((e) => !e!.deleted)) {
      plan.conflicting++;
      continue;
    }
    // Everyone has the newest version already (deleted-row markers may be gone on some: no difference).
    if (atNewest.length === all.length) continue;
    if (all.every((e) => e === undefined || e.deleted)) continue;
    if (newest > opts.cutoff) {
      plan.recent++;
      continue;
    }
    if (opts.now - newest > windowMs) {
      plan.tooOld++;
      continue;
    }
    if (m === undefined || m.deleted) continue;
    if (m.version !== newest && !atNewest[0]!.deleted) continue;
    if (plan.send.length + plan.deleteAt.length >= maxRows) {
      plan.deferred++;
      continue;
    }
    if (m.version === newest) plan.send.push(m);
    else if (atNewest[0]!.deleted) plan.deleteAt.push({ key: m.key, version: newest, deleted: true });
  }
  return plan;
}

/** What the last round found and did (queue-state `trust.keeper.lastRepair`). */
export interface RepairRound {
  /** The round's cutoff: live rows written at or before it were compared. */
  round: number;
  /** When this node finished the round. */
  at: number;
  /** Live rows at or before the cutoff in this node's digest. */
  rows: number;
  /** Digest buckets that differed from some peer (0: every node holds the same rows). */
  buckets: number;
  /** Of those, the buckets looked at key by key this round (up to ~50,000 keys: MAX_DETAIL_KEYS). */
  listed: number;
  /** Rows this node carried to its peers because another node lacked them or held an older version. */
  sent: number;
  /** Rows this node took from a peer (it lacked them or held an older version), under their versions. */
  received: number;
  /** Rows deleted here because another node deleted them later. */
  deleted: number;
  /** Differences left alone because they are older than the window (repairWindowMs, at most 3 hours). */
  tooOld: number;
  /** Differences written after the cutoff, still replicating: the next round looks again. */
  recent: number;
  /** Keys held live at the newest version on one node and deleted at it on another: left alone. */
  conflicting: number;
  /** Rows beyond this round's 2,000 to send or delete: the next round looks again. */
  deferred: number;
  /** Time the round's walks and writes took on this node (ms). */
  ms: number;
  /** The next cutoff came before every peer had answered: the round was left (`waitingOn` names them). */
  unfinished: boolean;
  waitingOn: string[];
}

/** A row one node carries to the others in its QueueRepair row. */
export interface CarriedRow {
  key: string;
  version: number;
  record: Record<string, unknown>;
}

/** The rows a peer carries in its QueueRepair row; anything malformed is skipped. */
export function carriedRows(text: unknown): CarriedRow[] {
  if (typeof text !== 'string') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return [];
  }
  if (!Array.isArray(parsed)) return [];
  return parsed.filter(
    (r): r is CarriedRow =>
      typeof r === 'object' &&
      r !== null &&
      typeof (r as CarriedRow).key === 'string' &&
      typeof (r as CarriedRow).version === 'number' &&
      Number.isFinite((r as CarriedRow).version) &&
      typeof (r as CarriedRow).record === 'object' &&
      (r as CarriedRow).record !== null,
  );
}

/** A listing peer's bucket list for the round, or null when it is not one. */
export function listedBuckets(text: unknown): { buckets: number[]; total: number } | null {
  if (typeof text !== 'string') return null;
  try {
    const v = JSON.parse(text) as { buckets?: unknown; total?: unknown };
    if (!Array.isArray(v.buckets) || typeof v.total !== 'number') return null;
    const buckets = v.buckets.filter((b): b is number => Number.isInteger(b) && b >= 0 && b < REPAIR_BUCKETS);
    return { buckets, total: v.total };
  } catch {
    return null;
  }
}

/** A round's outcome before anything happened in it. */
export function emptyRound(round: number): RepairRound {
  return {
    round,
    at: 0,
    rows: 0,
    buckets: 0,
    listed: 0,
    sent: 0,
    received: 0,
    deleted: 0,
    tooOld: 0,
    recent: 0,
    conflicting: 0,
    deferred: 0,
    ms: 0,
    unfinished: false,
    waitingOn: [],
  };
}
