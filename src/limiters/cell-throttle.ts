/**
 * redis-cell 0.5's GCRA (`CL.THROTTLE`), reproduced to the nanosecond.
 *
 * redis-cell computes in i64 nanoseconds. Absolute instants in nanoseconds (~1.8e18) do not fit a
 * double exactly, so every instant and duration here is a pair: whole microseconds (an integer
 * double, exact below 2^53 µs ≈ 285 years) and the nanoseconds beyond them (0..999). The server
 * clock has microsecond resolution, so `now` never has a nanosecond part; the emission interval
 * T = trunc(period·1e9 / count) does.
 *
 * The quirks the recorded vectors pin down (test/fixtures/vectors/README.md) are all here on purpose:
 * seconds rounded up only when at least one whole millisecond is left over; `remaining` computed
 * from microsecond-truncated durations in f64; the key's TTL truncated to whole milliseconds and
 * added to the truncated millisecond clock; quantity 0 re-storing the TAT; quantity > limit
 * refused with retry −1 and nothing written.
 */

import { luaSections, type ScriptOp } from './algorithm.js';
import type { Decision } from './decision.js';
import { lua } from './cell-throttle.lua.js';

/** CL.THROTTLE's op in the backend's script; its branch also runs RL.GCRA (op 'r'). */
export const cellThrottleOp: ScriptOp = { op: 'c', ...luaSections(lua), reply: 'throttle-seconds' };

/** Validated parameters with the derived intervals, computed once per call. */
export interface CellParams {
  /** max_burst + 1. */
  limit: number;
  /** Emission interval T = trunc(period·1e9/count) ns, as µs + ns. */
  intervalUs: number;
  intervalNs: number;
  /** Tolerance τ = T·limit, as µs + ns. */
  toleranceUs: number;
  toleranceNs: number;
}

/**
 * The longest tolerance (T·limit) accepted: 100 years. A limited call computes TATs up to now + 2τ,
 * which must stay below 2^53 µs (year 2255) for the µs part to be exact: true until about 2055.
 */
export const MAX_TOLERANCE_US = 100 * 365 * 86400 * 1e6;

/** The largest max_burst accepted: limit = max_burst + 1 (the reply's second field) must be exact. */
export const MAX_BURST = Number.MAX_SAFE_INTEGER - 1;

/**
 * The longest period accepted, in seconds: redis-cell converts the period to i64 nanoseconds
 * (`whole_nanoseconds() as i64`), which wraps beyond this and yields a meaningless rate.
 */
export const MAX_PERIOD_SEC = 9223372036;

/**
 * Why a combination of arguments is refused:
 * - `out-of-range`: max_burst above MAX_BURST, period above MAX_PERIOD_SEC, count or period below 1;
 * - `zero-interval`: T = trunc(period·1e9/count) is 0 ns (count above period·1e9), which redis-cell
 *   refuses with "Zero rates are not supported";
 * - `tolerance-overflow`: τ above MAX_TOLERANCE_US.
 */
export type CellParamsError = 'out-of-range' | 'zero-interval' | 'tolerance-overflow';

/**
 * Results of the (µs, ns) helpers below: [µs, ns]. They return through this scratch array instead
 * of a tuple because a decision on the hot path should allocate nothing, and V8 neither elides the
 * tuples nor keeps doubles unboxed in module variables (both measured: ~130 and ~400 bytes of
 * garbage per call); a Float64Array holds raw doubles.
 */
const result = new Float64Array(2);

/** Derives T and τ exactly as redis-cell: `(period_ns as f64 / count as f64) as i64`. */
export function cellParams(maxBurst: number, count: number, periodSec: number): CellParams | CellParamsError {
  if (!(maxBurst >= 0 && maxBurst <= MAX_BURST && count >= 1 && periodSec >= 1 && periodSec <= MAX_PERIOD_SEC)) {
    return 'out-of-range';
  }
  const limit = maxBurst + 1;
  // period·1e9 < 2^63 is rounded to f64 once, as redis-cell's `i64 as f64`; so is a count above 2^53.
  const intervalNsTotal = Math.trunc((periodSec * 1e9) / count);
  if (intervalNsTotal === 0) return 'zero-interval';
  let intervalUs: number;
  let intervalNs: number;
  if (intervalNsTotal < Number.MAX_SAFE_INTEGER) {
    intervalUs = Math.floor(intervalNsTotal / 1000);
    intervalNs = intervalNsTotal - intervalUs * 1000;
  } else {
    // Beyond 2^53 the f64 quotient is itself an integer; split it exactly.
    const big = BigInt(intervalNsTotal);
    intervalUs = Number(big / 1000n);
    intervalNs = Number(big % 1000n);
  }
  // If intervalUs·limit is past 2^53 it is inexact, but then also far past the bound.
  mul(intervalUs, intervalNs, limit);
  const toleranceUs = result[0];
  const toleranceNs = result[1];
  if (!(toleranceUs <= MAX_TOLERANCE_US)) return 'tolerance-overflow';
  return { limit, intervalUs, intervalNs, toleranceUs, toleranceNs };
}

