/**
 * Fixed window counter (`RL.FIXEDWINDOW`): at most `limit` units in each window
 * [k·period_ms, (k+1)·period_ms), windows aligned to the Unix epoch.
 *
 * State: A = start of the window the count belongs to (ms), B = units admitted in it. The key
 * expires at the end of that window; a count from an older window reads as 0.
 *
 * A forced charge (`COST n FORCE`) is counted even past the limit, as envoyproxy/ratelimit's INCRBY
 * counts: the window is over for the rest of its period, and its debt ends with it (the next window
 * starts empty, as every window does). The count saturates at MAX_SCALED, beyond any limit: a count
 * that large refuses every call of the window, as the exact one would.
 */
import { MAX_SCALED } from './rate-decision.js';
import { peekDecision, RefundEffect, type Decision } from './decision.js';
import { limitProduct, meterStateProblem, noCommit, luaSections, type Algorithm } from './algorithm.js';
import { lua } from './fixed-window.lua.js';

export function fixedWindowDecide(
  limit: number, periodMs: number, cost: number,
  hasKey: boolean, a: number, b: number, nowMs: number, out: Decision, force = false,
): void {
  let windowStartMs = nowMs - (nowMs % periodMs);
  // A clock set backwards (DEBUG CLOCK SET) stays in the stored window.
  if (hasKey && a > windowStartMs) windowStartMs = a;
  const count = hasKey && a === windowStartMs ? b : 0;
  const windowEndMs = windowStartMs + periodMs;
  const untilEndMs = windowEndMs - nowMs;
  // A count written with a larger limit can exceed this call's: nothing left, never less.
  const spendable = count < limit ? limit - count : 0;
  if (cost === 0) {
    peekDecision(out, limit, spendable, count > 0 ? untilEndMs : 0);
    return;
  }
  out.limit = limit;
  out.delayMs = 0;
  if (count + cost <= limit) {
    out.limited = false;
    out.retryAfter = -1;
    out.remaining = limit - count - cost;
    out.resetAfter = untilEndMs;
    out.write = true;
    out.a = windowStartMs;
    out.b = count + cost;
    out.c = 0;
    out.expireAtMs = windowEndMs;
  } else if (force) {
    out.limited = true;
    out.remaining = 0;
    // The next window starts empty: a unit fits at its start.
    out.retryAfter = untilEndMs;
    out.resetAfter = untilEndMs;
    out.write = true;
    out.a = windowStartMs;
    // count + cost beyond 2^53 is inexact, but then above the cap anyway.
    out.b = count + cost < MAX_SCALED ? count + cost : MAX_SCALED;
    out.c = 0;
    out.expireAtMs = windowEndMs;
  } else {
    out.limited = true;
    out.write = false;
    out.remaining = spendable;
    // The next window starts empty: any cost up to `limit` fits there.
    out.retryAfter = cost > limit ? -1 : untilEndMs;
    out.resetAfter = count > 0 ? untilEndMs : 0;
  }
}

/**
 * Gives `units` (≥ 1) back to the current window: its count minus units, never below 0. A count of
 * an older window (or of another period) is not this window's: nothing changes.
 */
export function fixedWindowRefund(
  periodMs: number, units: number,
  hasKey: boolean, a: number, b: number, nowMs: number, out: Decision,
): RefundEffect {
  if (!hasKey) return RefundEffect.None;
  let windowStartMs = nowMs - (nowMs % periodMs);
  if (a > windowStartMs) windowStartMs = a;
  if (a !== windowStartMs || b === 0) return RefundEffect.None;
  if (units >= b) return RefundEffect.Delete;
  out.a = windowStartMs;
  out.b = b - units;
  out.c = 0;
  out.expireAtMs = windowStartMs + periodMs;
  return RefundEffect.Write;
}

/** `RL.FIXEDWINDOW`. */
export const fixedWindow: Algorithm = {
  name: 'FIXEDWINDOW', typeName: 'fixedwindow', configName: 'fixed_window', type: 4, op: 'f', ...luaSections(lua), reply: 'rl-ms',
  acceptsBurst: false, maxLimit: MAX_SCALED, readsC: false, hasBlob: false,
  checkParams: limitProduct,
  decide: (p, cost, has, a, b, _c, _blob, nowMs, _nowUs, out) => fixedWindowDecide(p.limit, p.periodMs, cost, has, a, b, nowMs, out, p.force),
  commit: noCommit,
  refund: (p, units, has, a, b, _c, _blob, nowMs, _nowUs, out) => fixedWindowRefund(p.periodMs, units, has, a, b, nowMs, out),
  stateProblem: (expireAtMs, a, b, c) => meterStateProblem('fixedwindow', false, expireAtMs, a, b, c),
  summary: 'Fixed window counter: at most limit per window aligned to multiples of period_ms.',
  complexity: 'O(1)',
  warmupArgs: ['100', '60000'],
};
