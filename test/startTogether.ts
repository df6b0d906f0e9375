// Starting several things side by side in a before() hook. With a bare Promise.all, one failed start
// rejects at once while the others are still booting; nobody holds their handles, so nobody stops them,
// and a Harper left running keeps the test process alive forever. This waits for every start to settle,
// stops each one that came up when any failed, and only then reports the first failure.

export interface Start<T> {
  start: Promise<T>;
  stop: (started: T) => Promise<unknown>;
}

export async function startTogether<T extends unknown[]>(
  ...starts: { [K in keyof T]: Start<T[K]> }
): Promise<T> {
  const list = starts as Array<Start<unknown>>;
  const settled = await Promise.allSettled(list.map((s) => s.start));
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (!failed) return settled.map((r) => (r as PromiseFulfilledResult<unknown>).value) as T;
  await Promise.allSettled(
    settled.map((r, i) => (r.status === 'fulfilled' ? list[i]!.stop(r.value) : undefined)),
  );
  throw failed.reason;
}
