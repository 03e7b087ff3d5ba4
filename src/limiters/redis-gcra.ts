/**
 * Redis's native GCRA command (redis/redis `src/gcra.c`, "since 8.8.0"), reproduced exactly over
 * Redis's whole range: signed 64-bit microseconds.
 *
 * Redis computes in microseconds from the command's millisecond time snapshot:
 * E = (long long)(period·1e6 / tokens_per_period + 0.5), at least 1; variance = E·(max_burst+1);
 * seconds are true ceilings of the double quotient; `remaining` is integer division; the key expires
 * at floor(TAT/1000) ms. Its overflow checks refuse E·TOKENS or E·(max_burst+1) above 2^63 − 1 and a
 * new TAT above 2^63 − 1.
 *
 * Two paths: when the intervals are at most 2^51 µs (~71 years) and the TAT at most 2^52 µs, every
 * intermediate value stays below 2^53 and double arithmetic is exact integer arithmetic (the common
 * case, no allocation). Beyond that the same steps run in BigInt.
 *
 * A TAT beyond 2^53 µs is stored as two numbers: the nearest double and the exact remainder
 * (TAT − that double, a small integer; 0 below 2^53). Other limiters that share the key type read
 * the first number and see the TAT to within a few µs in 285 000 years.
 */

/** Intervals and TATs up to these stay exact in doubles through every step of gcraDecide. */
const FAST_INTERVAL_US = 2 ** 51;
const FAST_TAT_US = 2 ** 52;

const LLONG_MAX = 9223372036854775807n;

import { luaSections, type ScriptOp } from './algorithm.js';
import type { Decision } from './decision.js';
import { lua } from './redis-gcra.lua.js';

/** Redis's GCRA command's op in the backend's script. */
export const redisGcraOp: ScriptOp = { op: 'g', ...luaSections(lua), reply: 'throttle-seconds' };

export interface WideGcraParams {
  limit: bigint;
  emissionUs: bigint;
  varianceUs: bigint;
  incrementUs: bigint;
}

export interface GcraParams {
  /** max_burst + 1 (Redis's `max_burst` after its increment); the nearest double when `wide`. */
  limit: number;
  emissionUs: number;
  varianceUs: number;
  incrementUs: number;
  /** The exact values when an interval exceeds 2^51 µs (or the limit 2^53); null otherwise. */
  wide: WideGcraParams | null;
}

export type GcraParamsResult = GcraParams | 'tokens-overflow' | 'burst-overflow';

/**
 * Derives the intervals from validated arguments (maxBurst ≥ 0, tokensPerPeriod ≥ 1, numTokens ≥ 1,
 * 0 < period < 1e12), with Redis's overflow checks. `maxBurst` and `numTokens` are exact: a caller
 * passes a bigint for a value above 2^53 (a number there would already be rounded).
 */
export function gcraParams(maxBurst: number | bigint, tokensPerPeriod: number, periodSec: number, numTokens: number | bigint): GcraParamsResult {
  // (long long)(double): the quotient is below 1e18, an integer-valued double, exact as a bigint.
  let emissionUs = Math.trunc((periodSec * 1000000) / tokensPerPeriod + 0.5);
  if (emissionUs === 0) emissionUs = 1;
  if (typeof maxBurst === 'number' && typeof numTokens === 'number' && maxBurst < Number.MAX_SAFE_INTEGER) {
    const limit = maxBurst + 1;
    const incrementUs = emissionUs * numTokens;
    const varianceUs = emissionUs * limit;
    // Rounding is monotonic and 2^51 is a double: a rounded product at most 2^51 is exact.
    if (incrementUs <= FAST_INTERVAL_US && varianceUs <= FAST_INTERVAL_US) return { limit, emissionUs, varianceUs, incrementUs, wide: null };
  }
  const burst = BigInt(maxBurst);
  const limit = burst < LLONG_MAX ? burst + 1n : burst;
  const tokens = BigInt(numTokens);
  const e = BigInt(emissionUs);
  // Redis: E > LLONG_MAX / n, which for positive integers is E·n > LLONG_MAX.
  if (e * tokens > LLONG_MAX) return 'tokens-overflow';
  if (e * limit > LLONG_MAX) return 'burst-overflow';
  const wide: WideGcraParams = { limit, emissionUs: e, varianceUs: e * limit, incrementUs: e * tokens };
  return { limit: Number(limit), emissionUs, varianceUs: Number(wide.varianceUs), incrementUs: Number(wide.incrementUs), wide };
}

