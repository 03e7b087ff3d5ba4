/**
 * What a limiter decides for one call: one record for every algorithm, filled in place by the
 * algorithm's decide (or refund) and read by the store, which stores the new state and writes the
 * reply. Reused between calls: nothing is allocated per request.
 */

export interface Decision {
  limited: boolean;
  /** The limit the reply reports (max_burst + 1 for CL.THROTTLE and GCRA); the nearest double when `wide`. */
  limit: number;
  /** Whole units spendable now (after this call's spend, when it was allowed). */
  remaining: number;
  /**
   * Earliest wait after which the same request would be allowed; −1 when allowed or never. In the
   * unit of the algorithm's reply: seconds for CL.THROTTLE and GCRA (redis-cell's and Redis's
   * rounding of their nanosecond and microsecond times), milliseconds for the RL.* family.
   */
  retryAfter: number;
  /** Wait until the key is indistinguishable from a fresh one (also its TTL), in retryAfter's unit. */
  resetAfter: number;
  /** ms until this accepted request's turn, for an algorithm that queues; else 0. */
  delayMs: number;
  /** When true, the key must be stored with state A/B/C (and `blob`) and expire at `expireAtMs`. */
  write: boolean;
  a: number;
  b: number;
  c: number;
  expireAtMs: number;
  /** An algorithm with a blob: the blob to store with A/B/C, set by its commit and refund. */
  blob: Float64Array | undefined;
  /** GCRA: the new TAT would exceed 2^63 − 1 µs (Redis's TOKENS overflow error); nothing else is set. */
  overflow: boolean;
  /** GCRA: limit or remaining exceed 2^53; then `wideLimit`/`wideRemaining` hold them exactly. */
  wide: boolean;
  wideLimit: bigint;
  wideRemaining: bigint;
}

export function newDecision(): Decision {
  return {
    limited: false, limit: 0, remaining: 0, retryAfter: -1, resetAfter: 0, delayMs: 0, write: false, a: 0, b: 0, c: 0, expireAtMs: 0,
    blob: undefined, overflow: false, wide: false, wideLimit: 0n, wideRemaining: 0n,
  };
}

/** Fills `out` for a request that was allowed without spending (COST 0 peeks, or a fresh key). */
export function peekDecision(out: Decision, limit: number, remaining: number, resetAfterMs: number): void {
  out.limited = false;
  out.limit = limit;
  out.remaining = remaining;
  out.retryAfter = -1;
  out.resetAfter = resetAfterMs;
  out.delayMs = 0;
  out.write = false;
}

/**
 * What a refund (giving back spent units, `REFUND n`) does to a key: nothing (absent, or nothing of
 * this limit spent), store the new state (`out.a`/`b`/`c`, expiring at `out.expireAtMs`), or delete
 * the key because the refund made it as full as a fresh one (a fresh key and an absent one are the
 * same thing, and a stored fresh state would be a key with nothing to expire for).
 */
export enum RefundEffect {
  None = 0,
  Write = 1,
  Delete = 2,
}
