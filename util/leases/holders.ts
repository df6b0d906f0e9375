// Who a lease went to, by name: the lease slot keeps only 32-bit hashes of the user and the
// `x-worker-id` (util/leases/slots.ts), so each grant also notes the names here, on the worker thread
// that granted it. Bounded: the oldest notes go first, and a note is shown only while its token is the
// key's latest grant, so one that outlived its lease is never mistaken for the holder of a newer one.

export interface Holder {
  token: string;
  user: string;
  workerId: string;
}

export class GrantHolders {
  private readonly byKey = new Map<string, Holder>();

  constructor(private readonly capacity: number) {}

  /** Notes a grant of `key`; the oldest note goes when the map is full. */
  note(key: string, holder: Holder): void {
    this.byKey.delete(key);
    this.byKey.set(key, holder);
    if (this.byKey.size > this.capacity) {
      const oldest = this.byKey.keys().next().value;
      if (oldest !== undefined) this.byKey.delete(oldest);
    }
  }

  /** The names of the grant `token` of `key`, when this thread granted it and still has the note. */
  of(key: string, token: string | null): Holder | null {
    const h = this.byKey.get(key);
    return h !== undefined && token !== null && h.token === token ? h : null;
  }

  /** Every note, oldest first: what this thread granted lately (the rows view's `leased` list). */
  *entries(): Generator<[string, Holder]> {
    yield* this.byKey;
  }

  get size(): number {
    return this.byKey.size;
  }
}
