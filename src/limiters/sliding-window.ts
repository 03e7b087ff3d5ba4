/**
 * Sliding window counter (`RL.SLIDINGWINDOW`), Cloudflare's weighted estimate: a request of cost c
 * is allowed when prev·(1 − elapsed/period_ms) + current + c ≤ limit, where current counts the
 * aligned window [k·period_ms, (k+1)·period_ms) holding `now`, prev the one before it, and elapsed is
 * the time since the current window began. The estimate is never rounded.
 *
 * Exact scheme: multiplied through by period_ms the rule is
 *   prev·(period_ms − elapsed) + (current + c)·period_ms ≤ limit·period_ms,
 * all integers (limit·period_ms ≤ MAX_SCALED is checked by the command layer).
 *
 * State: A = start of the window the current count belongs to (ms), B = that count, C = the count of
 * the window before it. A key written in window k lives to the end of window k+1, when both counts
 * have slid out.
 *
 * A forced charge (`COST n FORCE`) is counted in the current window even past the limit: it weighs
 * on the estimate of this window and the next, so calls wait until it has slid out enough.
 */
import { ceilDiv, floorDiv, MAX_SCALED } from './rate-decision.js';
import { peekDecision, RefundEffect, type Decision } from './decision.js';
import { limitProduct, meterStateProblem, noCommit, luaSections, type Algorithm } from './algorithm.js';
import { lua } from './sliding-window.lua.js';

export function slidingWindowDecide(
  limit: number, periodMs: number, cost: number,
  hasKey: boolean, a: number, b: number, c: number, nowMs: number, out: Decision, force = false,
): void {
  // A clock set backwards (DEBUG CLOCK SET) before the stored window's start is treated as no time
  // passing: the counts are read at that start. (A start that is not a multiple of period_ms was
  // written with another period and matches no window: its counts are not this limit's.)
  const atMs = hasKey && a > nowMs ? a : nowMs;
  const windowStartMs = atMs - (atMs % periodMs);
  let current = 0;
  let previous = 0;
  if (hasKey) {
    if (a === windowStartMs) {
      current = b;
      previous = c;
    } else if (a + periodMs === windowStartMs) {
      previous = b;
    }
  }
  const elapsedMs = atMs - windowStartMs;
  // A previous count beyond the limit (a forced charge's debt) can make the product inexact; the
  // budget is then negative all the same (rounding is monotonic and limit·period_ms an exact
  // double): nothing is spendable, as exactly.
  const budget = limit * periodMs - previous * (periodMs - elapsedMs);
  const spendable = Math.max(0, (budget > 0 ? floorDiv(budget, periodMs) : -ceilDiv(-budget, periodMs)) - current);
  // Fresh again once every count has slid out of the previous window.
  const resetAfterMs = current > 0 ? windowStartMs + 2 * periodMs - nowMs : previous > 0 ? windowStartMs + periodMs - nowMs : 0;
  if (cost === 0) {
    peekDecision(out, limit, spendable, resetAfterMs);
    return;
  }
  out.limit = limit;
  out.delayMs = 0;
  if (cost <= spendable) {
    out.limited = false;
    out.retryAfter = -1;
    out.remaining = spendable - cost;
    out.resetAfter = windowStartMs + 2 * periodMs - nowMs;
    out.write = true;
    out.a = windowStartMs;
    out.b = current + cost;
    out.c = previous;
    out.expireAtMs = windowStartMs + 2 * periodMs;
    return;
  }
  out.limited = true;
  if (force) {
    // Recorded in the current window beyond the limit: it weighs on this window and the next as any
    // count does. Saturated at MAX_SCALED (≥ limit·period_ms: a previous count that large already
    // refuses the whole next window, as the exact one would).
    const recorded = current + cost < MAX_SCALED ? current + cost : MAX_SCALED;
    out.remaining = 0;
    out.resetAfter = windowStartMs + 2 * periodMs - nowMs;
    out.write = true;
    out.a = windowStartMs;
    out.b = recorded;
    out.c = previous;
    out.expireAtMs = windowStartMs + 2 * periodMs;
    // Until one unit fits again on the new state.
    out.retryAfter = slidingWindowWait(limit, periodMs, 1, recorded, previous, windowStartMs, nowMs);
    return;
  }
  out.write = false;
  out.remaining = spendable;
  out.resetAfter = resetAfterMs;
  out.retryAfter = cost > limit ? -1 : slidingWindowWait(limit, periodMs, cost, current, previous, windowStartMs, nowMs);
}

