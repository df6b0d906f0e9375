// The node's shared-memory structures, laid over process-wide buffers: the ready set, the keeper
// signal, the state document and the lease table. Sizes come from config at first allocation and are
// fixed for the life of the process (`restart` keys); a later different size keeps the original buffer.
import { KeeperSignal } from '../../util/handoff/keeperSignal.js';
import { LeaseTable } from '../../util/leases/table.js';
import { MIN_KEY_BYTES_PER_SLOT, ReadySet } from '../../util/handoff/readySet.js';
import { StateDoc } from '../../util/handoff/stateDoc.js';
import { config } from './config.js';
import { log } from './harper.js';
import { sharedBuffer } from './sharedBuffers.js';

// Room for ~100-byte URLs at full capacity, with headroom; a generation ends where keys stop fitting.
const KEY_BYTES_PER_ENTRY = 192;
// The state document is bounded by its 200-entry lists; 1 MiB leaves ample room.
export const STATE_DOC_BYTES = 1 << 20;

let ready: ReadySet | undefined;
let signal: KeeperSignal | undefined;
let state: StateDoc | undefined;
let leases: LeaseTable | undefined;
let pokeHandler: (() => void) | undefined;

/** Worker 0 sets this: it runs when a claim finds the ready set used up (buf.notify on any thread). */
export function onReadySetPoke(fn: () => void): void {
  pokeHandler = fn;
}

export function readySet(): ReadySet {
  if (ready) return ready;
  const capacity = config().queue.ready.capacity;
  const keyBytes = Math.max(MIN_KEY_BYTES_PER_SLOT, capacity * KEY_BYTES_PER_ENTRY);
  const sb = sharedBuffer('ready-set', ReadySet.byteLength(capacity, keyBytes), () => pokeHandler?.());
  const stored = ReadySet.storedLayout(sb.buffer);
  if (stored && (stored.capacity !== capacity || stored.keyBytesPerSlot !== keyBytes)) {
    log.error(
      `queue.ready.capacity ${capacity} differs from the ready set already allocated in this process ` +
        `(${stored.capacity}); keeping the original until Harper restarts`,
    );
    ready = new ReadySet(sb.buffer, stored.capacity, stored.keyBytesPerSlot);
  } else {
    ready = new ReadySet(sb.buffer, capacity, keyBytes);
  }
  return ready;
}

/** Asks worker 0 to publish now because the set ran dry (rate-limited through the signal). */
export function pokeKeeper(now: number): void {
  if (keeperSignal().requestPublish(now)) sharedBuffer('ready-set', 0).notify();
}

export function keeperSignal(): KeeperSignal {
  signal ??= new KeeperSignal(sharedBuffer('keeper-signal', KeeperSignal.byteLength()).buffer);
  return signal;
}

export function stateDoc<T>(): StateDoc<T> {
  state ??= new StateDoc(
    sharedBuffer('state-doc', StateDoc.byteLength(STATE_DOC_BYTES)).buffer,
    STATE_DOC_BYTES,
  );
  return state as StateDoc<T>;
}

export function leaseTable(): LeaseTable {
  if (leases) return leases;
  const maxLeases = config().queue.maxLeases;
  leases = new LeaseTable(sharedBuffer('lease-table', LeaseTable.byteLength(maxLeases)).buffer, maxLeases);
  if (leases.sizeMismatch)
    log.error(
      `queue.maxLeases ${maxLeases} differs from the lease table already allocated in this process ` +
        `(${leases.maxLeases}); keeping the original until Harper restarts`,
    );
  return leases;
}
