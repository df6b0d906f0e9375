// Which node owns a row (docs/clusters.md): rendezvous (highest-random-weight) hashing of the row's URL over
// the node names, so every device's row of a URL has the same owner (util/schedule/rowKey.ts rowHash). Every node computes the same answer from the same membership with no coordination, and a
// membership change moves only the rows of the node that left (or the share the newcomer takes).
import { keyHash, mix32 } from '../keyHash.js';
import { rowHash } from '../schedule/rowKey.js';

/**
 * Who holds which row, as the keeper, the lease table and the stall sweep ask it. Ownership is plain
 * rendezvous over the nodes; util/cluster/holding.ts HoldingView wraps one with the peers' published views.
 */
export interface OwnershipView {
  /** Sorted, distinct node names. */
  readonly nodes: readonly string[];
  readonly self: string;
  ownerOf(key: string): string;
  ownerOfHash(hi: number, lo: number): string;
  owns(key: string): boolean;
  ownsHash(hi: number, lo: number): boolean;
  /** The same holding decision for every key as `other`. */
  sameMembership(other: OwnershipView): boolean;
}

export class Ownership implements OwnershipView {
  /** Sorted, distinct node names. */
  readonly nodes: readonly string[];
  private readonly nodeHashes: ReadonlyArray<{ hi: number; lo: number }>;

  constructor(
    nodes: readonly string[],
    readonly self: string,
  ) {
    this.nodes = [...new Set([...nodes, self])].sort();
    this.nodeHashes = this.nodes.map((n) => keyHash(n));
  }

  /** The owner of `key` among the nodes. */
  ownerOf(key: string): string {
    if (this.nodes.length === 1) return this.nodes[0]!;
    const h = rowHash(key);
    return this.ownerOfHash(h.hi, h.lo);
  }

  /**
   * The owner of the key whose rowHash is (hi, lo): what the lease table stores of a key. Only the high
   * half decides, the URL's own, so a URL's devices never split across nodes.
   */
  ownerOfHash(hi: number, lo: number): string {
    void lo;
    if (this.nodes.length === 1) return this.nodes[0]!;
    let best = -1;
    let bestIndex = 0;
    for (let i = 0; i < this.nodes.length; i++) {
      const n = this.nodeHashes[i]!;
      const weight = mix32(mix32(hi ^ n.hi) + n.lo);
      // Ties (1 in 2^32) go to the earlier name, so every node still agrees.
      if (weight > best) {
        best = weight;
        bestIndex = i;
      }
    }
    return this.nodes[bestIndex]!;
  }

  owns(key: string): boolean {
    return this.nodes.length === 1 || this.ownerOf(key) === this.self;
  }

  /** owns() for the key whose rowHash is (hi, lo). */
  ownsHash(hi: number, lo: number): boolean {
    return this.nodes.length === 1 || this.ownerOfHash(hi, lo) === this.self;
  }

  sameMembership(other: OwnershipView): boolean {
    return this.self === other.self && this.nodes.join('\n') === other.nodes.join('\n');
  }
}
