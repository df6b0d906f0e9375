// `npm run fleet -- --concurrency 4`: a render fleet against the local `npm start`. It claims as the
// admin user that `npm start` keeps in .harper-data/credentials.json, at the URL it wrote to
// .harper-data/server.json (or HOST/PORT, as `npm start` reads them). Every flag of the fleet command
// works here (`npm run fleet -- --help`); --url/--username/--password override the local defaults.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const data = join(repo, '.harper-data');
const credFile = join(data, 'credentials.json');
const serverFile = join(data, 'server.json');
if (!existsSync(join(repo, 'client', 'dist', 'src', 'cli.js'))) {
  console.error('client/dist is missing: run `npm install` (it builds) or `npm run build` first.');
  process.exit(1);
}
const { main } = await import('@queue-keeper/fleet-client/cli');

const defaults = {};
if (existsSync(credFile)) {
  const creds = JSON.parse(readFileSync(credFile, 'utf8'));
  defaults.username = creds.username;
  defaults.password = creds.password;
  defaults.source = relative(process.cwd(), credFile) || credFile;
}
const host = process.env.HOST ?? '127.0.0.1';
const server = existsSync(serverFile) ? JSON.parse(readFileSync(serverFile, 'utf8')) : {};
defaults.url = server.url ?? `http://${host}:${Number(process.env.PORT ?? 9926)}`;
defaults.mqttUrl = server.mqtt ?? `mqtt://${host}:${Number(process.env.MQTT_PORT ?? 1883)}`;
const args = process.argv.slice(2);
if (!defaults.username && !args.includes('--username') && !process.env.QK_USERNAME) {
  console.error(
    `no ${relative(process.cwd(), credFile)}: start the server with \`npm start\` first, or pass --url/--username/--password`,
  );
  process.exit(1);
}
process.exitCode = await main(args, defaults);
