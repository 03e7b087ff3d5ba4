/**
 * The server clock, in whole microseconds since the Unix epoch.
 *
 * Real mode follows the wall clock at start and then advances with the monotonic clock, so limiter
 * decisions never see time run backwards (docs/commands.md, DEBUG CLOCK). If the wall clock later jumps forward (NTP
 * step), the clock catches up; if it jumps back, the clock ignores it.
 *
 * Debug mode (`DEBUG CLOCK SET/ADVANCE`) freezes time at a chosen instant so tests replay timelines
 * deterministically. Limiter decisions, key expiry, TTL and TIME all read this one clock.
 */
import { performance } from 'node:perf_hooks';

export class Clock {
  private anchorWallUs = Date.now() * 1000;
  private anchorPerfMs = performance.now();
  private lastRealUs = 0;
  private frozenUs: number | null = null;

  nowUs(): number {
    return this.nowUsAt(performance.now());
  }

  /**
   * The time at the monotonic instant `perfMs` (a `performance.now()` value the caller already
   * read: the server reads it once per command for both the command's time and its duration).
   */
  nowUsAt(perfMs: number): number {
    if (this.frozenUs !== null) return this.frozenUs;
    let us = Math.floor(this.anchorWallUs + (perfMs - this.anchorPerfMs) * 1000);
    if (us < this.lastRealUs) us = this.lastRealUs;
    this.lastRealUs = us;
    return us;
  }

  nowMs(): number {
    return Math.floor(this.nowUs() / 1000);
  }

  get frozen(): boolean {
    return this.frozenUs !== null;
  }

  /** Called periodically: lets the monotonic clock catch up with a wall clock that jumped ahead. */
  resync(): void {
    const wallUs = Date.now() * 1000;
    const monoUs = this.anchorWallUs + (performance.now() - this.anchorPerfMs) * 1000;
    if (wallUs - monoUs > 1_000_000) this.anchorWallUs += wallUs - monoUs;
  }

  /** Freezes the clock at `us` (it may go backwards: tests replay many timelines). */
  freezeAt(us: number): void {
    this.frozenUs = us;
  }

  /** Moves the clock forward by `us`, freezing it where it lands. */
  advance(us: number): void {
    this.frozenUs = this.nowUs() + us;
  }

  /** Back to real time. Real time never reports less than it already reported in real mode. */
  useReal(): void {
    this.frozenUs = null;
  }
}

/**
 * Parses a decimal number of milliseconds with at most three decimals (`1800000000000.125`) into
 * whole microseconds, exactly (no float rounding). Returns null if it is not such a number.
 */
export function parseMillisToMicros(text: string): number | null {
  const m = /^(-?)(\d{1,16})(?:\.(\d{1,3}))?$/.exec(text);
  if (m === null) return null;
  const us = Number(m[2]) * 1000 + Number((m[3] ?? '').padEnd(3, '0'));
  if (!Number.isSafeInteger(us)) return null;
  return m[1] === '-' ? -us : us;
}
