/**
 * Token bucket (`RL.TOKENBUCKET`): capacity `burst` tokens, refilled continuously at
 * `limit / period_ms` tokens per ms; a new key starts full.
 *
 * Exact scheme: a token is worth `period_ms` scaled units and the bucket refills `limit` scaled
 * units per millisecond, so every quantity is an integer. The state is the bucket's *deficit* (how
 * many scaled units it is short of full) at the time of the last write:
 *   A = time of the last write (ms), B = deficit in scaled units (0 ≤ B ≤ burst·period_ms).
 * A full bucket has deficit 0, so a fresh key and an expired one are the same thing, and the key
 * expires exactly when the deficit has drained: after ⌈B / limit⌉ ms.
 *
 * The leaky bucket (leaky-bucket.ts) is this same meter read the other way round (the deficit is the
 * queue), plus the delay each accepted request is told.
 *
 * A forced charge (`COST n FORCE`: usage reported after the fact) is recorded even when it does not
 * fit: the deficit goes beyond the capacity (the bucket below zero, a debt) and the next request waits
 * until the debt and its own cost have drained. The deficit saturates at MAX_SCALED scaled units.
 */
import { ceilDiv, floorDiv, MAX_SCALED } from './rate-decision.js';
import { peekDecision, RefundEffect, type Decision } from './decision.js';
import { burstProduct, meterStateProblem, noCommit, luaSections, type Algorithm } from './algorithm.js';
import { lua } from './token-bucket.lua.js';

/** The deficit at `nowMs` of a bucket that had `deficit` at `sinceMs`, drained at `limit` per ms. */
export function drainedDeficit(deficit: number, sinceMs: number, nowMs: number, limit: number): number {
  if (deficit === 0) return 0;
  const elapsedMs = nowMs > sinceMs ? nowMs - sinceMs : 0;
  // elapsed·limit is only formed when it is below the deficit (plus one step), so it stays exact.
  return elapsedMs >= ceilDiv(deficit, limit) ? 0 : deficit - elapsedMs * limit;
}

/**
 * Decides one call. `hasKey` says whether the key exists; then `a`/`b` are its state fields.
 * Writes the decision, and the new state when `out.write`, into `out`.
 * Preconditions (checked by the command layer): limit, periodMs, burst ≥ 1, cost ≥ 0,
 * burst·periodMs ≤ MAX_SCALED.
 */
export function tokenBucketDecide(
  limit: number, periodMs: number, burst: number, cost: number,
  hasKey: boolean, a: number, b: number, nowMs: number, out: Decision, force = false,
): void {
  const capacity = burst * periodMs;
  // A clock set backwards (DEBUG CLOCK SET) is treated as no time passing: the bucket is read at the
  // time of its last write, and every wait is counted from now, so it includes the step back.
  const atMs = hasKey && a > nowMs ? a : nowMs;
  const aheadMs = atMs - nowMs;
  const deficit = hasKey ? drainedDeficit(b, a, atMs, limit) : 0;
  if (cost === 0) {
    peekDecision(out, burst, spendableUnits(capacity, deficit, periodMs), deficit > 0 ? aheadMs + ceilDiv(deficit, limit) : 0);
    return;
  }
  out.limit = burst;
  out.delayMs = 0;
  const needed = deficit + cost * periodMs;
  if (cost <= burst && needed <= capacity) {
    out.limited = false;
    out.retryAfter = -1;
    out.remaining = floorDiv(capacity - needed, periodMs);
    out.write = true;
    out.a = atMs;
    out.b = needed;
    out.c = 0;
    out.expireAtMs = atMs + ceilDiv(needed, limit);
    out.resetAfter = out.expireAtMs - nowMs;
    return;
  }
  out.limited = true;
  if (force) {
    // Recorded as debt: a product beyond 2^53 is inexact, but it is then above the cap anyway.
    const owed = needed < MAX_SCALED ? needed : MAX_SCALED;
    out.write = true;
    out.remaining = 0;
    out.a = atMs;
    out.b = owed;
    out.c = 0;
    out.expireAtMs = atMs + ceilDiv(owed, limit);
    out.resetAfter = out.expireAtMs - nowMs;
    // Until one unit fits again: the debt repaid, then that unit's refill.
    out.retryAfter = aheadMs + ceilDiv(owed + periodMs - capacity, limit);
    return;
  }
  out.write = false;
  out.remaining = spendableUnits(capacity, deficit, periodMs);
  out.resetAfter = deficit > 0 ? aheadMs + ceilDiv(deficit, limit) : 0;
  // More than the bucket can ever hold: refused for good. Else the deficit must drain by
  // needed − capacity scaled units, `limit` per ms, from atMs on.
  out.retryAfter = cost > burst ? -1 : aheadMs + ceilDiv(needed - capacity, limit);
}

/**
 * Whole tokens in a bucket of `capacity` short of `deficit` (scaled units). A key written with a
 * larger BURST (or another period) can be short of more than this call's capacity: nothing is
 * spendable then, never a negative amount.
 */
function spendableUnits(capacity: number, deficit: number, periodMs: number): number {
  return deficit < capacity ? floorDiv(capacity - deficit, periodMs) : 0;
}

/**
 * Gives `units` (≥ 1) tokens back: the deficit shrinks by units·period_ms scaled units, never below 0
 * (a bucket is never fuller than BURST). The new state goes in `out.a`/`out.b`, with its expiry in
 * `out.expireAtMs`, exactly as a decision leaving that deficit would store it. Also the leaky bucket's
 * refund (the same meter: `units` queued places are freed).
 */
export function tokenBucketRefund(
  limit: number, periodMs: number, units: number,
  hasKey: boolean, a: number, b: number, nowMs: number, out: Decision,
): RefundEffect {
  if (!hasKey) return RefundEffect.None;
  const atMs = a > nowMs ? a : nowMs;
  const deficit = drainedDeficit(b, a, atMs, limit);
  // units·period_ms is formed only when it is below the deficit (plus one token), so it stays exact.
  if (units >= ceilDiv(deficit, periodMs)) return RefundEffect.Delete;
  const left = deficit - units * periodMs;
  out.a = atMs;
  out.b = left;
  out.c = 0;
  out.expireAtMs = atMs + ceilDiv(left, limit);
  return RefundEffect.Write;
}

/** `RL.TOKENBUCKET` (the script's branch is also the leaky bucket's). */
export const tokenBucket: Algorithm = {
  name: 'TOKENBUCKET', typeName: 'tokenbucket', configName: 'token_bucket', type: 2, op: 't', ...luaSections(lua), reply: 'rl-ms',
  acceptsBurst: true, maxLimit: MAX_SCALED, readsC: false, hasBlob: false,
  checkParams: burstProduct,
  decide: (p, cost, has, a, b, _c, _blob, nowMs, _nowUs, out) => tokenBucketDecide(p.limit, p.periodMs, p.burst, cost, has, a, b, nowMs, out, p.force),
  commit: noCommit,
  refund: (p, units, has, a, b, _c, _blob, nowMs, _nowUs, out) => tokenBucketRefund(p.limit, p.periodMs, units, has, a, b, nowMs, out),
  stateProblem: (expireAtMs, a, b, c) => meterStateProblem('tokenbucket', false, expireAtMs, a, b, c),
  summary: 'Token bucket: capacity BURST (default limit), refilled at limit per period_ms.',
  complexity: 'O(1)',
  warmupArgs: ['100', '60000'],
};
