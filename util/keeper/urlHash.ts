// The seeded hash of a held row's URL that places it in HeldRows' table (heldRows.ts).

/**
 * 32-bit FNV-1a over every UTF-16 unit from a seeded basis, then a final mix so the low bits (the
 * probe start) spread. The seed is per keeper and random by default: the low-trust discover role can
 * file URLs, and with a known hash it could precompute URLs that pile into one probe run. (A defence
 * against offline crafting, not a cryptographic one.)
 */
export function hashUrl(url: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed ^ url.length) | 0;
  for (let i = 0; i < url.length; i++) h = Math.imul(h ^ url.charCodeAt(i), 0x01000193);
  h ^= h >>> 16;
  h = Math.imul(h ^ seed, 0x85ebca6b);
  h ^= h >>> 13;
  return h | 0;
}
