// A row's verdict state and the reasons fleets report (docs/feeding.md, "What a result does to its row"),
// shared by the scheduling rules and the verdicts.

/** Why a non-indexable page was not indexable, as fleets report it. */
export const REASONS = [
  'noindex',
  'canonical-mismatch',
  'canonical-variant',
  'http-error',
  'redirect-loop',
  'redirect',
  'error',
] as const;
export type Reason = (typeof REASONS)[number];

/** What a row is: scheduled as usual, parked as not indexable, or parked as dead at its origin. */
export const ROW_STATES = ['active', 'suppressed', 'gone'] as const;
export type RowState = (typeof ROW_STATES)[number];

/** Why a row was retired (the retired list's `reason`, the retired metric's label). */
export const RETIRE_REASONS = ['redirect', 'redirect-strikes', 'suppressed', 'gone'] as const;
export type RetireReason = (typeof RETIRE_REASONS)[number];

/** Whether a reported reason is one this version knows (anything else reads as none). */
export function knownReason(v: unknown): Reason | null {
  return typeof v === 'string' && (REASONS as readonly string[]).includes(v) ? (v as Reason) : null;
}

/** A stored state, `active` for a row written before states existed or holding anything else. */
export function storedState(v: unknown): RowState {
  return v === 'suppressed' || v === 'gone' ? v : 'active';
}