/**
 * The wait (ms from nowMs) until a call of `cost` ≤ limit fits, with `current` counted in the window
 * starting at windowStartMs and `previous` in the one before, when it does not fit now.
 */
function slidingWindowWait(
  limit: number, periodMs: number, cost: number, current: number, previous: number, windowStartMs: number, nowMs: number,
): number {
  // Later in this window: prev·(period − e) ≤ (limit − current − cost)·period, e integer.
  const room = limit - current - cost;
  if (room >= 0 && previous > 0) {
    const elapsedNeededMs = periodMs - floorDiv(room * periodMs, previous);
    if (elapsedNeededMs < periodMs) return windowStartMs + elapsedNeededMs - nowMs;
  }
  // In the next window the current count becomes the previous one and the new count starts at 0.
  const nextElapsedMs = current === 0 ? 0 : Math.max(0, periodMs - floorDiv((limit - cost) * periodMs, current));
  return windowStartMs + periodMs + nextElapsedMs - nowMs;
}

/**
 * Gives `units` (≥ 1) back to the current window: its count minus units, never below 0; the previous
 * window's count is history and stays. When the current count reaches 0 the state is stored as the
 * previous window's alone (A = its start, B = its count, C = 0), the form a decision in that window
 * would have left, expiring when it slides out; with both counts 0 the key is fresh and deleted.
 */
export function slidingWindowRefund(
  periodMs: number, units: number,
  hasKey: boolean, a: number, b: number, c: number, nowMs: number, out: Decision,
): RefundEffect {
  if (!hasKey) return RefundEffect.None;
  const atMs = a > nowMs ? a : nowMs;
  const windowStartMs = atMs - (atMs % periodMs);
  // Only a key written in this window holds a current count.
  if (a !== windowStartMs || b === 0) return RefundEffect.None;
  if (units < b) {
    out.a = windowStartMs;
    out.b = b - units;
    out.c = c;
    out.expireAtMs = windowStartMs + 2 * periodMs;
    return RefundEffect.Write;
  }
  if (c === 0) return RefundEffect.Delete;
  out.a = windowStartMs - periodMs;
  out.b = c;
  out.c = 0;
  out.expireAtMs = windowStartMs + periodMs;
  return RefundEffect.Write;
}

/** `RL.SLIDINGWINDOW`. */
export const slidingWindow: Algorithm = {
  name: 'SLIDINGWINDOW', typeName: 'slidingwindow', configName: 'sliding_window', type: 6, op: 'w', ...luaSections(lua), reply: 'rl-ms',
  acceptsBurst: false, maxLimit: MAX_SCALED, readsC: true, hasBlob: false,
  checkParams: limitProduct,
  decide: (p, cost, has, a, b, c, _blob, nowMs, _nowUs, out) => slidingWindowDecide(p.limit, p.periodMs, cost, has, a, b, c, nowMs, out, p.force),
  commit: noCommit,
  refund: (p, units, has, a, b, c, _blob, nowMs, _nowUs, out) => slidingWindowRefund(p.periodMs, units, has, a, b, c, nowMs, out),
  stateProblem: (expireAtMs, a, b, c) => meterStateProblem('slidingwindow', true, expireAtMs, a, b, c),
  summary: "Sliding window counter (Cloudflare's weighted estimate of the last period_ms).",
  complexity: 'O(1)',
  warmupArgs: ['100', '60000', 'COST', '2'],
};