/**
 * Decides one GCRA call.
 * @param hasTat whether the key exists; then its TAT in µs is `tatUs` + `tatRestUs` (see the header).
 * @param nowUs the server time; Redis uses its millisecond snapshot, so the µs part is dropped.
 */
export function gcraDecide(p: GcraParams, hasTat: boolean, tatUs: number, nowUs: number, out: Decision, tatRestUs = 0): void {
  const now = Math.floor(nowUs / 1000) * 1000;
  const tat = hasTat ? tatUs : now;
  if (p.wide !== null || tat > FAST_TAT_US || now > FAST_TAT_US) {
    decideWide(p, hasTat ? BigInt(tatUs) + BigInt(tatRestUs) : BigInt(now), BigInt(now), out);
    return;
  }
  out.overflow = false;
  out.wide = false;
  out.limit = p.limit;
  out.retryAfter = -1;
  out.write = false;
  const newTat = (now > tat ? now : tat) + p.incrementUs;
  const diff = now - (newTat - p.varianceUs);
  let ttl: number;
  if (diff < 0) {
    out.limited = true;
    // More tokens than the burst holds can never be allowed: retry stays −1.
    if (p.incrementUs <= p.varianceUs) out.retryAfter = ceilSeconds(-diff);
    ttl = tat - now;
  } else {
    out.limited = false;
    ttl = newTat - now;
    out.write = true;
    out.a = newTat;
    out.b = 0;
    out.c = 0;
    out.expireAtMs = Math.floor(newTat / 1000);
  }
  const next = p.varianceUs - ttl;
  out.remaining = next > -p.emissionUs ? Math.trunc(next / p.emissionUs) : 0;
  out.resetAfter = ceilSeconds(ttl);
}

/** gcraDecide's steps in BigInt: intervals beyond 2^51 µs or TATs beyond 2^52 µs (~142 years). */
function decideWide(p: GcraParams, tat: bigint, now: bigint, out: Decision): void {
  const w = p.wide;
  const limit = w !== null ? w.limit : BigInt(p.limit);
  const emission = w !== null ? w.emissionUs : BigInt(p.emissionUs);
  const variance = w !== null ? w.varianceUs : BigInt(p.varianceUs);
  const increment = w !== null ? w.incrementUs : BigInt(p.incrementUs);
  const base = now > tat ? now : tat;
  out.write = false;
  if (LLONG_MAX - base < increment) {
    out.overflow = true;
    return;
  }
  out.overflow = false;
  out.retryAfter = -1;
  const newTat = base + increment;
  const diff = now - (newTat - variance);
  let ttl: bigint;
  if (diff < 0n) {
    out.limited = true;
    if (increment <= variance) out.retryAfter = ceilSeconds(Number(-diff));
    ttl = tat - now;
  } else {
    out.limited = false;
    ttl = newTat - now;
    out.write = true;
    const approx = Number(newTat);
    out.a = approx;
    out.b = 0;
    out.c = Number(newTat - BigInt(approx));
    // The keyspace keeps expiries as exact doubles: past 2^53 ms (year ~287 000) the key expires then.
    const expireAtMs = Number(newTat / 1000n);
    out.expireAtMs = expireAtMs > Number.MAX_SAFE_INTEGER ? Number.MAX_SAFE_INTEGER : expireAtMs;
  }
  const next = variance - ttl;
  const remaining = next > -emission ? next / emission : 0n; // truncates toward zero, as C does
  out.limit = Number(limit);
  out.remaining = Number(remaining);
  out.wide = limit > 9007199254740991n || remaining > 9007199254740991n;
  out.wideLimit = limit;
  out.wideRemaining = remaining;
  // C converts the long long to double (round to nearest) before dividing, as Number() does.
  out.resetAfter = ceilSeconds(Number(ttl));
}

/** ceil(µs / 1e6) as C's ceil() then (long long): −0 becomes 0. */
function ceilSeconds(us: number): number {
  return Math.ceil(us / 1000000) + 0;
}
