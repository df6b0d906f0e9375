// Shared wiring for the client's tests: a fake clock, a fake server and a client between them.
import { FleetClient } from '../src/fleetClient.js';
import type { FleetClientOptions } from '../src/fleetOptions.js';
import type { Logger, RenderFn } from '../src/types.js';
import { FakeClock } from './fakeClock.js';
import { FakeFleetServer } from './fakeServer.js';

export interface Rig {
  clock: FakeClock;
  server: FakeFleetServer;
  fleet: FleetClient;
  logs: string[];
  close: () => Promise<void>;
}

export async function rig(
  render: RenderFn,
  opts: Partial<FleetClientOptions> = {},
  setup?: (server: FakeFleetServer) => void,
): Promise<Rig> {
  const clock = new FakeClock();
  const server = new FakeFleetServer(clock);
  setup?.(server);
  const url = await server.start();
  const logs: string[] = [];
  const logger: Logger = {
    info: (m) => logs.push(`info ${m}`),
    warn: (m) => logs.push(`warn ${m}`),
    error: (m) => logs.push(`error ${m}`),
  };
  const fleet = new FleetClient({
    url,
    username: 'fleet',
    password: 'pw',
    render,
    clock,
    // The top of each jitter range, so waits are exact.
    random: () => 1,
    logger,
    ...opts,
  });
  return {
    clock,
    server,
    fleet,
    logs,
    close: async () => {
      let stopped = false;
      const done = fleet.stop({ drainTimeoutMs: 0 }).then(() => (stopped = true));
      // A stop waits on fake timers (flush, error backoff, lease ends): move time until it is through.
      for (let i = 0; i < 200 && !stopped; i++) {
        await Promise.race([done, new Promise((r) => setTimeout(r, 10))]);
        if (!stopped) clock.advance(60_000);
      }
      await server.stop();
      if (!stopped) throw new Error('the fleet did not stop');
    },
  };
}

/** A renderer that never finishes on its own. */
export const never: RenderFn = () => new Promise(() => {});
