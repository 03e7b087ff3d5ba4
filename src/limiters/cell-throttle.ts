/**
 * redis-cell 0.5's GCRA (`CL.THROTTLE`), reproduced to the nanosecond.
 *
 * redis-cell computes in i64 nanoseconds. Absolute instants in nanoseconds (~1.8e18) do not fit a
 * double exactly, so every instant and duration here is a pair: whole microseconds (an integer
 * double, exact below 2^53 µs ≈ 285 years) and the nanoseconds beyond them (0..999). The server
 * clock has microsecond resolution, so `now` never has a nanosecond part; the emission interval
 * T = trunc(period·1e9 / count) does.
 *
 * The quirks the recorded vectors pin down (shared/vectors/README.md) are all here on purpose:
 * seconds rounded up only when at least one whole millisecond is left over; `remaining` computed
 * from microsecond-truncated durations in f64; the key's TTL truncated to whole milliseconds and
 * added to the truncated millisecond clock; quantity 0 re-storing the TAT; quantity > limit
 * refused with retry −1 and nothing written.
 */

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

/** What a call decided. Reused between calls (no allocation per request). */
export interface CellDecision {
  limited: boolean;
  limit: number;
  remaining: number;
  retryAfterSec: number;
  resetAfterSec: number;
  /** When true the key must be stored with this TAT and absolute expiry. */
  write: boolean;
  tatUs: number;
  tatNs: number;
  expireAtMs: number;
}

export function newCellDecision(): CellDecision {
  return { limited: false, limit: 0, remaining: 0, retryAfterSec: -1, resetAfterSec: 0, write: false, tatUs: 0, tatNs: 0, expireAtMs: 0 };
}

/** The longest tolerance (T·limit) accepted: 100 years, well inside exact double arithmetic. */
export const MAX_TOLERANCE_US = 100 * 365 * 86400 * 1e6;

/**
 * Derives T and τ exactly as redis-cell: `(period_ns as f64 / count as f64) as i64`. Returns null
 * when τ would exceed MAX_TOLERANCE_US (redis-cell overflows or panics there).
 */
export function cellParams(maxBurst: number, count: number, periodSec: number): CellParams | null {
  const limit = maxBurst + 1;
  const intervalNsTotal = Math.trunc((periodSec * 1e9) / count);
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
  const subTotal = intervalNs * limit;
  const toleranceUs = intervalUs * limit + Math.floor(subTotal / 1000);
  if (!(toleranceUs <= MAX_TOLERANCE_US)) return null;
  return { limit, intervalUs, intervalNs, toleranceUs, toleranceNs: subTotal % 1000 };
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
  out: CellDecision,
): void {
  if (!hasTat) {
    tatUs = nowUs;
    tatNs = 0;
  }
  out.limit = p.limit;
  out.retryAfterSec = -1;
  out.write = false;

  // ttl is the duration reported as reset_after; it starts as tat − now for refused calls.
  let ttlUs: number;
  let ttlNs: number;
  const tIsZero = p.intervalUs === 0 && p.intervalNs === 0;

  if (quantity > p.limit && !tIsZero) {
    // increment T·q exceeds τ: it can never be allowed (and T·q could overflow i64 in redis-cell).
    out.limited = true;
    [ttlUs, ttlNs] = sub(tatUs, tatNs, nowUs, 0);
  } else {
    // increment = T·quantity
    const incSub = p.intervalNs * quantity;
    const incUs = p.intervalUs * quantity + Math.floor(incSub / 1000);
    const incNs = incSub % 1000;
    // new_tat = max(now, tat) + increment
    const tatAhead = tatUs > nowUs || (tatUs === nowUs && tatNs > 0);
    const [newUs, newNs] = tatAhead ? add(tatUs, tatNs, incUs, incNs) : add(nowUs, 0, incUs, incNs);
    // diff = now − (new_tat − τ)
    const [allowUs, allowNs] = sub(newUs, newNs, p.toleranceUs, p.toleranceNs);
    const [diffUs, diffNs] = sub(nowUs, 0, allowUs, allowNs);
    if (diffUs < 0) {
      out.limited = true;
      const incWithinTolerance = incUs < p.toleranceUs || (incUs === p.toleranceUs && incNs <= p.toleranceNs);
      if (incWithinTolerance) {
        const [waitUs, waitNs] = sub(0, 0, diffUs, diffNs);
        out.retryAfterSec = cellSeconds(waitUs, waitNs);
      }
      [ttlUs, ttlNs] = sub(tatUs, tatNs, nowUs, 0);
    } else {
      out.limited = false;
      [ttlUs, ttlNs] = sub(newUs, newNs, nowUs, 0);
      out.write = true;
      out.tatUs = newUs;
      out.tatNs = newNs;
      // The key's TTL: whole ms of (new_tat − now), added to the truncated millisecond clock.
      out.expireAtMs = Math.floor(nowUs / 1000) + Math.trunc(truncUs(ttlUs, ttlNs) / 1000);
    }
  }

  // remaining = trunc(µs(τ − ttl) / µs(T)) when τ − ttl > −T, computed in f64 as redis-cell does.
  const [nextUs, nextNs] = sub(p.toleranceUs, p.toleranceNs, ttlUs, ttlNs);
  const [probeUs, probeNs] = add(nextUs, nextNs, p.intervalUs, p.intervalNs);
  const nextAboveMinusT = probeUs > 0 || (probeUs === 0 && probeNs > 0);
  if (nextAboveMinusT) {
    const intervalWholeUs = p.intervalUs;
    const nextWholeUs = truncUs(nextUs, nextNs);
    // f64 division then `as i64`: x/0 saturates to i64::MAX, 0/0 (NaN) becomes 0.
    out.remaining = intervalWholeUs === 0 ? (nextWholeUs > 0 ? Number.MAX_VALUE : 0) : Math.trunc(nextWholeUs / intervalWholeUs);
  } else {
    out.remaining = 0;
  }
  out.resetAfterSec = cellSeconds(ttlUs, ttlNs);
}

/** (aUs, aNs) + (bUs, bNs), normalised so the ns part is in 0..999. */
function add(aUs: number, aNs: number, bUs: number, bNs: number): [number, number] {
  const ns = aNs + bNs;
  return ns >= 1000 ? [aUs + bUs + 1, ns - 1000] : [aUs + bUs, ns];
}

/** (aUs, aNs) − (bUs, bNs), normalised so the ns part is in 0..999. */
function sub(aUs: number, aNs: number, bUs: number, bNs: number): [number, number] {
  const ns = aNs - bNs;
  return ns < 0 ? [aUs - bUs - 1, ns + 1000] : [aUs - bUs, ns];
}
