// What a config change does, read from the schema's `effect` of each changed key (never from key
// prefixes): the duty scheduler re-arms on `timers` keys, the keeper re-sorts on `reclassify` keys.
import { CONFIG_KEYS, type ConfigEffect } from './schema.js';

const EFFECT_OF: ReadonlyMap<string, ConfigEffect> = new Map(CONFIG_KEYS.map((k) => [k.path, k.effect]));

/** The paths among `paths` whose schema effect is `effect`. */
export function pathsWithEffect(paths: readonly string[], effect: ConfigEffect): string[] {
  return paths.filter((p) => EFFECT_OF.get(p) === effect);
}
