/**
 * RL.GCRA: redis-cell's GCRA (cell-throttle.ts) with millisecond parameters and reply fields.
 *
 * `RL.GCRA k L P [BURST b]` ≡ `CL.THROTTLE k b−1 L P/1000` (b defaults to L): emission interval
 * T = ⌊P·10^6 / L⌋ ns (redis-cell's `(period_ns as f64 / count as f64) as i64`; for P·10^6 < 2^53 the
 * float quotient truncates to the exact floor), tolerance τ = T·b. The decision, the stored TAT
 * (shared with CL.THROTTLE and GCRA keys: A = TAT whole µs, B = TAT extra ns) and `remaining` are
 * cellThrottle's. `remaining` is computed exactly (⌊(τ − max(0, TAT' − now)) / T⌋: whole units
 * spendable now), not with redis-cell's microsecond-truncated f64 division, which can exceed the burst
 * after a stale TAT. The millisecond fields are derived from the exact nanosecond durations, rounded up
 * to whole ms (not from redis-cell's seconds, whose rounding is its own):
 *   retry_after_ms = ⌈(max(now, TAT) + T·cost − τ − now) / 1 ms⌉,
 *   reset_after_ms = ⌈(TAT' − now) / 1 ms⌉ (TAT' the TAT after the call),
 * and the key expires at ⌊now⌋ms + reset_after_ms, so TTL equals reset_after_ms.
 *
 * A forced charge (`COST n FORCE`) that does not fit moves the TAT anyway, beyond the burst
 * (TAT' = max(now, TAT) + T·cost, a debt): calls wait until TAT' + T − τ. The TAT's lead over now is
 * capped at τ + MAX_TOLERANCE_US (100 years beyond the burst), so it stays an exact double.
 */
import { cellThrottle, MAX_TOLERANCE_US, type CellParams } from './cell-throttle.js';
import { ceilDiv, MAX_SCALED } from './rate-decision.js';
import { newDecision, RefundEffect, type Decision } from './decision.js';
import { isIntIn, luaSections, noCommit, ParamsProblem, type Algorithm } from './algorithm.js';
import { lua } from './gcra-ms.lua.js';

/** Why RL.GCRA parameters are refused: more than 10^9 per second, or τ beyond 100 years. */
export type GcraMsParamsError = 'zero-interval' | 'tolerance-overflow';

/** Fills `p` for limit L per `periodMs` with capacity `burst`; returns an error or null. */
export function gcraMsParams(limit: number, periodMs: number, burst: number, p: CellParams): GcraMsParamsError | null {
  const periodNs = periodMs * 1e6;
  let intervalUs: number;
  let intervalNs: number;
  if (periodNs <= Number.MAX_SAFE_INTEGER) {
    const t = Math.trunc(periodNs / limit);
    if (t === 0) return 'zero-interval';
    intervalUs = Math.floor(t / 1000);
    intervalNs = t - intervalUs * 1000;
  } else {
    const t = BigInt(periodMs) * 1_000_000n / BigInt(limit);
    if (t === 0n) return 'zero-interval';
    intervalUs = Number(t / 1000n);
    intervalNs = Number(t % 1000n);
  }
  // τ = T·burst exactly: the ns part times burst is split into thousands and units.
  const thousands = Math.floor(burst / 1000);
  const unitsNs = intervalNs * (burst - thousands * 1000);
  const toleranceUs = intervalUs * burst + intervalNs * thousands + Math.floor(unitsNs / 1000);
  if (!(toleranceUs <= MAX_TOLERANCE_US)) return 'tolerance-overflow';
  p.limit = burst;
  p.intervalUs = intervalUs;
  p.intervalNs = intervalNs;
  p.toleranceUs = toleranceUs;
  p.toleranceNs = unitsNs % 1000;
  return null;
}

export function newGcraMsParams(): CellParams {
  return { limit: 0, intervalUs: 0, intervalNs: 0, toleranceUs: 0, toleranceNs: 0 };
}

const cell = newDecision();

/** A duration of `us` µs + `ns` ns (ns in 0..999) in whole ms, rounded up; 0 when not positive. */
function ceilMs(us: number, ns: number): number {
  if (us < 0 || (us === 0 && ns === 0)) return 0;
  return ceilDiv(us + (ns > 0 ? 1 : 0), 1000);
}

/** Writes T·n (n ≥ 0 an integer) into scratch as [µs, ns], exactly. */
function timesInterval(p: CellParams, n: number): void {
  const thousands = Math.floor(n / 1000);
  const unitsNs = p.intervalNs * (n - thousands * 1000);
  scratch[0] = p.intervalUs * n + p.intervalNs * thousands + Math.floor(unitsNs / 1000);
  scratch[1] = unitsNs % 1000;
}
const scratch = new Float64Array(2);

