/**
 * The active expiry cycle: keys are removed lazily when a lookup finds them expired (Keyspace), and
 * by this cycle, which walks the slots round-robin a bounded number at a time, so keys nobody looks
 * up again are reclaimed too, and a million keys expiring together are reclaimed over many short
 * steps. Its samples of the live keys' TTLs give INFO keyspace's avg_ttl.
 */
import type { Keyspace } from './keyspace.js';

export class ExpiryCycle {
  /** The next slot to examine. */
  private cursor = 0;
  /**
   * Estimated average TTL of live keys in ms (INFO keyspace avg_ttl), from the steps' samples. Starts
   * as −0 (equal to 0 in every comparison and printed as 0) so V8 holds the field as a double from the
   * start: a field that starts as a small integer and gets its first fraction from the first step
   * changes the object's hidden class then, and code optimized for the old one is thrown away.
   */
  avgTtlMs = -0;
  /** Keys examined by the last step. */
  lastStepKeys = 0;

  /** See Keyspace.expireStep. */
  step(keys: Keyspace, nowMs: number, maxSlots: number, timeUp: () => boolean): number {
    let removed = 0;
    let ttlSum = 0;
    let ttlCount = 0;
    const slots = keys.slotsUsed;
    const limit = Math.min(maxSlots, slots);
    for (let i = 0; i < limit; i++) {
      if (this.cursor >= slots) this.cursor = 0;
      const slot = this.cursor++;
      if (keys.occupied(slot)) {
        const expireAtMs = keys.expireAtMs(slot);
        if (nowMs > expireAtMs) {
          keys.removeExpired(slot);
          removed++;
        } else {
          ttlSum += expireAtMs - nowMs;
          ttlCount++;
        }
      }
      if ((i & 255) === 255 && timeUp()) break;
    }
    this.lastStepKeys = removed + ttlCount;
    if (keys.size === 0) {
      this.avgTtlMs = 0;
    } else if (ttlCount > 0) {
      // Blend each step's sample into the running estimate, as Redis does with its expiry samples.
      const sample = ttlSum / ttlCount;
      this.avgTtlMs = this.avgTtlMs === 0 ? sample : (this.avgTtlMs * 49 + sample) / 50;
    }
    return removed;
  }

  /** FLUSH: the keys are gone, the walk starts over. */
  reset(): void {
    this.cursor = 0;
    this.avgTtlMs = 0;
  }
}