/** Whole seconds the way redis-cell reports a duration: truncated, +1 if a whole ms is left over. */
function cellSeconds(us: number, ns: number): number {
  const totalUs = truncUs(us, ns);
  const secs = Math.trunc(totalUs / 1e6);
  const msPart = Math.trunc(totalUs / 1000) % 1000;
  return msPart > 0 ? secs + 1 : secs;
}

/** The duration (us, ns) truncated toward zero to whole microseconds (Rust's num_microseconds). */
function truncUs(us: number, ns: number): number {
  return us < 0 && ns > 0 ? us + 1 : us;
}

/**
 * Decides one CL.THROTTLE call.
 * @param hasTat whether the key exists; then `tatUs`/`tatNs` is its stored TAT.
 * @param nowUs the server time in whole µs.
 */
export function cellThrottle(
  p: CellParams,
  quantity: number,
  hasTat: boolean,
  tatUs: number,
  tatNs: number,
  nowUs: number,
  out: Decision,
): void {
  if (!hasTat) {
    tatUs = nowUs;
    tatNs = 0;
  }
  if (p.intervalNs === 0 && tatNs === 0) {
    cellThrottleWholeUs(p, quantity, tatUs, nowUs, out);
    return;
  }
  out.limit = p.limit;
  out.retryAfter = -1;
  out.write = false;

  // ttl is the duration reported as reset_after; it starts as tat − now for refused calls.
  let ttlUs: number;
  let ttlNs: number;

  if (quantity > p.limit) {
    // increment T·q exceeds τ (T ≥ 1 ns): it can never be allowed (and T·q could overflow i64 in
    // redis-cell).
    out.limited = true;
    sub(tatUs, tatNs, nowUs, 0);
    ttlUs = result[0];
    ttlNs = result[1];
  } else {
    // increment = T·quantity; quantity ≤ limit, so T·quantity ≤ τ and its µs part is exact.
    mul(p.intervalUs, p.intervalNs, quantity);
    const incUs = result[0];
    const incNs = result[1];
    // new_tat = max(now, tat) + increment
    const tatAhead = tatUs > nowUs || (tatUs === nowUs && tatNs > 0);
    if (tatAhead) add(tatUs, tatNs, incUs, incNs);
    else add(nowUs, 0, incUs, incNs);
    const newUs = result[0];
    const newNs = result[1];
    // diff = now − (new_tat − τ)
    sub(newUs, newNs, p.toleranceUs, p.toleranceNs);
    const allowUs = result[0];
    const allowNs = result[1];
    sub(nowUs, 0, allowUs, allowNs);
    const diffUs = result[0];
    const diffNs = result[1];
    if (diffUs < 0) {
      out.limited = true;
      const incWithinTolerance = incUs < p.toleranceUs || (incUs === p.toleranceUs && incNs <= p.toleranceNs);
      if (incWithinTolerance) {
        sub(0, 0, diffUs, diffNs);
        const waitUs = result[0];
        const waitNs = result[1];
        out.retryAfter = cellSeconds(waitUs, waitNs);
      }
      sub(tatUs, tatNs, nowUs, 0);
      ttlUs = result[0];
      ttlNs = result[1];
    } else {
      out.limited = false;
      sub(newUs, newNs, nowUs, 0);
      ttlUs = result[0];
      ttlNs = result[1];
      out.write = true;
      out.a = newUs;
      out.b = newNs;
      out.c = 0;
      // The key's TTL: whole ms of (new_tat − now), added to the truncated millisecond clock.
      out.expireAtMs = Math.floor(nowUs / 1000) + Math.trunc(truncUs(ttlUs, ttlNs) / 1000);
    }
  }

  // remaining = trunc(µs(τ − ttl) / µs(T)) when τ − ttl > −T, computed in f64 as redis-cell does.
  sub(p.toleranceUs, p.toleranceNs, ttlUs, ttlNs);
  const nextUs = result[0];
  const nextNs = result[1];
  add(nextUs, nextNs, p.intervalUs, p.intervalNs);
  const probeUs = result[0];
  const probeNs = result[1];
  const nextAboveMinusT = probeUs > 0 || (probeUs === 0 && probeNs > 0);
  if (nextAboveMinusT) {
    const intervalWholeUs = p.intervalUs;
    const nextWholeUs = truncUs(nextUs, nextNs);
    // f64 division then `as i64`: x/0 saturates to i64::MAX, 0/0 (NaN) becomes 0.
    out.remaining = intervalWholeUs === 0 ? (nextWholeUs > 0 ? Number.MAX_VALUE : 0) : Math.trunc(nextWholeUs / intervalWholeUs);
    // redis-cell answers −1 when τ − ttl lies in (−T, −⌊T⌋µs], which only a key written with a larger
    // tolerance (other parameters before) can reach; a remaining below 0 means nothing to a caller.
    if (out.remaining < 0) out.remaining = 0;
  } else {
    out.remaining = 0;
  }
  out.resetAfter = cellSeconds(ttlUs, ttlNs);
}

