// The admin credentials and the hook-secret sealing key of a local data folder (npm start,
// npm run start:cluster, npm run fleet): made once with random values and kept there, mode 0600.
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** `{username, password}` from `<data>/credentials.json`, written first if missing. */
export function localCredentials(data) {
  const credFile = join(data, 'credentials.json');
  if (!existsSync(credFile))
    writeFileSync(
      credFile,
      JSON.stringify({ username: 'admin', password: randomBytes(12).toString('base64url') }),
      { mode: 0o600 },
    );
  return JSON.parse(readFileSync(credFile, 'utf8'));
}

/** QUEUE_KEEPER_SECRET_KEY from the environment, else `<data>/secret-key` (written first if missing). */
export function localSecretKey(data) {
  if (process.env.QUEUE_KEEPER_SECRET_KEY) return process.env.QUEUE_KEEPER_SECRET_KEY;
  const keyFile = join(data, 'secret-key');
  if (!existsSync(keyFile)) writeFileSync(keyFile, randomBytes(32).toString('base64'), { mode: 0o600 });
  return readFileSync(keyFile, 'utf8').trim();
}
