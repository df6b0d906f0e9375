// The fake servers' common start and stop: listen on a free 127.0.0.1 port, and close with every
// connection (and any raw upgraded socket) dropped so a test's stop never waits on a keep-alive.
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';

/** Listens on a free loopback port; answers the server's base URL. */
export async function listenLoopback(server: http.Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** Closes `server`, dropping its connections and the upgraded sockets it no longer tracks. */
export async function closeLoopback(server: http.Server, upgraded: Iterable<Duplex> = []): Promise<void> {
  await new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
    for (const socket of upgraded) socket.destroy();
  });
}