/**
 * cellThrottle when every duration is a whole number of µs: T has no ns part (then neither has
 * τ = T·limit, nor T·quantity) and neither has the stored TAT. Which is the usual case (1000 per 60 s:
 * T = 60 ms) and then the (µs, ns) pairs above all carry ns = 0: the same steps on plain numbers, the
 * same results (test/limiters checks both paths against the reference).
 */
function cellThrottleWholeUs(p: CellParams, quantity: number, tatUs: number, nowUs: number, out: Decision): void {
  out.limit = p.limit;
  out.retryAfter = -1;
  out.write = false;
  const intervalUs = p.intervalUs;
  const toleranceUs = p.toleranceUs;
  let ttlUs: number;
  if (quantity > p.limit) {
    out.limited = true;
    ttlUs = tatUs - nowUs;
  } else {
    const incUs = intervalUs * quantity;
    const newUs = (tatUs > nowUs ? tatUs : nowUs) + incUs;
    const diffUs = nowUs - (newUs - toleranceUs);
    if (diffUs < 0) {
      out.limited = true;
      if (incUs <= toleranceUs) out.retryAfter = wholeSeconds(-diffUs);
      ttlUs = tatUs - nowUs;
    } else {
      out.limited = false;
      ttlUs = newUs - nowUs;
      out.write = true;
      out.a = newUs;
      out.b = 0;
      out.c = 0;
      out.expireAtMs = Math.floor(nowUs / 1000) + Math.trunc(ttlUs / 1000);
    }
  }
  const nextUs = toleranceUs - ttlUs;
  if (nextUs + intervalUs > 0) {
    out.remaining = intervalUs === 0 ? (nextUs > 0 ? Number.MAX_VALUE : 0) : Math.trunc(nextUs / intervalUs);
    if (out.remaining < 0) out.remaining = 0;
  } else {
    out.remaining = 0;
  }
  out.resetAfter = wholeSeconds(ttlUs);
}

/** cellSeconds(us, 0). */
function wholeSeconds(us: number): number {
  const secs = Math.trunc(us / 1e6);
  return Math.trunc(us / 1000) % 1000 > 0 ? secs + 1 : secs;
}

/**
 * (us, ns) × n for an integer n ≥ 0, exactly: ns·n alone can pass 2^53 (T with an odd ns part and
 * a limit in the quadrillions) and would be rounded, so n is split into thousands and units.
 */
function mul(us: number, ns: number, n: number): void {
  const thousands = Math.floor(n / 1000);
  const units = n - thousands * 1000;
  const unitsNs = ns * units; // < 10^6
  result[0] = us * n + ns * thousands + Math.floor(unitsNs / 1000);
  result[1] = unitsNs % 1000;
}

/** (aUs, aNs) + (bUs, bNs), normalised so the ns part is in 0..999. */
function add(aUs: number, aNs: number, bUs: number, bNs: number): void {
  const ns = aNs + bNs;
  const carry = ns >= 1000 ? 1 : 0;
  result[0] = aUs + bUs + carry;
  result[1] = ns - carry * 1000;
}

/** (aUs, aNs) − (bUs, bNs), normalised so the ns part is in 0..999. */
function sub(aUs: number, aNs: number, bUs: number, bNs: number): void {
  const ns = aNs - bNs;
  const borrow = ns < 0 ? 1 : 0;
  result[0] = aUs - bUs - borrow;
  result[1] = ns + borrow * 1000;
}
