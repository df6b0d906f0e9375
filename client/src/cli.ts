// The fleet as a command: `queue-keeper-fleet --url … --username … --password … --concurrency 4`.
// The repo's `npm run fleet` calls main() with the local `npm start` credentials as defaults.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { deviceProfiles, type DeviceProfileOverride } from './deviceProfiles.js';
import { FleetClient } from './fleetClient.js';
import { FleetRefusedError, type FleetClientOptions } from './fleetOptions.js';
import { fetchRenderer } from './renderers/fetchRenderer.js';
import { consoleLogger, type RenderFn } from './types.js';

export interface CliDefaults {
  url?: string;
  username?: string;
  password?: string;
  /** Said in the start line: where the credentials came from. */
  source?: string;
  mqttUrl?: string;
}

const HELP = `queue-keeper-fleet: claim render jobs from queue-keeper, render them, report the results

  --url URL              queue-keeper HTTP base (env QK_URL)
  --username NAME        a user with the fleet role (env QK_USERNAME)
  --password PASS        (env QK_PASSWORD)
  --concurrency N        renders at once (default 4)
  --queues a,b           claim only these queues (default: all the user may claim)
  --renderer NAME        fetch (default: the page's HTML as served) or chromium (runs its scripts;
                         needs playwright-core and @sparticuz/chromium installed)
  --recycle-every N      chromium: replace the browser every N pages (default 50)
  --devices FILE         a JSON file of device profile changes by device name, e.g.
                         {"mobile": {"viewport": {"width": 390, "height": 844}}} (both renderers)
  --json-pages           send pages inside JSON results instead of as raw bytes
  --channel              hold one WebSocket open to the server (/render_queue/channel): it pushes jobs
                         as they come due, so an idle fleet sends nothing; results go over it too (pages
                         as raw bytes still go over HTTP)
  --mqtt URL             wake on queue_status/# from this broker, e.g. mqtt://127.0.0.1:1883
  --no-mqtt              do not use MQTT even when a default broker is known
  --webhook-port N       run a Standard Webhooks receiver on this port (wakes the loop)
  --webhook-host HOST    its interface (default 127.0.0.1)
  --webhook-path PATH    its path (default /)
  --webhook-secret S     the hook secret (repeat during a rotation; env QK_WEBHOOK_SECRET, comma separated)
  --stats-every SECONDS  log the counters this often (default 60, 0 = never)
  --help
`;

