/**
 * Redis's native GCRA command (redis/redis `src/gcra.c`, "since 8.8.0"), reproduced exactly.
 *
 * Redis computes in microseconds from the command's millisecond time snapshot:
 * E = (long long)(period·1e6 / tokens_per_period + 0.5), at least 1; variance = E·(max_burst+1);
 * seconds are true ceilings; `remaining` is integer division; the key expires at floor(TAT/1000) ms.
 * All values here stay below 2^53 (the parameter check refuses larger ones), so double arithmetic
 * is exact integer arithmetic.
 */

export interface GcraParams {
  /** max_burst + 1 (Redis's `max_burst` after its increment). */
  limit: number;
  emissionUs: number;
  varianceUs: number;
  incrementUs: number;
}

export interface GcraDecision {
  limited: boolean;
  limit: number;
  remaining: number;
  retryAfterSec: number;
  resetAfterSec: number;
  write: boolean;
  tatUs: number;
  expireAtMs: number;
}

export function newGcraDecision(): GcraDecision {
  return { limited: false, limit: 0, remaining: 0, retryAfterSec: -1, resetAfterSec: 0, write: false, tatUs: 0, expireAtMs: 0 };
}

const LLONG_MAX = 9223372036854775807n;

export type GcraParamsResult = GcraParams | 'tokens-overflow' | 'burst-overflow';

/**
 * Derives the intervals from validated arguments (maxBurst ≥ 0, tokensPerPeriod ≥ 1, numTokens ≥ 1,
 * 0 < period < 1e12), with Redis's overflow checks. Where Redis's i64 would still hold a value but
 * a double could not hold it exactly (beyond ~285 years in µs), the same overflow error is given.
 */
export function gcraParams(maxBurst: number, tokensPerPeriod: number, periodSec: number, numTokens: number): GcraParamsResult {
  const limit = maxBurst < 9223372036854775807 ? maxBurst + 1 : maxBurst;
  let emissionUs = Math.trunc((periodSec * 1000000) / tokensPerPeriod + 0.5);
  if (emissionUs === 0) emissionUs = 1;
  if (emissionUs * numTokens >= 2 ** 62 && BigInt(emissionUs) > LLONG_MAX / BigInt(numTokens)) return 'tokens-overflow';
  if (emissionUs * limit >= 2 ** 62 && BigInt(emissionUs) > LLONG_MAX / BigInt(limit)) return 'burst-overflow';
  const incrementUs = emissionUs * numTokens;
  const varianceUs = emissionUs * limit;
  if (incrementUs > Number.MAX_SAFE_INTEGER / 4) return 'tokens-overflow';
  if (varianceUs > Number.MAX_SAFE_INTEGER / 4) return 'burst-overflow';
  return { limit, emissionUs, varianceUs, incrementUs };
}

/**
 * Decides one GCRA call.
 * @param hasTat whether the key exists; then `tatUs` is its stored TAT in µs.
 * @param nowUs the server time; Redis uses its millisecond snapshot, so the µs part is dropped.
 */
export function gcraDecide(p: GcraParams, hasTat: boolean, tatUs: number, nowUs: number, out: GcraDecision): void {
  const now = Math.floor(nowUs / 1000) * 1000;
  const tat = hasTat ? tatUs : now;
  out.limit = p.limit;
  out.retryAfterSec = -1;
  out.write = false;
  const newTat = (now > tat ? now : tat) + p.incrementUs;
  const diff = now - (newTat - p.varianceUs);
  let ttl: number;
  if (diff < 0) {
    out.limited = true;
    // More tokens than the burst holds can never be allowed: retry stays −1.
    if (p.incrementUs <= p.varianceUs) out.retryAfterSec = ceilSeconds(-diff);
    ttl = tat - now;
  } else {
    out.limited = false;
    ttl = newTat - now;
    out.write = true;
    out.tatUs = newTat;
    out.expireAtMs = Math.floor(newTat / 1000);
  }
  const next = p.varianceUs - ttl;
  out.remaining = next > -p.emissionUs ? Math.trunc(next / p.emissionUs) : 0;
  out.resetAfterSec = ceilSeconds(ttl);
}

/** ceil(µs / 1e6) as C's ceil() then (long long): −0 becomes 0. */
function ceilSeconds(us: number): number {
  return Math.ceil(us / 1000000) + 0;
}
