/**
 * What every `RL.*` limiter decides, and the exact integer helpers they share.
 *
 * All `RL.*` algorithms (except RL.GCRA, which reuses redis-cell's nanosecond GCRA) work in whole
 * milliseconds with integer arithmetic only: rates are never turned into fractional tokens. Where a
 * rate `limit / period_ms` is needed, quantities are scaled by `period_ms` (a token is worth
 * `period_ms` "scaled units" and the bucket refills `limit` scaled units per millisecond), so every
 * stored number is an integer below 2^53 and long runs cannot drift.
 */

/** The decision of one call, reused between calls (no allocation per request). */
export interface RateDecision {
  limited: boolean;
  limit: number;
  /** Whole units spendable now (after this call's spend, when it was allowed). */
  remaining: number;
  /** Earliest wait in ms after which the same request would be allowed; −1 when allowed or never. */
  retryAfterMs: number;
  /** Wait in ms until the key is indistinguishable from a fresh one (also its TTL). */
  resetAfterMs: number;
  /** ms until this accepted request's turn, for an algorithm that queues; else 0. */
  delayMs: number;
  /** When true, the key must be stored with state A/B/C and expire at `expireAtMs`. */
  write: boolean;
  a: number;
  b: number;
  c: number;
  expireAtMs: number;
  /** An algorithm with a blob: the blob to store with A/B/C, set by its commit and refund. */
  blob: Float64Array | undefined;
}

export function newRateDecision(): RateDecision {
  return { limited: false, limit: 0, remaining: 0, retryAfterMs: -1, resetAfterMs: 0, delayMs: 0, write: false, a: 0, b: 0, c: 0, expireAtMs: 0, blob: undefined };
}

/**
 * The largest product of two parameters the algorithms accept (BURST·period_ms for the buckets,
 * limit·period_ms for the windows): 2^52, so sums of two such numbers are still exact doubles.
 */
export const MAX_SCALED = 2 ** 52;

/** ⌈a / b⌉ for integers a ≥ 0, b ≥ 1 below 2^53, exactly (a float quotient can round). */
export function ceilDiv(a: number, b: number): number {
  let q = Math.ceil(a / b);
  // Correct the float quotient by at most one step either way.
  if (q * b < a) q++;
  else if (q > 0 && (q - 1) * b >= a) q--;
  return q;
}

/** ⌊a / b⌋ for integers a ≥ 0, b ≥ 1 below 2^53, exactly. */
export function floorDiv(a: number, b: number): number {
  let q = Math.floor(a / b);
  if (q * b > a) q--;
  else if ((q + 1) * b <= a) q++;
  return q;
}

/** Fills `out` for a request that was allowed without spending (COST 0 peeks, or a fresh key). */
export function peekDecision(out: RateDecision, limit: number, remaining: number, resetAfterMs: number): void {
  out.limited = false;
  out.limit = limit;
  out.remaining = remaining;
  out.retryAfterMs = -1;
  out.resetAfterMs = resetAfterMs;
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