/** Whole units spendable when the TAT is `ttl` (µs + ns, ns in 0..999) ahead of now. */
function spendable(p: CellParams, ttlUs: number, ttlNs: number): number {
  if (ttlUs < 0) {
    ttlUs = 0;
    ttlNs = 0;
  }
  // x = τ − ttl
  let xUs = p.toleranceUs - ttlUs;
  let xNs = p.toleranceNs - ttlNs;
  if (xNs < 0) {
    xNs += 1000;
    xUs--;
  }
  if (xUs < 0) return 0;
  // A float estimate of x / T, then corrected against exact products.
  let q = Math.min(p.limit, Math.max(0, Math.floor((xUs * 1000 + xNs) / (p.intervalUs * 1000 + p.intervalNs))));
  while (q > 0 && !fitsIn(p, q, xUs, xNs)) q--;
  while (q < p.limit && fitsIn(p, q + 1, xUs, xNs)) q++;
  return q;
}

/** T·n ≤ x? */
function fitsIn(p: CellParams, n: number, xUs: number, xNs: number): boolean {
  timesInterval(p, n);
  return scratch[0] < xUs || (scratch[0] === xUs && scratch[1] <= xNs);
}

/**
 * Decides one RL.GCRA call. `hasKey`: the key exists, with TAT `tatUs` + `tatNs`. COST 0 never
 * writes (unlike CL.THROTTLE's quantity 0, which re-stores the TAT).
 */
export function gcraMsDecide(
  p: CellParams, cost: number, hasKey: boolean, tatUs: number, tatNs: number, nowUs: number, out: Decision, force = false,
): void {
  cellThrottle(p, cost, hasKey, tatUs, tatNs, nowUs, cell);
  if (!hasKey) {
    tatUs = nowUs;
    tatNs = 0;
  }
  if (force && cost > 0 && cell.limited) {
    forcedTat(p, cost, tatUs, tatNs, nowUs, out);
    return;
  }
  out.limit = p.limit;
  out.delayMs = 0;
  out.limited = cost > 0 && cell.limited;
  out.write = cost > 0 && cell.write;
  out.retryAfter = -1;
  if (out.limited && cost <= p.limit) {
    // wait = max(now, TAT) + T·cost − τ − now
    const ahead = tatUs > nowUs || (tatUs === nowUs && tatNs > 0);
    const baseUs = ahead ? tatUs : nowUs;
    const baseNs = ahead ? tatNs : 0;
    timesInterval(p, cost);
    let us = baseUs - nowUs + scratch[0] - p.toleranceUs;
    let ns = baseNs + scratch[1] - p.toleranceNs;
    while (ns >= 1000) { ns -= 1000; us++; }
    while (ns < 0) { ns += 1000; us--; }
    out.retryAfter = ceilMs(us, ns);
  }
  const afterUs = out.write ? cell.a : tatUs;
  const afterNs = out.write ? cell.b : tatNs;
  out.resetAfter = ceilMs(afterUs - nowUs, afterNs);
  out.remaining = spendable(p, afterUs - nowUs, afterNs);
  if (out.write) {
    out.a = cell.a;
    out.b = cell.b;
    out.c = 0;
    out.expireAtMs = Math.floor(nowUs / 1000) + out.resetAfter;
  }
}

/** A forced charge that did not fit: the TAT moves by T·cost from max(now, TAT), capped (see the top). */
function forcedTat(p: CellParams, cost: number, tatUs: number, tatNs: number, nowUs: number, out: Decision): void {
  if (!(tatUs > nowUs || (tatUs === nowUs && tatNs > 0))) {
    tatUs = nowUs;
    tatNs = 0;
  }
  const capUs = nowUs + p.toleranceUs + MAX_TOLERANCE_US;
  // T·cost is formed exactly only when it can be below the cap (then below 2^53 µs): beyond, a float
  // estimate above it is surely above the cap, as max(now, TAT) ≥ now.
  let us: number;
  let ns: number;
  if (cost * (p.intervalUs + p.intervalNs / 1000) > MAX_TOLERANCE_US + p.toleranceUs + 1) {
    us = capUs;
    ns = 0;
  } else {
    timesInterval(p, cost);
    us = tatUs + scratch[0];
    ns = tatNs + scratch[1];
    if (ns >= 1000) {
      ns -= 1000;
      us++;
    }
    if (us >= capUs) {
      us = capUs;
      ns = 0;
    }
  }
  out.limit = p.limit;
  out.delayMs = 0;
  out.limited = true;
  out.write = true;
  out.remaining = 0;
  out.a = us;
  out.b = ns;
  out.c = 0;
  out.resetAfter = ceilMs(us - nowUs, ns);
  out.expireAtMs = Math.floor(nowUs / 1000) + out.resetAfter;
  // Until one unit fits again: now ≥ TAT' + T − τ.
  let wUs = us - nowUs + p.intervalUs - p.toleranceUs;
  let wNs = ns + p.intervalNs - p.toleranceNs;
  while (wNs >= 1000) { wNs -= 1000; wUs++; }
  while (wNs < 0) { wNs += 1000; wUs--; }
  out.retryAfter = ceilMs(wUs, wNs);
}

