// The node's shared-memory structures, laid over process-wide buffers: the ready set, the keeper
// signal, the state document and the lease table. Sizes come from config at first allocation and are
// fixed for the life of the process (`restart` keys); a later different size keeps the original buffer.
// The poke (a claim found the set used up) travels as a notify on the keeper signal's buffer: the claim
// path calls pokeKeeper, the keeper on worker 0 listens through onKeeperPoke. resources.ts builds the
// one SharedStructures of its thread and wires both.
import type { QueueKeeperConfig } from '../../util/config/schema.js';
import { KeeperSignal } from '../../util/sharedMemory/keeperSignal.js';
import { LeaseTable } from '../../util/leases/table.js';
import { RELEASE_ROOM_SLOTS } from '../../util/leases/slots.js';
import { MIN_KEY_BYTES_PER_SLOT, ReadySet } from '../../util/sharedMemory/readySet.js';
import { StateDoc } from '../../util/sharedMemory/stateDoc.js';
import { log } from './harper.js';
import type { SharedBuffers } from './sharedBuffers.js';

// Room for ~100-byte URLs (keys add their device, `|desktop`) at full capacity, with headroom; a generation ends where keys stop fitting.
const KEY_BYTES_PER_ENTRY = 192;
// The state document is bounded by its 200-entry lists; 1 MiB leaves ample room.
export const STATE_DOC_BYTES = 1 << 20;

/** This thread's view of each process-wide buffer, made on first use and sized from `queue` then. */
export class SharedStructures {
  private ready?: ReadySet;
  private signal?: KeeperSignal;
  private state?: StateDoc<unknown>;
  private leases?: LeaseTable;

  /**
   * `queue` reads the effective config's `queue` section (capacity and maxLeases at first use); `buffers`
   * hands out the process-wide memory every structure is laid over.
   */
  constructor(
    private readonly queue: () => QueueKeeperConfig['queue'],
    private readonly buffers: Pick<SharedBuffers, 'get'>,
  ) {}

  readySet(): ReadySet {
    if (this.ready) return this.ready;
    const capacity = this.queue().ready.capacity;
    const keyBytes = Math.max(MIN_KEY_BYTES_PER_SLOT, capacity * KEY_BYTES_PER_ENTRY);
    const sb = this.buffers.get('ready-set', ReadySet.byteLength(capacity, keyBytes));
    const stored = ReadySet.storedLayout(sb.buffer);
    if (stored && (stored.capacity !== capacity || stored.keyBytesPerSlot !== keyBytes)) {
      log.error(
        `queue.ready.capacity ${capacity} differs from the ready set already allocated in this process ` +
          `(${stored.capacity}); keeping the original until Harper restarts`,
      );
      this.ready = new ReadySet(sb.buffer, stored.capacity, stored.keyBytesPerSlot);
    } else {
      this.ready = new ReadySet(sb.buffer, capacity, keyBytes);
    }
    return this.ready;
  }

  /** The claim side: asks worker 0 to publish now because the set ran dry (rate-limited through the signal). */
  pokeKeeper(now: number): void {
    if (this.keeperSignal().requestPublish(now)) this.keeperSignalBuffer().notify();
  }

  /** The keeper side: runs `fn` on this thread whenever a claim on any worker pokes; answers the undo. */
  onKeeperPoke(fn: () => void): () => void {
    return this.keeperSignalBuffer().listen(fn);
  }

  keeperSignal(): KeeperSignal {
    this.signal ??= new KeeperSignal(this.keeperSignalBuffer().buffer);
    return this.signal;
  }

  stateDoc<T>(): StateDoc<T> {
    this.state ??= new StateDoc(
      this.buffers.get('state-doc', StateDoc.byteLength(STATE_DOC_BYTES)).buffer,
      STATE_DOC_BYTES,
    );
    return this.state as StateDoc<T>;
  }

  leaseTable(): LeaseTable {
    if (this.leases) return this.leases;
    const maxLeases = this.queue().maxLeases;
    // Room for the release graces of a fast drain besides the live leases (RELEASE_ROOM_SLOTS).
    const leases = new LeaseTable(
      this.buffers.get('lease-table', LeaseTable.byteLength(maxLeases, RELEASE_ROOM_SLOTS)).buffer,
      maxLeases,
      { minSlots: RELEASE_ROOM_SLOTS },
    );
    this.leases = leases;
    if (leases.sizeMismatch)
      log.error(
        `queue.maxLeases ${maxLeases} differs from the lease table already allocated in this process ` +
          `(${leases.maxLeases}); keeping the original until Harper restarts`,
      );
    return leases;
  }

  private keeperSignalBuffer() {
    return this.buffers.get('keeper-signal', KeeperSignal.byteLength());
  }
}
