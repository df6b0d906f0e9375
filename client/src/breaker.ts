// The circuit breaker around the server: after `failureThreshold` failures in a row (network errors
// and 5xx answers) it opens and the client sends nothing for `openMs`; then one probe goes through
// (half-open). A probe that succeeds closes it; one that fails opens it again for twice as long, up to
// `maxOpenMs`. A struggling server thus sees one request per open period instead of a retry storm.

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface BreakerOptions {
  failureThreshold: number;
  openMs: number;
  maxOpenMs: number;
}

export class CircuitBreaker {
  private failures = 0;
  private openUntil = 0;
  private openFor: number;
  private opened = false;

  constructor(private readonly opts: BreakerOptions) {
    this.openFor = opts.openMs;
  }

  state(now: number): BreakerState {
    if (!this.opened) return 'closed';
    return now < this.openUntil ? 'open' : 'half-open';
  }

  /** When an open breaker lets its probe through (0 when closed). */
  retryAt(): number {
    return this.opened ? this.openUntil : 0;
  }

  /** Records a failure; answers true when this failure opened (or re-opened) the breaker. */
  failure(now: number): boolean {
    this.failures++;
    if (this.opened) {
      // The half-open probe failed: open again, longer.
      this.openFor = Math.min(this.opts.maxOpenMs, this.openFor * 2);
      this.openUntil = now + this.openFor;
      return true;
    }
    if (this.failures >= this.opts.failureThreshold) {
      this.opened = true;
      this.openFor = this.opts.openMs;
      this.openUntil = now + this.openFor;
      return true;
    }
    return false;
  }

  /** Records a success; answers true when it closed an open breaker. */
  success(): boolean {
    const wasOpen = this.opened;
    this.failures = 0;
    this.opened = false;
    this.openFor = this.opts.openMs;
    return wasOpen;
  }

  /** Consecutive failures so far (0 after a success). */
  consecutiveFailures(): number {
    return this.failures;
  }
}