/**
 * Gives `units` (≥ 1) back to a GCRA key (RL.GCRA's, CL.THROTTLE's and GCRA's: they share the TAT):
 * the TAT moves back by units emission intervals, never before now (a TAT at or before now is a fresh
 * key, so the key is deleted). The new TAT goes in `out.a` (µs) / `out.b` (ns), expiring at
 * ⌊now⌋ms + ⌈(TAT − now) / 1 ms⌉, as gcraMsDecide stores it.
 */
export function gcraMsRefund(
  p: CellParams, units: number, hasKey: boolean, tatUs: number, tatNs: number, nowUs: number, out: Decision,
): RefundEffect {
  if (!hasKey) return RefundEffect.None;
  const aheadUs = tatUs - nowUs;
  if (aheadUs < 0 || (aheadUs === 0 && tatNs === 0)) return RefundEffect.None;
  // T·units is formed exactly only when it can be below the TAT's lead (T ≥ 1 ns, so a float
  // estimate one interval above the lead settles it): otherwise the key is full again.
  if (units * (p.intervalUs + p.intervalNs / 1000) > aheadUs + 1 + p.intervalUs + 1) return RefundEffect.Delete;
  timesInterval(p, units);
  let us = tatUs - scratch[0];
  let ns = tatNs - scratch[1];
  if (ns < 0) {
    ns += 1000;
    us--;
  }
  if (us < nowUs || (us === nowUs && ns === 0)) return RefundEffect.Delete;
  out.a = us;
  out.b = ns;
  out.c = 0;
  out.expireAtMs = Math.floor(nowUs / 1000) + ceilMs(us - nowUs, ns);
  return RefundEffect.Write;
}

/**
 * `RL.GCRA`, and the gcra key type it shares with CL.THROTTLE and GCRA (src/commands/throttle.ts): the
 * type tag, TYPE's name and the stored state's rules are theirs too. The script runs it in
 * CL.THROTTLE's branch (cell-throttle.lua), with millisecond fields; its REFUND is its own (gcra-ms.lua).
 */
export const gcraMs: Algorithm = {
  name: 'GCRA', typeName: 'gcra', configName: 'gcra', type: 1, op: 'r', ...luaSections(lua), reply: 'rl-ms',
  acceptsBurst: true, maxLimit: MAX_SCALED, readsC: false, hasBlob: false,
  checkParams: (limit, periodMs, burst, gcraOut) => {
    const error = gcraMsParams(limit, periodMs, burst, gcraOut);
    if (error === 'zero-interval') return ParamsProblem.ZeroInterval;
    return error === null ? ParamsProblem.None : ParamsProblem.ToleranceOverflow;
  },
  decide: (p, cost, has, a, b, _c, _blob, _nowMs, nowUs, out) => gcraMsDecide(p.gcra, cost, has, a, b, nowUs, out, p.force),
  commit: noCommit,
  refund: (p, units, has, a, b, _c, _blob, _nowMs, nowUs, out) => gcraMsRefund(p.gcra, units, has, a, b, nowUs, out),
  stateProblem: (_expireAtMs, a, b, c) => {
    // A = TAT whole µs, B = its extra ns; past 2^53 µs (redis-gcra.ts's BigInt path) C holds the µs
    // the double A could not.
    if (a > Number.MAX_SAFE_INTEGER && Number.isInteger(a)) {
      if (b !== 0) return `gcra TAT extra nanoseconds ${b} on a TAT past 2^53 µs, expected 0`;
      if (!isIntIn(c, -1024, 1024)) return `gcra TAT remainder ${c} µs is not an integer in [-1024, 1024]`;
      if (BigInt(a) + BigInt(c) > 9223372036854775807n) return `gcra TAT ${BigInt(a) + BigInt(c)} µs is above 2^63 - 1`;
      return null;
    }
    if (!isIntIn(a, 0, Number.MAX_SAFE_INTEGER)) return `gcra TAT ${a} µs is not an integer in [0, 2^63)`;
    if (!isIntIn(b, 0, 999)) return `gcra TAT extra nanoseconds ${b} is not an integer in [0, 999]`;
    if (c !== 0) return `gcra state C is ${c}, expected 0 below 2^53 µs`;
    return null;
  },
  summary: 'GCRA with millisecond fields (shares keys with CL.THROTTLE and GCRA).',
  complexity: 'O(1)',
  warmupArgs: ['100', '60000'],
};
