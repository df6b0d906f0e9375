// A hold inside every config update, between reading the override row and writing it: the config race
// test (test/integration/configRace.test.ts) sets it so two updates through two workers overlap for
// certain. The composition root reads the variable once at start and hands RuntimeConfig a wait only
// when it is set; unset (every production node), updates run straight through.

/** The environment variable the root reads once: whole ms from 1 to MAX_CONFIG_UPDATE_HOLD_MS. */
export const CONFIG_UPDATE_HOLD_ENV = 'QUEUE_KEEPER_CONFIG_UPDATE_HOLD_MS';

/** The lock's wait is 10 s; a hold stays well inside it, so a held update can still take the lock. */
export const MAX_CONFIG_UPDATE_HOLD_MS = 5000;

/** The hold the variable asks for in ms; 0 (no hold) when it is unset, empty or not a positive number. */
export function parseConfigUpdateHold(text: string | undefined): number {
  const ms = Number(text);
  return text !== undefined && text.trim() !== '' && Number.isFinite(ms) && ms > 0
    ? Math.min(Math.floor(ms), MAX_CONFIG_UPDATE_HOLD_MS)
    : 0;
}