/** Runs a fleet until SIGTERM/SIGINT; answers the exit code. */
export async function main(
  argv: string[],
  defaults: CliDefaults = {},
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: argv,
      strict: true,
      options: {
        url: { type: 'string' },
        username: { type: 'string' },
        password: { type: 'string' },
        concurrency: { type: 'string' },
        queues: { type: 'string' },
        renderer: { type: 'string' },
        'recycle-every': { type: 'string' },
        devices: { type: 'string' },
        'json-pages': { type: 'boolean' },
        channel: { type: 'boolean' },
        mqtt: { type: 'string' },
        'no-mqtt': { type: 'boolean' },
        'webhook-port': { type: 'string' },
        'webhook-host': { type: 'string' },
        'webhook-path': { type: 'string' },
        'webhook-secret': { type: 'string', multiple: true },
        'stats-every': { type: 'string' },
        help: { type: 'boolean' },
      },
    }).values;
  } catch (e) {
    console.error(`${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const url = values.url ?? env.QK_URL ?? defaults.url;
  const username = values.username ?? env.QK_USERNAME ?? defaults.username;
  const password = values.password ?? env.QK_PASSWORD ?? defaults.password;
  if (!url || !username || password === undefined) {
    console.error(`--url, --username and --password are required\n\n${HELP}`);
    return 2;
  }
  const concurrency = Number(values.concurrency ?? 4);
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    console.error('--concurrency must be a positive integer');
    return 2;
  }
  const statsEvery = Number(values['stats-every'] ?? 60);
  if (!(statsEvery >= 0)) {
    console.error('--stats-every must be a number of seconds');
    return 2;
  }
  const queues = values.queues
    ?.split(',')
    .map((q) => q.trim())
    .filter(Boolean);
  const rendererName = values.renderer ?? 'fetch';
  const recycleEvery = values['recycle-every'] === undefined ? undefined : Number(values['recycle-every']);
  if (recycleEvery !== undefined && !(Number.isInteger(recycleEvery) && recycleEvery >= 1)) {
    console.error('--recycle-every must be a positive integer');
    return 2;
  }
  let devices: Record<string, DeviceProfileOverride> | undefined;
  if (values.devices !== undefined) {
    try {
      devices = JSON.parse(readFileSync(values.devices, 'utf8')) as Record<string, DeviceProfileOverride>;
      deviceProfiles({ devices });
    } catch (e) {
      console.error(`--devices ${values.devices}: ${(e as Error).message}`);
      return 2;
    }
  }
  let render: RenderFn;
  let closeRenderer = async () => {};
  if (rendererName === 'fetch') render = fetchRenderer({ devices });
  else if (rendererName === 'chromium') {
    try {
      const { chromiumRenderer } = await import('./renderers/chromium.js');
      const c = await chromiumRenderer({ recycleEvery, devices });
      render = c.render;
      closeRenderer = c.close;
    } catch (e) {
      console.error(`the chromium renderer could not start: ${(e as Error).message}`);
      return 1;
    }
  } else {
    console.error(`--renderer must be fetch or chromium, not ${rendererName}`);
    return 2;
  }
  const opts: FleetClientOptions = {
    url,
    username,
    password,
    render,
    concurrency,
    handleSignals: true,
    rawPages: !values['json-pages'],
    channel: values.channel === true,
  };
  if (queues && queues.length > 0) opts.queues = queues;
  const mqttUrl = values['no-mqtt'] ? undefined : (values.mqtt ?? defaults.mqttUrl);
  if (mqttUrl) opts.mqtt = { url: mqttUrl };
  const secrets = values['webhook-secret'] ?? env.QK_WEBHOOK_SECRET?.split(',').filter(Boolean);
  if (values['webhook-port'] !== undefined) {
    if (!secrets || secrets.length === 0) {
      console.error('--webhook-port needs --webhook-secret (the hook secret queue-keeper showed)');
      return 2;
    }
    opts.webhook = {
      port: Number(values['webhook-port']),
      host: values['webhook-host'],
      path: values['webhook-path'],
      secrets,
    };
  }
  const fleet = new FleetClient(opts);
  console.log(
    `fleet: claiming from ${fleet.where} as ${username}` +
      (defaults.source && !values.username && !env.QK_USERNAME
        ? ` (credentials from ${defaults.source})`
        : '') +
      `, queues ${queues?.length ? queues.join(',') : 'all'}, concurrency ${concurrency}, renderer ${rendererName}` +
      (rendererName === 'chromium' ? ` (new browser every ${recycleEvery ?? 50} pages)` : '') +
      (devices ? `, device profiles changed for ${Object.keys(devices).join(',')}` : '') +
      `, pages as ${opts.rawPages ? 'raw bytes' : 'JSON'}` +
      (opts.channel ? ', over the channel' : '') +
      (mqttUrl ? `, mqtt ${mqttUrl}` : '') +
      (opts.webhook ? `, webhook receiver on ${opts.webhook.host ?? '127.0.0.1'}:${opts.webhook.port}` : ''),
  );
  const stopped = new Promise<void>((resolve) => {
    for (const s of ['SIGTERM', 'SIGINT'] as const) process.once(s, () => resolve());
  });
  try {
    await fleet.start();
  } catch (e) {
    await closeRenderer();
    console.error(e instanceof FleetRefusedError ? `refused: ${e.message}` : `could not start: ${String(e)}`);
    return 1;
  }
  const stats =
    statsEvery > 0
      ? setInterval(() => consoleLogger.info('counters', { ...fleet.counters }), statsEvery * 1000)
      : null;
  await stopped;
  // The fleet's own signal handler is draining it; wait for that to finish.
  await fleet.stop();
  if (stats) clearInterval(stats);
  await closeRenderer();
  consoleLogger.info('final counters', { ...fleet.counters });
  return 0;
}
