/**
 * The exact integer helpers every `RL.*` limiter shares (its decision record: decision.ts).
 *
 * All `RL.*` algorithms (except RL.GCRA, which reuses redis-cell's nanosecond GCRA) work in whole
 * milliseconds with integer arithmetic only: rates are never turned into fractional tokens. Where a
 * rate `limit / period_ms` is needed, quantities are scaled by `period_ms` (a token is worth
 * `period_ms` "scaled units" and the bucket refills `limit` scaled units per millisecond), so every
 * stored number is an integer below 2^53 and long runs cannot drift.
 */


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
